"""The smoke record's parts: one check result ({name, status, detail, seconds}), how host-side
checks make one, how the in-image checker's output is read, and the JUnit XML of a record."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

__all__ = ["STATUSES", "CheckFailed", "CheckSkipped", "failed_names", "junit_xml",
           "parse_checks", "result", "timed"]

STATUSES = ("passed", "failed", "skipped")


class CheckFailed(Exception):
    """A host-side check found the image wrong; the message is the one-line detail."""


class CheckSkipped(Exception):
    """A host-side check does not apply or cannot run; the message says why."""


def result(name: str, status: str, detail: str, seconds: float = 0.0) -> dict[str, Any]:
    return {"name": name, "status": status, "detail": detail, "seconds": round(seconds, 3)}


def timed(name: str, check: Callable[[], str]) -> dict[str, Any]:
    """Run one host-side check: passed with its detail, or failed / skipped with the reason.
    Any other exception is a failed check too (its type and message), never a crash."""
    start = time.monotonic()
    try:
        status, detail = "passed", check()
    except CheckSkipped as exc:
        status, detail = "skipped", str(exc)
    except CheckFailed as exc:
        status, detail = "failed", str(exc)
    except Exception as exc:  # a broken check is a failed check
        status, detail = "failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return result(name, status, detail, time.monotonic() - start)


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
    for key in ("image", "image_id", "inputs", "suite"):
        if key in results:
            ET.SubElement(properties, "property", name=key, value=str(results[key]))
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
