"""The wheels' cache entries checked by content before they are reused (`trust`): each wheel
of wheels/<key> against the sha256 its wheels.json records, the kernel cache's wheel against
its kernels.json. A stamp per file (in the entry's .verified/) spares the hash while the file
is as it was checked; a damaged entry is removed whole, with a warning, and made again."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkbake import records, trust
from sparkbake.console.display import Console
from sparkbake.wheels.report import REPORT, WheelsReport

__all__ = ["STAMPS", "damage", "drop_damaged", "kernels_damage"]

STAMPS = ".verified"
KERNELS = "kernels.json"  # kernelseed.KERNELS_FILE


def damage(folder: Path, *, full: bool = False) -> str | None:
    """What is wrong with a wheels entry: None when it is not there (no report), "" when
    nothing is, else why it cannot be used."""
    return _check(folder, REPORT, full, lambda record: [  # the record read is a report
        (wheel.file, wheel.sha256)
        for wheel in records.from_json(WheelsReport, record).wheels])


def kernels_damage(entry: Path, *, full: bool = False) -> str | None:
    """The same for a kernel cache entry (kernels.json and its one wheel)."""
    return _check(entry, KERNELS, full, lambda record: [
        (str(record["wheel"]), str(record["sha256"]))])


def drop_damaged(folder: Path, why: str | None, *, console: Console) -> None:
    """Remove an entry that damage found wrong (nothing when why is None or "")."""
    if why:
        console.notice(trust.removed(folder, why))
        shutil.rmtree(folder)


def _check(folder: Path, name: str, full: bool,
           listed: Callable[[dict[str, Any]], list[tuple[str, str]]]) -> str | None:
    try:
        record = trust.read_record(folder / name)
        if record is None:
            return None
        files = listed(record)
    except trust.Damaged as exc:
        return f"{name} is {exc.why}"
    except (KeyError, TypeError, ValueError, AttributeError):  # a part missing or misshapen
        return f"{name} is not a complete record"
    bad = [file for file, sha256 in files
           if not trust.verified(folder / file, sha256, folder / STAMPS / file, full=full)]
    return f"{', '.join(bad)}: not the sha256 {name} records" if bad else ""
