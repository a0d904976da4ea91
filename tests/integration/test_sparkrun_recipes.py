"""Recipes checked by sparkrun's own code (0.4.2): every production tag's, the CPU tag's and
the demo's loaded and validated by sparkrun in a container of the CPU tag's Debian trixie
base (Python 3.13), its wheels downloaded once into this checkout's wheels/sparkrun/ and
installed there without a network. None is published on this machine, so they are the
recipes of the engine's images (`--local`), and one is made on a release record as publish
writes it. Then each node's command as sparkrun's runtime renders it goes through the image's
entrypoint, which must make of it the command our own node files make."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkbake import records, resources
from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.nodes import envfile, preflight
from sparkbake.oci import docker_engine
from sparkbake.publish.record import Release
from sparkbake.run import Run
from sparkbake.sparkrun import recipes, validate
from sparkbake.sparkrun.commands import to_yaml
from tests import sparkrun_base
from tests.conftest import plain_console
from tests.tiny_model import make

pytestmark = pytest.mark.docker

ROOT = Path(__file__).parents[2]
TINY = "/srv/models/tiny"  # a model folder on every node: the CPU tag's and the demo's
HEAD_IP = "192.0.2.1"  # images/sparkrun_check.py renders the commands with this head
RENDEZVOUS_PORT = "25000"
MODEL_MOUNT = "/model"  # what {launch.model_path} stands for here
LOCAL_REPOSITORY = "sbs1-recipe-cpu"  # a reference of this test's own on the shared engine


@pytest.fixture(scope="module")
def run() -> Run:
    """This checkout's project: its tags, and its wheels/ where sparkrun's wheels stay."""
    return Run.of(versions.load(ROOT / "versions.yaml"), Settings.of_process(), plain_console())


def tags_checked(run: Run) -> list[str]:
    return [*sorted(t for t in run.config.tags if t.startswith("production-")), "cpu-3.73",
            "demo"]


@pytest.fixture(scope="module")
def made(run: Run, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each tag's recipe (local: none is published here); the CPU tag's on a release record
    as publish writes it; the demo's with its model taken out; and the CPU tag's on a tiny
    model's folder here (tests/tiny_model.py's, with its chat template) and on one whose
    tokenizer has none."""
    found = {name: recipes.recipe_for(run, run.config.tag(name), local=True,
                                      model=None if name.startswith("production-") else TINY)
             for name in tags_checked(run)}
    models = tmp_path_factory.mktemp("models")
    plain = models / "no-chat"
    plain.mkdir()
    (plain / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    for name, folder in (("tiny-chat", make(models / "tiny")), ("no-chat", plain)):
        found[name] = recipes.recipe_for(run, run.config.tag("cpu-3.73"), local=True,
                                         model=str(folder))
    record = records.from_json(Release, json.loads(
        (ROOT / "tests" / "data" / "records" / "release.json").read_text()))
    found["released"] = recipes.recipe_for(run, run.config.tag("cpu-3.73"), record,
                                           model=TINY)
    found["no-model"] = {k: v for k, v in found["demo"].items() if k != "model"}
    return found


@pytest.fixture(scope="module")
def checked(docker_client: docker_engine.Client, run: Run, made: dict[str, dict[str, Any]],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, validate.Checked]:
    base = sparkrun_base.python_base(docker_client, tmp_path_factory.mktemp("bases"))
    wheelhouse = validate.wheels(run.folders, console=run.console)
    return validate.check_recipes(docker_client, base, wheelhouse,
                                  {name: to_yaml(recipe) for name, recipe in made.items()})


def test_every_tags_recipe_passes_sparkruns_own_checks(
        run: Run, checked: dict[str, validate.Checked]) -> None:
    for name in [*tags_checked(run), "released"]:
        found = checked[name]
        assert (found.errors, found.warnings, found.suggestions, found.validate) == (
            (), (), (), ()), name


def test_sparkruns_readiness_asks_a_chat_token_where_the_model_has_a_chat_template(
        run: Run, checked: dict[str, validate.Checked]) -> None:
    """sparkrun's launcher resolves each recipe's readiness to the chat stream (its probe's
    first token), and to /health alone for a model folder whose tokenizer has no chat
    template, which its chat request could never get a token from."""
    for name in [*tags_checked(run), "released", "tiny-chat"]:
        assert checked[name].readiness == "openai-chat-stream-v1", name
    assert checked["no-chat"].readiness is None
    assert (checked["no-chat"].errors, checked["no-chat"].warnings) == ((), ())


def test_a_recipe_without_its_model_gets_sparkruns_own_error(
        checked: dict[str, validate.Checked]) -> None:
    found = checked["no-model"]
    assert "recipe-field: Recipe missing 'model' field" in found.errors
    assert found.validate == ("Recipe missing 'model' field",)
    assert found.commands == ()


def test_sparkruns_node_commands_become_our_node_files_commands(
        run: Run, made: dict[str, dict[str, Any]],
        checked: dict[str, validate.Checked]) -> None:
    """The production recipe on four nodes: the flags sparkrun appends (served name, rank,
    head, port, --headless) reach vllm serve once each, none dropped; the same command as
    the reference node's file (accept/head.env, worker-N.env) makes."""
    tag = run.config.tag("production-3.73-vision")
    commands = checked[tag.name].commands
    suite = resources.path("smoke/dsv4-4node/accept")
    files = [suite / "head.env", *(suite / f"worker-{rank}.env" for rank in (1, 2, 3))]
    assert len(commands) == len(files) == made[tag.name]["min_nodes"]
    for rank, (command, file) in enumerate(zip(commands, files, strict=True)):
        argv = shlex.split(command)
        assert argv[:2] == recipes.entrypoint_argv()
        ours = {**envfile.read(file).values, "MASTER_ADDR": HEAD_IP,
                "MASTER_PORT": RENDEZVOUS_PORT}
        expected = preflight.entrypoint().serve_command({**dict(tag.env), **ours})
        env = {**dict(tag.env), **rendered_env(made[tag.name], rank)}
        assert printed(argv[2:], env) == expected, file.name


def test_the_cpu_tags_one_node_command_is_its_serve_envs(
        run: Run, made: dict[str, dict[str, Any]],
        checked: dict[str, validate.Checked]) -> None:
    tag = run.config.tag("cpu-3.73")
    [command] = checked[tag.name].commands
    serve = envfile.read(resources.path("smoke/cpu/serve.env")).values
    expected = preflight.entrypoint().serve_command(
        {**dict(tag.env), **serve, "MODEL": MODEL_MOUNT, "API_PORT": "8000"})
    assert printed(shlex.split(command)[2:], {**dict(tag.env),
                                              **rendered_env(made[tag.name])}) == expected


def rendered_env(recipe: dict[str, Any], rank: int = 0) -> dict[str, str]:
    """The recipe's env as sparkrun sets it on the node of this rank: its config values put
    in, the launch's (the model's path, the node count and the rank)."""
    launch = {"model_path": MODEL_MOUNT, "num_nodes": recipe["min_nodes"], "node_rank": rank}

    def value(text: str) -> str:
        text = re.sub(r"\{launch\.(\w+)\}", lambda m: str(launch[m[1]]), text)
        return re.sub(r"\{config\.(\w+)\}", lambda m: str(recipe["defaults"][m[1]]), text)

    return {name: value(text) for name, text in recipe["env"].items()}


def printed(argv: list[str], env: dict[str, str]) -> list[str]:
    """What the image's entrypoint runs for argv in env (--print; the preflight, which needs
    a Spark, off: tests/unit/test_entrypoint.py has it refuse a launcher's flags)."""
    done = subprocess.run(
        [sys.executable, str(resources.path("entrypoint.py")), "--print", *argv],
        env={**env, "PATH": "/usr/bin:/bin", "SPARKBAKE_PREFLIGHT": "0"},
        capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return shlex.split(done.stdout)


def test_the_checks_yaml_is_what_recipe_writes(made: dict[str, dict[str, Any]]) -> None:
    """What sparkrun was given is `sparkbake recipe`'s own output, read back the same."""
    assert yaml.safe_load(to_yaml(made["cpu-3.73"])) == made["cpu-3.73"]


@pytest.fixture
def tagged(docker_client: docker_engine.Client, tmp_path: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """This project's versions.yaml with the CPU tag's repository our own, and an image in
    the engine under that tag's reference (the trixie base's, tagged anew; untagged after)."""
    text = (ROOT / "versions.yaml").read_text()
    assert text.count("repository: localhost:5000/sparkbake-cpu\n") == 1
    config = tmp_path / "versions.yaml"
    config.write_text(text.replace("repository: localhost:5000/sparkbake-cpu\n",
                                   f"repository: {LOCAL_REPOSITORY}\n"))
    base = sparkrun_base.python_base(docker_client, tmp_path_factory.mktemp("bases"))
    image = docker_client.images.get(base)
    image.tag(LOCAL_REPOSITORY, "cpu-3.73")
    try:
        yield config, str(image.id)
    finally:
        docker_client.images.remove(f"{LOCAL_REPOSITORY}:cpu-3.73", noprune=True)


def test_a_local_recipe_records_the_engines_image_id(
        tagged: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    config, image_id = tagged
    assert main(["--config", str(config), "recipe", "cpu-3.73", "--local", "--model",
                 TINY]) == 0
    made = yaml.safe_load(capsys.readouterr().out)
    assert made["container"] == f"{LOCAL_REPOSITORY}:cpu-3.73"
    assert made["metadata"]["sparkbake"]["local"] is True
    assert made["metadata"]["sparkbake"]["image_id"] == image_id
