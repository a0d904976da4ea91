"""The smoke stage: the tag's checks, on the host and in its image, recorded against the
image ID they ran on.

On the host: the image's labels against the plan (smoke_host). In a network-less container
of the image, by images/smoke_check.py and its sibling modules (copied in, never baked): the
manifest, the ENV defaults, the wheels' imports and `import vllm`, each patched Python file
against the patched tree, the kernels, the image's entrypoint on the tag's smoke suite
(smoke_suite), and the GPU checks. With --model, the serve checks (smoke_serve). Results go
to build/smoke/<tag>.json and build/smoke/<tag>.xml (JUnit) before any failure is raised, so
CI keeps the record of a failing image too; a record of another image is removed first, so
no record outlives the image it speaks of.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkbake import records, resources
from sparkbake.bake.runtime_image import INPUTS_LABEL
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.core.folders import Folders
from sparkbake.core.smoke_record import (
    GPU_MODES,
    STATUSES,
    CheckResult,
    GpuMode,
    SmokeReport,
    counts,
    failed_names,
    junit_xml,
    parse_checks,
    timed,
)
from sparkbake.errors import SmokeError, UsageError
from sparkbake.files import atomic_write
from sparkbake.nodes import sample_envs, serve_checks
from sparkbake.oci import docker_engine, emulation
from sparkbake.planning import Plan, upstream_pin
from sparkbake.smoke import host
from sparkbake.smoke.host import Facts
from sparkbake.wheels import container_build

__all__ = ["CHECKER_FILES", "GPU_MODES", "NO_GPU_RUNTIME", "STATUSES", "Facts", "GpuMode",
           "Options", "check_options", "checker_files", "common_checks", "counts",
           "drop_stale_record", "expected_in_image", "expected_values", "failed_names",
           "has_gpu_runtime", "junit_xml", "parse_checks", "raise_if_failed", "report",
           "require_image", "results_paths", "run", "run_checker"]

PYTHON_IN_IMAGE = "/opt/venv/bin/python"
CHECKER_DIR = "/opt/sparkbake-smoke"
CHECKER_FILES = ("smoke_check.py", "smoke_backends.py", "smoke_common.py", "smoke_entry.py",
                 "smoke_gpu.py", "smoke_jit.py", "smoke_kv.py", "smoke_layers.py",
                 "smoke_platform.py", "smoke_roles.py", "smoke_vllm.py")
SUITE_MODEL = "model/config.json"  # a suite's model, for layer-weights when --model is not given
NO_GPU_RUNTIME = "no GPU runtime in this engine"
GPU_CHECKS = {"gpu", "gpu-capability", "gpu-op"}


@dataclass(frozen=True)
class Options:
    gpu: GpuMode = "auto"
    model: Path | None = None  # the serve checks' model folder (host path)
    serve_env: Path | None = None  # instead of the suite's serve.env
    serve_timeout: float = 1800.0  # seconds for the server's /health


def run(client: docker_engine.Client, config: Config, plan: Plan, facts: Facts,
        options: Options = Options(), *, console: Console, settings: Settings) -> SmokeReport:
    """Check the tag's image; write JSON + JUnit results; raise if a check failed."""
    check_options(options)
    image_id, attrs = require_image(client, plan, settings=settings)
    suite = sample_envs.load(config, plan.tag)
    json_path, xml_path = results_paths(config, plan)
    drop_stale_record(json_path, xml_path, image_id, console=console)
    gpus = options.gpu != "skip" and has_gpu_runtime(client)
    unavailable = NO_GPU_RUNTIME if options.gpu != "skip" and not gpus else None
    serve = serve_checks.Request(options.model, options.serve_env, options.serve_timeout,
                            options.gpu, unavailable)
    with step(console, f"smoke {plan.tag.image_ref} ({image_id[:19]}, suite {suite.name})"):
        checks = common_checks(client, config, plan, facts, suite, (image_id, attrs),
                               options, json_path.with_suffix(".log"), console=console)
        checks += serve_checks.run(client, image_id, plan.tag, suite, serve,
                              json_path.with_name(f"{plan.tag.name}-serve.log"), console=console)
    results = SmokeReport(
        tag=plan.tag.name, image=plan.tag.image_ref, image_id=image_id, inputs=plan.inputs,
        suite=suite.name, gpu=options.gpu, model=str(options.model) if options.model else None,
        passed=not failed_names(checks), checks=tuple(checks),
        time=datetime.now(UTC).isoformat(timespec="seconds"))
    atomic_write(json_path, json.dumps(records.to_json(results), indent=2) + "\n")
    atomic_write(xml_path, junit_xml(results))
    report(checks, console=console)
    raise_if_failed(plan, checks, json_path, settings=settings)
    return results


