"""The smoke stage: run images/smoke_check.py inside the baked image, record the results.

Results go to build/smoke/<tag>.json and build/smoke/<tag>.xml (JUnit) before any failure
is raised, so CI keeps the record of a failing image too.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import docker_api, resources
from .cache import atomic_write
from .config import Config
from .errors import SmokeError, UsageError
from .plan import Plan, upstream_pin
from .proc import echo, step

__all__ = [
    "CHECKER_IN_IMAGE",
    "GPU_MODES",
    "expected_values",
    "junit_xml",
    "parse_checks",
    "results_paths",
    "run",
]

GPU_MODES = ("auto", "require", "skip")
INPUTS_LABEL = "dev.sparkbake.inputs"
PYTHON_IN_IMAGE = "/opt/venv/bin/python"
CHECKER_IN_IMAGE = "/opt/sparkbake-smoke/smoke_check.py"
NO_GPU_RUNTIME = "no GPU runtime in this engine"
STATUSES = ("passed", "failed", "skipped")
ALL_GPUS = {"count": -1, "capabilities": [["gpu"]]}  # the SDK makes a DeviceRequest of it


def run(client: docker_api.Client, config: Config, plan: Plan, gpu: str = "auto") -> dict[str, Any]:
    """Check the tag's image in a container; write JSON + JUnit results; raise if a check failed."""
    if gpu not in GPU_MODES:
        raise UsageError(f"--gpu {gpu!r} is not one of {', '.join(GPU_MODES)}", "pick one of them")
    image_id = require_image(client, plan)
    gpus = gpu != "skip" and has_gpu_runtime(client)
    unavailable = NO_GPU_RUNTIME if gpu != "skip" and not gpus else None
    expected = expected_values(plan, gpu, unavailable)
    json_path, xml_path = results_paths(config, plan)
    with step(f"smoke {plan.tag.image_ref}"):
        checks = run_checker(client, image_id, expected, gpus, json_path.with_suffix(".log"))
    results = {
        "tag": plan.tag.name, "image": plan.tag.image_ref, "image_id": image_id,
        "inputs": plan.inputs, "passed": not failed_names(checks), "checks": checks,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    atomic_write(json_path, json.dumps(results, indent=2) + "\n")
    atomic_write(xml_path, junit_xml(results))
    report(checks)
    raise_if_failed(plan, checks, json_path)
    return results


def require_image(client: docker_api.Client, plan: Plan) -> str:
    """The id of the tag's image; it must exist and carry the plan's inputs label."""
    ref, build = plan.tag.image_ref, f"run `nox -s build-image -- {plan.tag.name}`"
    if not docker_api.image_exists(client, ref):
        raise SmokeError(f"image {ref} does not exist in the Docker engine", build)
    attrs = docker_api.image_attrs(client, ref)
    label = ((attrs.get("Config") or {}).get("Labels") or {}).get(INPUTS_LABEL)
    if label != plan.inputs:
        found = f"{label[:16]}..." if label else "none"
        raise SmokeError(
            f"image {ref} is out of date: its {INPUTS_LABEL} is {found}, "
            f"the plan's is {plan.inputs[:16]}...", build)
    return str(attrs["Id"])


def has_gpu_runtime(client: docker_api.Client) -> bool:
    return "nvidia" in (client.info().get("Runtimes") or {})


def expected_values(plan: Plan, gpu: str, unavailable: str | None) -> dict[str, Any]:
    """What the image must carry, as smoke_check.py reads it."""
    tag = plan.tag
    return {
        "tag": tag.name,
        "inputs": plan.inputs,
        "upstream": upstream_pin(tag.upstream),
        "series": [{"name": s.name, "sha256": s.sha256} for s in plan.series],
        "cuda_arch": tag.cuda_arch,
        "sm_arch": tag.sm_arch,
        "env": dict(tag.env),
        "gpu": {"mode": gpu, "unavailable": unavailable},
    }


def results_paths(config: Config, plan: Plan) -> tuple[Path, Path]:
    folder = config.build_dir / "smoke"
    return folder / f"{plan.tag.name}.json", folder / f"{plan.tag.name}.xml"


def run_checker(client: docker_api.Client, image_id: str, expected: dict[str, Any], gpus: bool,
                log_path: Path) -> list[dict[str, Any]]:
    """Run smoke_check.py in a network-less container of the image; return its checks."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    script = resources.path("smoke_check.py")
    result = docker_api.run_container(
        client, image_id, ["-B", CHECKER_IN_IMAGE, json.dumps(expected)],
        entrypoint=[PYTHON_IN_IMAGE],
        volumes={str(script): {"bind": CHECKER_IN_IMAGE, "mode": "ro"}},
        network=False, quiet=True, log_path=log_path,
        device_requests=[dict(ALL_GPUS)] if gpus else None,
    )
    checks = parse_checks(result.output)
    if checks is None:
        raise SmokeError(
            f"the smoke checker in image {image_id[:19]} gave no result "
            f"(exit {result.exit_code}): {' / '.join(result.tail(3).splitlines())}",
            f"see {log_path}; the image needs {PYTHON_IN_IMAGE} (rebuild it with build-image)")
    return checks


def parse_checks(output: str) -> list[dict[str, Any]] | None:
    """The checks from the checker's last JSON line; None when there is none."""
    for line in reversed(output.splitlines()):
        if not line.startswith("{"):
            continue
        try:
            document = json.loads(line)
        except json.JSONDecodeError:
            continue
        checks = document.get("checks") if isinstance(document, dict) else None
        if isinstance(checks, list) and all(_is_check(c) for c in checks):
            return checks
    return None


def _is_check(check: Any) -> bool:
    return (isinstance(check, dict) and isinstance(check.get("name"), str)
            and check.get("status") in STATUSES)


def failed_names(checks: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in checks if c["status"] == "failed"]


def report(checks: list[dict[str, Any]]) -> None:
    width = max((len(c["name"]) for c in checks), default=0)
    for check in checks:
        echo(f"  {check['status']:<7}  {check['name']:<{width}}  "
             f"{float(check.get('seconds', 0)):6.2f}s  {check.get('detail', '')}")


def raise_if_failed(plan: Plan, checks: list[dict[str, Any]], json_path: Path) -> None:
    failed = failed_names(checks)
    if not failed:
        return
    if failed == ["gpu"]:
        remedy = "run on a host with a GPU and the NVIDIA container runtime, or pass --gpu auto"
    else:
        remedy = (f"the image does not match versions.yaml or its wheels are broken: "
                  f"rebuild it with `nox -s build-image -- {plan.tag.name}`")
    raise SmokeError(f"smoke checks failed for {plan.tag.image_ref}: {', '.join(failed)} "
                     f"(results: {json_path})", remedy)


def junit_xml(results: dict[str, Any]) -> str:
    """JUnit XML of a results record: one testcase per check."""
    checks: list[dict[str, Any]] = results["checks"]
    suite_name = f"sparkbake.smoke.{results['tag']}"
    counts = {s: sum(c["status"] == s for c in checks) for s in STATUSES}
    total_time = f"{sum(float(c.get('seconds', 0)) for c in checks):.3f}"
    suites = ET.Element("testsuites", name="sparkbake smoke", tests=str(len(checks)),
                        failures=str(counts["failed"]), errors="0",
                        skipped=str(counts["skipped"]), time=total_time)
    suite = ET.SubElement(suites, "testsuite", name=suite_name, tests=str(len(checks)),
                          failures=str(counts["failed"]), errors="0",
                          skipped=str(counts["skipped"]), time=total_time,
                          timestamp=str(results.get("time", "")))
    properties = ET.SubElement(suite, "properties")
    for key in ("image", "image_id", "inputs"):
        ET.SubElement(properties, "property", name=key, value=str(results.get(key, "")))
    for check in checks:
        _testcase(suite, suite_name, check)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _testcase(suite: ET.Element, classname: str, check: dict[str, Any]) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=check["name"],
                         time=f"{float(check.get('seconds', 0)):.3f}")
    detail = str(check.get("detail", ""))
    if check["status"] == "failed":
        failure = ET.SubElement(case, "failure", message=detail, type="SmokeCheckFailed")
        failure.text = detail
    elif check["status"] == "skipped":
        ET.SubElement(case, "skipped", message=detail)
