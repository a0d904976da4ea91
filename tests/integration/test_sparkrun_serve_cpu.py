"""The cpu-3.73 image started the way sparkrun starts it: `docker run ... IMAGE bash -c
"<the recipe's command>"`, the line sparkrun's own Docker executor writes for a CPU host
(sparkrun_launch.py, run by sparkrun in a container of the tag's trixie base) for the recipe
`recipe_for` makes of the tag (its local image, a tiny model's folder), run here as sparkrun
runs it on a node.

It serves: ready at the first streamed token, by sparkrun's own readiness probe (its
streamed chat, through the tiny model's chat template) and by ours, and a completion our
serve checks accept. The recipe's command is the image's entrypoint, so under `bash -c` it
hands vLLM each argument once, as when it is given the same arguments directly, and runs the
preflight before vLLM: a bad env under the recipe's command is refused with exit 2 and vLLM
never starts. The image is
built first if it is not; run by `nox -s serve-cpu`, not at every landing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import yaml

from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.core.folders import Folders
from sparkbake.nodes import serve_checks, serve_client, serve_stream
from sparkbake.oci import docker_engine
from sparkbake.oci.engine_client import Container
from sparkbake.run import Run
from sparkbake.sparkrun import validate
from sparkbake.sparkrun.recipes import recipe_for
from tests import cpu_image, sparkrun_base
from tests.conftest import plain_console
from tests.tiny_model import make

pytestmark = [pytest.mark.docker, pytest.mark.required("serve-cpu")]

REPO = Path(__file__).resolve().parents[2]
LAUNCH = Path(__file__).with_name("sparkrun_launch.py")
PREFIX = "sparkrun-launch: "
FILES = "/tmp/launch"  # in sparkrun's container
PREFLIGHT = "sparkbake preflight: "
SERVED = "tiny"  # the suite's served name, the recipe's served_model_name
VLLM_SERVER = "(APIServer pid="  # how vLLM's API server process begins its lines
# a flag of the user's own with a value of two words, after the recipe's command
OWN_FLAG = ["--sbs2-probe", "two words"]
# sparkrun's Docker executor as set for a host without a GPU whose engine withholds
# privileges (this one): no device flag, no --privileged; the rest its defaults
EXECUTOR = {"accelerator_vendor": "cpu", "privileged": False}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    return cpu_image.build(tmp_path_factory.mktemp("mirror"))


@pytest.fixture(scope="module")
def python_base(docker_client: docker_engine.Client,
                tmp_path_factory: pytest.TempPathFactory) -> str:
    return sparkrun_base.python_base(docker_client, tmp_path_factory.mktemp("bases"))


@pytest.fixture(scope="module")
def sparkrun_wheels() -> Path:
    return validate.wheels(Folders.of(versions.load(REPO / "versions.yaml")),
                           console=plain_console())


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make(tmp_path_factory.mktemp("model") / "llama", "llama")


@pytest.fixture
def name(docker_client: docker_engine.Client) -> Iterator[str]:
    """The container's name; whatever is left of it removed after the test."""
    named = f"sbs2-sparkrun-{os.getpid()}-{time.monotonic_ns()}"
    yield named
    for box in docker_client.containers.list(all=True, filters={"name": f"^{named}"}):
        with contextlib.suppress(docker.errors.NotFound):
            box.remove(force=True)


def container(client: docker_engine.Client, name: str) -> Container | None:
    found = client.containers.list(all=True, filters={"name": f"^{name}$"})
    return found[0] if found else None


def the_recipe(built: str, model: Path, **env: str) -> dict[str, Any]:
    """recipe_for of the tag's local image serving the model's folder, env changed by env."""
    config = versions.load(REPO / "versions.yaml")
    run = Run.of(config, Settings.of_process(), plain_console())
    recipe = recipe_for(run, config.tag(built), local=True, model=str(model))
    recipe["env"].update(env)
    return recipe


