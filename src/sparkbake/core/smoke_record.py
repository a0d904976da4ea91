"""The smoke record (build/smoke/<tag>.json) and its parts: one check's result, how host-side
checks make one, how the in-image checker's output is read, and the JUnit XML of a record."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from sparkbake import records
from sparkbake.core.gpu_modes import GPU_MODES, GpuMode

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

__all__ = ["GPU_MODES", "STATUSES", "CheckFailed", "CheckResult", "CheckSkipped", "CheckStatus",
           "GpuMode", "SmokeReport", "counts", "failed_names", "junit_xml", "parse_checks",
           "timed"]

CheckStatus = Literal["passed", "failed", "skipped"]
STATUSES: tuple[CheckStatus, ...] = get_args(CheckStatus)


class CheckFailed(Exception):
    """A host-side check found the image wrong; the message is the one-line detail."""


class CheckSkipped(Exception):
    """A host-side check does not apply or cannot run; the message says why."""


@dataclass(frozen=True)
class CheckResult:
    """One check: its outcome, a one-line detail, how long it took, and what it found in
    full where it keeps that (a JSON object: layer-weights' layers)."""

    name: str  # a check needs only its name and status: the rest may be missing
    status: CheckStatus
    detail: str = ""
    seconds: float = 0.0
    record: dict[str, Any] | None = field(default=None, hash=False, compare=False,
                                          metadata=records.OMIT_NONE)


BEFORE_SUITES = records.key(absent=None)


@dataclass(frozen=True)
class SmokeReport:
    """The smoke record: the checks of one image (by its ID) and whether they all passed."""

    tag: str
    image: str
    image_id: str
    inputs: str
    # None in the records from before smoke suites, as gpu and model
    suite: str | None = field(metadata=BEFORE_SUITES)
    gpu: GpuMode | None = field(metadata=BEFORE_SUITES)
    model: str | None = field(metadata=BEFORE_SUITES)  # --model: the serve checks' model folder
    passed: bool
    checks: tuple[CheckResult, ...]
    time: str


def timed(name: str, check: Callable[[], str]) -> CheckResult:
    """Run one host-side check: passed with its detail, or failed / skipped with the reason.
    Any other exception is a failed check too (its type and message), never a crash."""
    start = time.monotonic()
    status: CheckStatus
    try:
        status, detail = "passed", check()
    except CheckSkipped as exc:
        status, detail = "skipped", str(exc)
    except CheckFailed as exc:
        status, detail = "failed", str(exc)
    except Exception as exc:  # a broken check is a failed check
        status, detail = "failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return CheckResult(name, status, detail, round(time.monotonic() - start, 3))


def parse_checks(output: str) -> list[CheckResult] | None:
    """The checks from the checker's last JSON line; None when there is none."""
    for line in reversed(output.splitlines()):
        if not line.startswith("{"):
            continue
        try:
            document = json.loads(line)
        except json.JSONDecodeError:
            continue
        checks = document.get("checks") if isinstance(document, dict) else None
        if not isinstance(checks, list):
            continue
        try:
            return [records.from_json(CheckResult, c) for c in checks]
        except records.RecordError:  # another line that is JSON
            continue
    return None


def failed_names(checks: Iterable[CheckResult]) -> list[str]:
    return [c.name for c in checks if c.status == "failed"]


def counts(checks: Iterable[CheckResult]) -> dict[CheckStatus, int]:
    """How many checks passed, failed and were skipped."""
    statuses = [c.status for c in checks]
    return {s: statuses.count(s) for s in STATUSES}


def junit_xml(report: SmokeReport) -> str:
    """JUnit XML of a smoke record: one testcase per check."""
    import xml.etree.ElementTree as ET
    suite_name = f"sparkbake.smoke.{report.tag}"
    tests, found = str(len(report.checks)), counts(report.checks)
    total_time = f"{sum(c.seconds for c in report.checks):.3f}"
    suites = ET.Element("testsuites", name="sparkbake smoke", tests=tests,
                        failures=str(found["failed"]), errors="0",
                        skipped=str(found["skipped"]), time=total_time)
    suite = ET.SubElement(suites, "testsuite", name=suite_name, tests=tests,
                          failures=str(found["failed"]), errors="0",
                          skipped=str(found["skipped"]), time=total_time,
                          timestamp=report.time)
    properties = ET.SubElement(suite, "properties")
    for key, value in (("image", report.image), ("image_id", report.image_id),
                       ("inputs", report.inputs), ("suite", report.suite)):
        if value is not None:
            ET.SubElement(properties, "property", name=key, value=value)
    for check in report.checks:
        _testcase(suite, suite_name, check)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _testcase(suite: ET.Element, classname: str, check: CheckResult) -> None:
    import xml.etree.ElementTree as ET
    case = ET.SubElement(suite, "testcase", classname=classname, name=check.name,
                         time=f"{check.seconds:.3f}")
    if check.status == "failed":
        failure = ET.SubElement(case, "failure", message=check.detail, type="SmokeCheckFailed")
        failure.text = check.detail
    elif check.status == "skipped":
        ET.SubElement(case, "skipped", message=check.detail)