def common_checks(client: docker_engine.Client, config: Config, plan: Plan, facts: Facts,
                  suite: sample_envs.Suite, image: tuple[str, dict[str, Any]], options: Options,
                  log_path: Path, *, console: Console) -> list[CheckResult]:
    """Every check but the serve ones, on the image (its id and engine attributes) in the
    engine of client: the labels on the host, the rest in a container of the image."""
    image_id, attrs, gpu = *image, options.gpu
    gpus = gpu != "skip" and has_gpu_runtime(client)
    unavailable = NO_GPU_RUNTIME if gpu != "skip" and not gpus else None
    expected = expected_in_image(config, plan, facts, suite, attrs, options, unavailable)
    labels = timed("labels", lambda: host.check_labels(client, attrs, plan, facts))
    with emulation.cpu_sysfs(client, plan.tag.platform) as volumes:
        return [labels, *run_checker(client, image_id, expected, gpus, log_path, volumes,
                                     console=console)]


def expected_in_image(config: Config, plan: Plan, facts: Facts, suite: sample_envs.Suite,
                      attrs: dict[str, Any], options: Options,
                      unavailable: str | None) -> dict[str, Any]:
    """What smoke_check.py in a container of the image (engine attributes attrs) is given
    to check it against: the plan's values, the patched files, the suite's entrypoint
    samples and the model layer-weights builds."""
    return {
        **expected_values(plan, options.gpu, unavailable),
        "patched_files": host.patched_files(plan, facts.patched.path,
                                            Folders.of(config).wheel_set(plan.wheels_key)),
        "entrypoint": sample_envs.expected(suite, entrypoint_of(attrs)),
        "layer_model": layer_model(suite, options.model),
    }


def layer_model(suite: sample_envs.Suite, model: Path | None) -> dict[str, Any]:
    """The config.json layer-weights builds: --model's, else the suite's model/; or why
    there is none."""
    path = model / "config.json" if model is not None and model.is_dir() else model
    path = path or suite.folder / SUITE_MODEL
    if not path.is_file():
        return {"none": f"no {path.name} in {path.parent}: give --model, or add "
                        f"{SUITE_MODEL} to suite {suite.name}"}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SmokeError(f"{path}: not a readable JSON file ({exc})",
                         "give the model's folder with its config.json") from None
    if not isinstance(config, dict):
        raise SmokeError(f"{path}: not a JSON object", "give the model's own config.json")
    return {"config": config, "path": str(path)}


def check_options(options: Options) -> None:
    if options.gpu not in GPU_MODES:
        raise UsageError(f"--gpu {options.gpu!r} is not one of {', '.join(GPU_MODES)}",
                         "pick one of them")
    if options.model is not None and not options.model.exists():
        raise UsageError(f"--model {options.model}: no such file or folder",
                         "give the model's folder on this host; it is mounted at /model")
    if options.serve_env is not None and not options.serve_env.is_file():
        raise UsageError(f"--serve-env {options.serve_env}: no such file",
                         "give a node .env file (docs/reference/smoke.md)")


def require_image(client: docker_engine.Client, plan: Plan, *,
                  settings: Settings) -> tuple[str, dict[str, Any]]:
    """The id and attributes of the tag's image; it must exist and carry the plan's inputs."""
    ref, build = plan.tag.image_ref, f"run `{settings.command('build-image', plan.tag.name)}`"
    if not docker_engine.image_exists(client, ref):
        raise SmokeError(f"image {ref} does not exist in the Docker engine", build)
    attrs = docker_engine.image_attrs(client, ref)
    label = docker_engine.image_labels(attrs).get(INPUTS_LABEL)
    if label != plan.inputs:
        found = f"{label[:16]}..." if label else "none"
        raise SmokeError(
            f"image {ref} is out of date: its {INPUTS_LABEL} is {found}, "
            f"the plan's is {plan.inputs[:16]}...", build)
    return str(attrs["Id"]), attrs


def entrypoint_of(attrs: dict[str, Any]) -> list[str]:
    return [str(arg) for arg in (attrs.get("Config") or {}).get("Entrypoint") or []]


def drop_stale_record(json_path: Path, xml_path: Path, image_id: str, *, console: Console) -> bool:
    """Remove the record of another image (a rebuilt tag's old one): it never stands for
    this image, even if the run that follows ends early."""
    try:
        previous = json.loads(json_path.read_text()).get("image_id")
    except (OSError, ValueError, AttributeError):
        previous = None if not json_path.exists() else "unreadable"
    if previous in (None, image_id):
        return False
    console.notice(f"smoke: removing {json_path.name}, the record of image {str(previous)[:19]}")
    json_path.unlink(missing_ok=True)
    xml_path.unlink(missing_ok=True)
    return True


