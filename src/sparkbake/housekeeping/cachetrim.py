"""The compile cache folder (sccache's, README: Compile cache) trimmed to a size by `gc`:
its least recently used files go first, until what stays fits."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sparkbake.errors import UsageError
from sparkbake.housekeeping.sweep import Item, outside

__all__ = ["parse_size", "trim_item"]

UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}  # decimal, as sizes print
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)B?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'20G' -> 20_000_000_000; K, M, G, T are powers of 1000, a bare number is bytes."""
    match = SIZE.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"--max-cache-size {text!r} is not a size",
                         "write e.g. --max-cache-size 20G (K, M, G, T: powers of 1000)")
    return int(float(match.group(1)) * UNITS[match.group(2).upper()])


def trim_item(folder: Path, max_size: int) -> Item | None:
    """One item for the oldest files beyond max_size; None when the cache fits."""
    files = _files(folder)
    total = sum(size for _, size, _ in files)
    if total <= max_size:
        return None
    doomed: list[Path] = []
    freed = 0
    for path, size, _ in sorted(files, key=lambda found: found[2]):  # least recently used first
        if total - freed <= max_size:
            break
        doomed.append(path)
        freed += size
    why = f"the oldest files beyond {_gb(max_size)} (the cache held {_gb(total)})"
    return Item(f"{folder} ({len(doomed)} files)", freed, why, lambda: _unlink(doomed, folder))


def _files(folder: Path) -> list[tuple[Path, int, float]]:
    """Each regular file under folder with its size and last use (symlinks not followed)."""
    found = []
    for parent, _, names in os.walk(folder):
        for name in names:
            path = Path(parent, name)
            stat = path.lstat()
            if path.is_file() and not path.is_symlink():
                found.append((path, stat.st_size, max(stat.st_atime, stat.st_mtime)))
    return found


def _unlink(paths: list[Path], folder: Path) -> None:
    for path in paths:
        if not outside(path, [folder]):
            path.unlink(missing_ok=True)


def _gb(count: int) -> str:
    return f"{count / 10**9:.1f} GB"
