"""Serve checks (`smoke TAG --model PATH`): `vllm serve` started through the image's own
entrypoint, from the suite's serve.env (or --serve-env), in a container with the GPUs and
the model mounted read-only at /model; then probed from the host through a published port
(serve_client). A serve env may declare the model served cut, with dummy weights
(dummy_model); the suite's MAX_MODEL_LEN is capped at what vLLM takes for the model. Without
--model, or without a GPU, each check is reported with the reason."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbake.config.versions import Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.core.smoke_record import CheckResult, CheckStatus, GpuMode, timed
from sparkbake.nodes import dummy_model, envfile, preflight, serve_client, serve_log, serve_stream
from sparkbake.nodes.dummy_model import Cut
from sparkbake.nodes.sample_envs import Suite
from sparkbake.oci.docker_engine import Client, started_container

__all__ = ["ALL_GPUS", "Request", "Served", "api_checks", "fitted_length", "names", "prepare",
           "run", "serve_env", "served_name"]

ALL_GPUS = {"count": -1, "capabilities": [["gpu"]]}  # the SDK makes a DeviceRequest of it
CONTAINER_PORT = 8000
MODEL_MOUNT = preflight.MODEL_MOUNT
BASE_CHECKS = ("serve-health", "serve-models", "serve-completion", "serve-metrics")
LONG_ALLOWED = ("1", "true")  # VLLM_ALLOW_LONG_MAX_MODEL_LEN as vLLM reads it (vllm/envs.py)


@dataclass(frozen=True)
class Request:
    """What the serve checks were asked for, and what the engine offers."""

    model: Path | None
    env_file: Path | None  # --serve-env: instead of the suite's serve.env
    timeout: float  # seconds for /health
    gpu: GpuMode
    unavailable: str | None  # why the engine offers no GPU, or None


def names(tag: Tag) -> list[str]:
    """The serve checks of a tag: `-vision` tags add an image request, tags with the
    prefix-cache series the reference's prefix-cache check."""
    return [*BASE_CHECKS, *(["serve-image"] if tag.name.endswith("-vision") else []),
            *(["serve-prefix-cache"] if "prefix-cache" in tag.series else [])]


def serve_env(suite: Suite, override: Path | None) -> dict[str, str]:
    """The serve env file's values (the suite's serve.env, or override), with the model, host
    and port the check needs; the container gets them without dummy_model's declaration."""
    source = override or suite.serve_env
    values = envfile.read(source).values if source else {}
    return {**values, "MODEL": MODEL_MOUNT, "API_HOST": "0.0.0.0",
            "API_PORT": str(CONTAINER_PORT)}


def not_running(request: Request, device: str = "cuda") -> tuple[CheckStatus, str] | None:
    """(status, why) when the serve checks cannot run; an image built for the CPU (device)
    needs no GPU."""
    if request.model is None:
        return "skipped", "no --model given"
    if device == "cpu":
        return None
    if request.gpu == "skip":
        return "skipped", "--gpu skip (vllm serve needs a GPU)"
    if request.unavailable:
        status: CheckStatus = "failed" if request.gpu == "require" else "skipped"
        return status, f"vllm serve needs a GPU: {request.unavailable}"
    return None


def flag(command: list[str], name: str, default: int) -> int:
    """The last value given to a flag of the command (argparse keeps the last)."""
    found = value(command, name)
    return default if found is None else int(found)


def value(command: list[str], name: str) -> str | None:
    """The last value given to an option of the command, or None."""
    values = [command[i + 1] for i, word in enumerate(command[:-1]) if word == name]
    return values[-1] if values else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run(client: Client, image_id: str, tag: Tag, suite: Suite, request: Request,
        log_path: Path, *, console: Console) -> list[CheckResult]:
    wanted = names(tag)
    why = not_running(request, tag.upstream.device)
    if why is not None:
        return [CheckResult(name, *why) for name in wanted]
    assert request.model is not None
    try:
        served = prepare(tag, suite, request.env_file, request.model)
    except dummy_model.UnusableModel as exc:
        return [CheckResult(name, "failed", str(exc)) for name in wanted]
    except ValueError as exc:
        return [CheckResult(name, "failed", f"the serve env gives no command: {exc}")
                for name in wanted]
    return serve(client, image_id, tag, request, served, log_path, console=console)


@dataclass(frozen=True)
class Served:
    """What the serve container runs: its environment over the image's ENV, the command the
    entrypoint builds from it, the model's cut when the serve env declares one, and how the
    suite's MAX_MODEL_LEN was fitted to the model ("": as the suite gives it)."""

    env: dict[str, str]
    command: list[str]
    cut: Cut | None
    length: str = ""

    def describe(self) -> str:
        said = [text for text in (self.cut.describe() if self.cut else "", self.length) if text]
        return f" ({'; '.join(said)})" if said else ""


