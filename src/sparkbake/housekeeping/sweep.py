"""What `clean` and `gc` free: each thing sized, listed, then removed (or, dry, only listed).

A path is removed only when its real place (its folder's symlinks resolved) lies inside one
of the roots the command may touch: the project's build/ and wheels/, the compile cache. The
entry itself is never followed: a symlink is unlinked, a folder's own links are unlinked by
rmtree, never descended into.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkbake.oci.transfer import human_bytes

__all__ = ["Item", "Kept", "newest_change", "outside", "path_item", "report", "size_of"]


class Kept(Exception):
    """Raised by an item's remover when the thing must stay (an image a container uses)."""


@dataclass(frozen=True)
class Item:
    """One thing to free: what the line names, its bytes, why it goes, and how."""

    label: str
    size: int
    why: str
    remove: Callable[[], None]
    refused: str = ""  # why it stays although nothing references it


def size_of(path: Path) -> int:
    """Bytes of a file or a folder's files; symlinks not followed, each inode counted once."""
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size if path.exists() or path.is_symlink() else 0
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            stat = os.lstat(os.path.join(folder, name))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def newest_change(path: Path) -> float:
    """The latest mtime in a tree: a folder a running build writes into is recent."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime)
    return newest


def outside(path: Path, roots: Sequence[Path]) -> str:
    """Why path may not be removed: its real place is not strictly inside a root ("" if it is)."""
    real = path.parent.resolve() / path.name
    for root in roots:
        base = root.resolve()
        if real != base and real.is_relative_to(base):
            return ""
    return f"it resolves to {real}, outside {' and '.join(str(r) for r in roots)}"


def path_item(path: Path, why: str, roots: Sequence[Path], shown_from: Path) -> Item:
    """An item for a file or folder under one of roots (refused when it escapes them)."""
    refused = outside(path, roots)
    label = str(path.relative_to(shown_from)) if path.is_relative_to(shown_from) else str(path)
    return Item(label, 0 if refused else size_of(path), why, lambda: _remove(path), refused)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def report(command: str, items: Iterable[Item], dry_run: bool,
           say: Callable[[str], None] = print) -> int:
    """Remove each item (unless dry_run), one line each, then the total; the bytes freed."""
    freed = count = 0
    for item in items:
        if item.refused:
            say(f"{command}: kept {item.label}: {item.refused}")
            continue
        try:
            if not dry_run:
                item.remove()
        except (Kept, OSError) as exc:
            say(f"{command}: kept {item.label}: {exc}")
            continue
        verb = "would remove" if dry_run else "removed"
        say(f"{command}: {verb} {item.label} ({human_bytes(item.size)}; {item.why})")
        freed, count = freed + item.size, count + 1
    say(_total(command, freed, count, dry_run))
    return freed


def _total(command: str, freed: int, count: int, dry_run: bool) -> str:
    if not count:
        return f"{command}: nothing to remove"
    things = f"{count} item{'s' if count != 1 else ''}"
    if dry_run:
        return f"{command}: would free {human_bytes(freed)} ({things}; dry run, nothing removed)"
    return f"{command}: freed {human_bytes(freed)} ({things})"
