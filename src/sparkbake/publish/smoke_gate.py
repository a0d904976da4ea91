"""The smoke gate of publish: a passing smoke record must name the image ID to publish
(`--skip-smoke` overrides, and the release record says what the record said)."""

from __future__ import annotations

import json
from pathlib import Path

from sparkbake import records
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.core.smoke_record import SmokeReport, counts
from sparkbake.errors import PublishError
from sparkbake.publish.record import ReleaseSmoke, SmokeFound

__all__ = ["check_smoke", "read_smoke", "smoke_gate"]


def read_smoke(path: Path, image_id: str) -> tuple[SmokeFound, SmokeReport | None]:
    """What the smoke record at path says of the image, and the record (None: missing or
    unreadable)."""
    try:
        record = records.from_json(SmokeReport, json.loads(path.read_text()))
    except FileNotFoundError:
        return "missing", None
    except (OSError, ValueError, KeyError, TypeError):  # not JSON, or not a smoke record
        return "unreadable", None
    if record.image_id != image_id:
        return "other image", record
    return ("passed" if record.passed else "failed"), record


def check_smoke(path: Path, tag: str, image_id: str, *, settings: Settings) -> SmokeReport:
    """The passing smoke record of exactly this image (by its ID), or PublishError."""
    state, record = read_smoke(path, image_id)
    remedy = (f"run `{settings.command('smoke', tag)}` first (or publish with --skip-smoke, "
              "recorded)")
    if state == "missing":
        raise PublishError(f"{tag} has no smoke record ({path})", remedy)
    if record is None:
        raise PublishError(f"{path}: unreadable smoke record", remedy)
    if state == "other image":
        raise PublishError(f"{path}: the smoke record is not of the image to publish (it "
                           f"checked {record.image_id[:19]}, not {image_id[:19]})", remedy)
    if state == "failed":
        raise PublishError(f"{path}: the smoke checks of {tag} did not pass",
                           f"fix them, then run `{settings.command('smoke', tag)}`")
    return record


def smoke_gate(path: Path, tag: str, image_id: str, skip: bool, *, console: Console,
               settings: Settings) -> ReleaseSmoke:
    """The release record's `smoke`: the passing record's summary, or, with skip, what the
    record said of the image when --skip-smoke overrode it."""
    if skip:
        found, _ = read_smoke(path, image_id)
        console.notice(f"publish: --skip-smoke: {tag} ({image_id[:19]}) goes out without a passing "
                       f"smoke record (found: {found})")
        return ReleaseSmoke("skipped", found=found)
    record = check_smoke(path, tag, image_id, settings=settings)
    tally = counts(record.checks)
    return ReleaseSmoke("passed", image_id=image_id, time=record.time,
                        checks={"passed": tally["passed"], "skipped": tally["skipped"]})