def prepare(tag: Tag, suite: Suite, env_file: Path | None, model: Path) -> Served:
    """What the container runs for the suite's serve.env (or env_file, served as it is) and
    the model folder; UnusableModel when the env declares a cut the model's config.json
    cannot give, ValueError when the entrypoint makes no command of it."""
    env, cut = dummy_model.container_env(serve_env(suite, env_file), model,
                                         env_file or suite.serve_env)
    env, length = (env, "") if env_file else fitted_length(env, model)
    return Served(env, preflight.entrypoint().serve_command({**dict(tag.env), **env}), cut,
                  length)


def fitted_length(env: dict[str, str], model: Path) -> tuple[dict[str, str], str]:
    """The env with MAX_MODEL_LEN capped at the longest vLLM takes for the model (the image's
    model_checks.model_length: vLLM refuses a longer one at start), and what was chosen ("":
    nothing changed). A suite that allows a longer one (VLLM_ALLOW_LONG_MAX_MODEL_LEN) keeps
    its own."""
    wanted = env.get("MAX_MODEL_LEN", "")
    if not wanted.isdigit() or \
            env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in LONG_ALLOWED:
        return env, ""
    checks = preflight.entrypoint().checks.model_checks
    read = checks.read_model(model)
    length = None if read is None or read.problem else checks.model_length(read.config, model)
    if length is None or int(wanted) <= length.ceiling:
        return env, ""
    return ({**env, "MAX_MODEL_LEN": str(length.ceiling)},
            f"MAX_MODEL_LEN={length.ceiling}: the suite's {wanted} capped at the model's "
            f"{length.how}")


def serve(client: Client, image_id: str, tag: Tag, request: Request, served: Served,
          log_path: Path, *, console: Console) -> list[CheckResult]:
    """The tag's serve checks against the container; its output goes to log_path."""
    assert request.model is not None
    port = free_port()
    with step(console, f"serve {tag.image_ref} with {request.model}{served.describe()}"), \
            started_container(
                client, image_id, [], environment=served.env,
                ports={f"{CONTAINER_PORT}/tcp": ("127.0.0.1", port)},
                volumes={str(request.model.resolve()): {"bind": MODEL_MOUNT, "mode": "ro"}},
                device_requests=[dict(ALL_GPUS)] if tag.upstream.device == "cuda" else None,
                ipc_mode="host") as box:
        started = time.monotonic()  # the container's start: readiness is timed from it
        try:
            server = serve_client.Server(f"http://127.0.0.1:{port}")
            return probe(names(tag), _checks(server, served, request, box, started))
        finally:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_bytes(box.logs())


def _checks(server: serve_client.Server, served: Served, request: Request,
            box: Any, started: float) -> dict[str, Callable[[], str]]:
    """serve-health: ready when /health answers 200 and a streamed token comes back."""
    return {
        "serve-health": lambda: serve_stream.check_ready(
            server, served_name(served), request.timeout, exited(box), started).describe()
        + served.describe(),
        **api_checks(server, served)}


def served_name(served: Served) -> str:
    return served.env.get("SERVED_MODEL_NAME") or served.env.get("MODEL") or MODEL_MOUNT


def api_checks(server: serve_client.Server, served: Served) -> dict[str, Callable[[], str]]:
    """The serve checks of a healthy server, each asked what served's command makes: the
    served model's name, the block size and DCP of the prefix cache, dummy weights."""
    model = served_name(served)
    block = flag(served.command, "--block-size", 16)
    dcp = flag(served.command, "--decode-context-parallel-size", 1)
    # dummy weights answer anything, even nothing
    any_text = served.cut is not None or value(served.command, "--load-format") == "dummy"
    return {
        "serve-models": lambda: serve_client.check_models(server, model),
        "serve-completion": lambda: serve_client.check_completion(server, model, any_text),
        "serve-metrics": lambda: serve_client.check_metrics(server, model),
        "serve-image": lambda: serve_client.check_image(server, model, any_text),
        "serve-prefix-cache": lambda: serve_client.check_prefix_cache(server, model, block, dcp),
    }


def probe(wanted: list[str], checks: dict[str, Callable[[], str]]) -> list[CheckResult]:
    """Each wanted check in order; after a failed health check the rest are failed too."""
    results: list[CheckResult] = []
    for name in wanted:
        if results and results[0].status != "passed":
            results.append(CheckResult(name, "failed",
                                       "not run: the server did not become healthy"))
        else:
            results.append(timed(name, checks[name]))
    return results


def exited(box: Any) -> Callable[[], str | None]:
    """A probe saying why the serve container has stopped, or None while it runs."""
    def why() -> str | None:
        box.reload()
        if box.status not in ("exited", "dead"):
            return None
        log = box.logs().decode(errors="replace")
        lines = log.strip().splitlines()
        said = serve_log.error_line(log) or (lines[-1] if lines else "no output")
        return f"container exited with {box.attrs['State'].get('ExitCode')}: {said}"
    return why