def has_gpu_runtime(client: docker_engine.Client) -> bool:
    return "nvidia" in (client.info().get("Runtimes") or {})


def expected_values(plan: Plan, gpu: GpuMode, unavailable: str | None) -> dict[str, Any]:
    """What the image must carry, as smoke_check.py reads it (the plan's part)."""
    tag = plan.tag
    return {
        "tag": tag.name,
        "inputs": plan.inputs,
        "upstream": upstream_pin(tag.upstream),
        "series": [{"name": s.name, "sha256": s.sha256} for s in plan.series],
        "cuda_arch": tag.cuda_arch,
        "sm_arch": tag.sm_arch,
        "sass_loadable": container_build.loadable_by(tag.sm_arch),
        "other_arch": list(tag.kernels.other_arch) if tag.kernels else [],
        "env": dict(tag.env),
        # an upstream with runtime requirements (vLLM) compiles kernels on first use (on
        # a GPU)
        "jit_required": tag.upstream.runtime_requirements is not None
        and tag.upstream.device == "cuda",
        "device": tag.upstream.device,
        "gpu": {"mode": gpu, "unavailable": unavailable},
    }


def results_paths(config: Config, plan: Plan) -> tuple[Path, Path]:
    record = Folders.of(config).smoke_record(plan.tag.name)
    return record, record.with_suffix(".xml")


def checker_files() -> dict[str, bytes]:
    """The checker's scripts at their container paths, copied in (the engine may be another
    machine's, where a bind mount of a host path would not reach)."""
    return {f"{CHECKER_DIR}/{name}": resources.path(name).read_bytes() for name in CHECKER_FILES}


def run_checker(client: docker_engine.Client, image_id: str, expected: dict[str, Any], gpus: bool,
                log_path: Path,
                volumes: dict[str, dict[str, str]] | None = None, *,
                console: Console) -> list[CheckResult]:
    """Run smoke_check.py in a network-less container of the image; return its checks.
    volumes: what an emulated container needs (emulation.cpu_sysfs)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result = docker_engine.run_container(
        client, image_id, ["-B", f"{CHECKER_DIR}/{CHECKER_FILES[0]}", json.dumps(expected)],
        entrypoint=[PYTHON_IN_IMAGE], copy_in=checker_files(), volumes=volumes,
        network=False, log_path=log_path, console=console,  # its output: also the stage's log
        device_requests=[dict(serve_checks.ALL_GPUS)] if gpus else None,
    )
    checks = parse_checks(result.output)
    if checks is None:
        raise SmokeError(
            f"the smoke checker in image {image_id[:19]} gave no result "
            f"(exit {result.exit_code}): {' / '.join(result.tail(3).splitlines())}",
            f"see {log_path}; the image needs {PYTHON_IN_IMAGE} (rebuild it with build-image)")
    return checks


def report(checks: list[CheckResult], console: Console) -> None:
    """A line per check; with -q only the failed ones (the summary line says the rest)."""
    width = max((len(c.name) for c in checks), default=0)
    for check in checks:
        show = console.result if check.status == "failed" else console.notice
        show(f"  {check.status:<7}  {check.name:<{width}}  {check.seconds:6.2f}s  "
             f"{check.detail}")


def raise_if_failed(plan: Plan, checks: list[CheckResult], json_path: Path, *,
                    settings: Settings) -> None:
    failed = failed_names(checks)
    if not failed:
        return
    if set(failed) <= GPU_CHECKS:
        wanted = plan.tag.cuda_arch.rstrip("af")
        remedy = (f"run on a host whose GPU has compute capability {wanted} and the NVIDIA "
                  "container runtime, or pass --gpu auto")
    elif all(name.startswith("serve-") for name in failed):
        remedy = (f"read {json_path.with_name(f'{plan.tag.name}-serve.log')}; the checks' "
                  "details in the record say what the server answered")
    else:
        remedy = (f"the image does not match versions.yaml or its wheels are broken: run "
                  f"`{settings.command('gc', '--check')}` (it removes damaged cache entries), then "
                  f"rebuild with `{settings.command('build-image', plan.tag.name)}`")
    raise SmokeError(f"smoke checks failed for {plan.tag.image_ref}: {', '.join(failed)} "
                     f"(results: {json_path})", remedy)