def sparkrun_line(client: docker_engine.Client, base: str, wheels: Path,
                  recipe: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """What sparkrun_launch.py says sparkrun starts for the recipe: its line, command, env."""
    spec = {**spec, "recipe": f"{FILES}/recipe.yaml", "executor": EXECUTOR}
    files = {f"{FILES}/recipe.yaml": yaml.safe_dump(recipe).encode(),
             f"{FILES}/spec.json": json.dumps(spec).encode(),
             f"{FILES}/launch.py": LAUNCH.read_bytes()}
    result = validate.in_sparkrun(client, base, wheels, files, [
        f"{validate.VENV}/bin/python", f"{FILES}/launch.py", f"{FILES}/spec.json"])
    found = [json.loads(line[len(PREFIX):]) for line in result.output.splitlines()
             if line.startswith(PREFIX)]
    assert result.exit_code == 0 and found, result.output[-3000:]
    launch: dict[str, Any] = found[-1]
    # sparkrun's shape: the image, then `bash -c` with the command, base64 through bash
    assert re.search(r" bash -c 'printf %s [A-Za-z0-9+/=]+ \| base64 -d -- \| bash "
                     r"--noprofile --norc'$", launch["line"]), launch["line"]
    return launch


def run_line(line: str) -> subprocess.CompletedProcess[str]:
    """The line run as sparkrun runs it on a node: by bash (its seccomp profile is a process
    substitution)."""
    return subprocess.run(["bash", "-c", line], text=True, capture_output=True, check=False)


def sparkrun_ready(probe: str) -> dict[str, Any]:
    """The observation sparkrun's readiness probe prints (one JSON object), run by bash on
    this host; it waits for the port, /health and a token, and fails when the container
    stops."""
    done = subprocess.run(["bash", "-s"], input=probe, text=True, capture_output=True,
                          check=False, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    observed: dict[str, Any] = json.loads(done.stdout)
    return observed


def gone(client: docker_engine.Client, name: str) -> Callable[[], str | None]:
    """Why the container stopped (sparkrun starts it with --rm: its end is its removal)."""
    def why() -> str | None:
        box = container(client, name)
        if box is None:
            return "the container is gone (sparkrun starts it with --rm)"
        return None if box.status in ("created", "running") else f"container {box.status}"
    return why


def test_started_as_sparkrun_starts_it_the_image_serves_a_completion_ready_at_the_first_token(
        built: str, python_base: str, sparkrun_wheels: Path, model: Path, name: str,
        docker_client: docker_engine.Client) -> None:
    port = serve_checks.free_port()
    launch = sparkrun_line(docker_client, python_base, sparkrun_wheels, the_recipe(built, model),
                           {"name": name, "hf_cache": str(model.parent / "hf"),
                            "overrides": {"port": port}, "detach": True})
    started = time.monotonic()
    done = run_line(launch["line"])
    assert done.returncode == 0, done.stderr
    # sparkrun's own readiness probe, run on this host as its launcher runs it on the head's:
    # the first token of its streamed chat, which the tiny model's chat template makes
    observed = sparkrun_ready(launch["probe"])
    assert (observed["inference_style"], observed["inference_ready"]) == (
        "openai-chat-stream-v1", True), observed
    assert observed["first_token_field"] in ("content", "reasoning_content"), observed
    server = serve_client.Server(f"http://127.0.0.1:{port}")
    ready = serve_stream.check_ready(server, SERVED, 600, gone(docker_client, name), started)
    completion = serve_client.check_completion(server, SERVED)
    box = container(docker_client, name)
    assert box is not None
    log = box.logs().decode(errors="replace").splitlines()
    print(f"{ready.describe()}; {completion}")
    assert ready.first_token_s >= ready.health_s > 0
    assert completion
    # the recipe's command ran the entrypoint: its preflight's lines, then vLLM's
    checked = [at for at, line in enumerate(log) if line.startswith(PREFLIGHT)]
    served = next(at for at, line in enumerate(log) if line.startswith(VLLM_SERVER))
    assert checked and max(checked) < served, log[:40]


def test_under_bash_c_the_entrypoint_neither_doubles_nor_drops_an_argument(
        built: str, python_base: str, sparkrun_wheels: Path, model: Path, name: str,
        docker_client: docker_engine.Client) -> None:
    """The recipe's command with --print (the entrypoint says what it would run) and a flag of
    the user's own: sparkrun's line prints what the entrypoint prints given the same
    arguments and env directly, each flag once."""
    recipe = the_recipe(built, model)
    recipe["command"] += " --print " + shlex.join(OWN_FLAG)
    launch = sparkrun_line(docker_client, python_base, sparkrun_wheels, recipe,
                           {"name": name, "hf_cache": str(model.parent / "hf"),
                            "overrides": {"port": 8123}, "detach": False})
    done = run_line(launch["line"])
    assert done.returncode == 0, done.stderr
    via_sparkrun = shlex.split(done.stdout.strip().splitlines()[-1])
    given = shlex.split(launch["command"])[2:]  # after the entrypoint's python and script
    assert given == ["--print", *OWN_FLAG, "--served-model-name", SERVED], launch["command"]
    direct = docker_engine.run_container(
        docker_client, recipe["container"], given,
        environment=launch["env"], volumes={str(model): {"bind": str(model), "mode": "ro"}},
        network=False, name=f"{name}-direct")
    assert direct.exit_code == 0, direct.output[-2000:]
    printed = [line for line in direct.output.splitlines() if line.startswith("vllm serve ")]
    assert via_sparkrun == shlex.split(printed[-1])
    assert via_sparkrun[:3] == ["vllm", "serve", str(model)]
    for flag in ("--served-model-name", "--port", "--max-model-len", "--tensor-parallel-size"):
        assert via_sparkrun.count(flag) == 1, (flag, via_sparkrun)
    assert via_sparkrun[via_sparkrun.index("--served-model-name") + 1] == SERVED
    assert via_sparkrun[via_sparkrun.index("--port") + 1] == "8123"
    assert via_sparkrun[-2:] == OWN_FLAG and "--print" not in via_sparkrun


def test_a_bad_env_under_the_recipes_command_is_refused_by_the_preflight_before_vllm(
        built: str, python_base: str, sparkrun_wheels: Path, model: Path, name: str,
        docker_client: docker_engine.Client) -> None:
    recipe = the_recipe(built, model, MAX_MODEL_LEN="1048576")
    launch = sparkrun_line(docker_client, python_base, sparkrun_wheels, recipe,
                           {"name": name, "hf_cache": str(model.parent / "hf"),
                            "overrides": {"port": serve_checks.free_port()}, "detach": False})
    done = run_line(launch["line"])
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert any(line.startswith(f"{PREFLIGHT}error: MAX_MODEL_LEN=1048576 is above ")
               for line in lines), lines
    assert lines[-1] == (f"{PREFLIGHT}refusing to start vllm: 1 error(s); fix the environment, "
                         "or set SPARKBAKE_PREFLIGHT=0 to skip these checks")
    assert VLLM_SERVER not in done.stdout + done.stderr
