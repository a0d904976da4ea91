"""Cache entries trusted by content: a file is checked once against the sha256 it is stored
under, and a stamp of what was checked (size, mtime, inode) is kept beside it. While the file
has that stamp it is trusted without being read (the hot path: a stat); any write or
replacement changes the stamp, so the file is hashed again and a damaged one found out.
Where bytes leave the machine (publish, verify, gc --check), `full` hashes regardless.

Entries are sealed read-only (0444) once written: sparkbake replaces files, never writes
into them, so nothing writes through a hard link into a shared cache by mistake.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbake.console.display import Console
from sparkbake.files import atomic_write
from sparkbake.hashing import file_sha256

__all__ = ["Damaged", "Stamp", "read_record", "record_or_drop", "removed", "seal",
           "verified"]

SEALED = 0o444


class Damaged(Exception):
    """A cache record that is there but cannot be read as what it should be."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


@dataclass(frozen=True)
class Stamp:
    """What a file was like when its bytes were checked."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> Stamp:
        found = path.stat()
        return cls(found.st_size, found.st_mtime_ns, found.st_ino)

    @classmethod
    def parse(cls, text: str) -> Stamp | None:
        try:
            size, mtime_ns, inode = (int(part) for part in text.split())
        except ValueError:
            return None
        return cls(size, mtime_ns, inode)

    def text(self) -> str:
        return f"{self.size} {self.mtime_ns} {self.inode}\n"


def verified(path: Path, sha256: str | frozenset[str], stamp: Path, *,
             size: int | None = None, full: bool = False) -> bool:
    """Are path's bytes sha256 (hex; or one of a set, as a lock allows), of size if given?
    Trusted from the stamp file unless full; else hashed, and the stamp written when they
    are."""
    try:
        now = Stamp.of(path)
    except FileNotFoundError:
        return False
    if size is not None and now.size != size:
        return False
    if not full and _read_stamp(stamp) == now:
        return True
    found = file_sha256(path)
    if found != sha256 and (isinstance(sha256, str) or found not in sha256):
        return False
    remember(path, stamp)
    return True


def remember(path: Path, stamp: Path) -> None:
    """Write path's stamp: its bytes are known to be right. A stamp only saves a hash, so
    one that cannot be written (a read-only build/) is no error."""
    with contextlib.suppress(OSError):
        atomic_write(stamp, Stamp.of(path).text())


def seal(path: Path) -> None:
    """Make an entry read-only (another user's file stays as it is)."""
    with contextlib.suppress(OSError):
        os.chmod(path, SEALED)


def _read_stamp(stamp: Path) -> Stamp | None:
    try:
        return Stamp.parse(stamp.read_text())
    except (OSError, UnicodeDecodeError):
        return None


def read_record(path: Path) -> dict[str, Any] | None:
    """A JSON record (an object), None when it is missing; Damaged when it is there but is
    not one (truncated, overwritten)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(data)
    except ValueError as exc:  # JSON and UTF-8 errors alike
        raise Damaged(path, f"not a JSON record ({exc})") from exc
    if not isinstance(record, dict):
        raise Damaged(path, "not a JSON object")
    return record


def record_or_drop(path: Path, keys: tuple[str, ...] = (), what: str = "", *,
                   console: Console) -> dict[str, Any] | None:
    """The record at path (read_record) with keys in it; a damaged one is removed with a
    warning, to be made again: None then, as when there is none."""
    try:
        record = read_record(path)
        if record is not None and not set(keys) <= record.keys():
            raise Damaged(path, f"not {what}")
    except Damaged as exc:
        console.notice(removed(path, exc.why))
        path.unlink(missing_ok=True)
        return None
    return record


def removed(path: Path, why: str) -> str:
    """The warning line for a damaged entry that is dropped."""
    return f"damaged cache entry {path}: {why}; removed, it will be made again"
