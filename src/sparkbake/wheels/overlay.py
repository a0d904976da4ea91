"""A wheel with a tree's changes to its packages: the seeded and assembled wheels (a cached
wheel's compiled libraries with the series' Python files), and a built wheel taken back to
the pristine tree for the kernel cache. Same entries and date, same bytes (wheelfile.contents)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkbake.wheelfile import contents, stamping

__all__ = ["Overlaid", "overlay"]


@dataclass(frozen=True)
class Overlaid:
    """The wheel written, its sha256 (taken while writing it) and the series' paths in it."""

    wheel: Path
    sha256: str
    changed: list[str]


def overlay(seed_wheel: Path, pristine: Path, patched: Path, folder: Path, source_date: int,
            local: str = "", overrides: Sequence[str] = ()) -> Overlaid:
    """The seed wheel with the series' changes to its packages (files the patched tree has
    other than the pristine one: changed, added, removed), entries dated source_date and the
    local version in its name and metadata (stamping), written into folder. Its compiled
    libraries stay the seed's, byte for byte, copied without being inflated."""
    with zipfile.ZipFile(seed_wheel) as seed:
        files = contents.read(seed)
        changed = _series_changes(pristine, patched, _packages(files, contents.dist_info(files)))
        for name in changed:
            if (patched / name).is_file():
                files[name] = contents.Entry(0o644, (patched / name).read_bytes)
            else:
                files.pop(name, None)
        dest = folder / stamping.stamped_file_name(seed_wheel.name, local)
        sha256 = contents.write(dest, stamping.stamp_entries(files, local, overrides),
                                source_date)
    return Overlaid(dest, sha256, changed)


def _packages(names: Iterable[str], metadata: str) -> set[str]:
    """The wheel's top-level folders but its metadata: what the tree's changes may reach."""
    return {name.split("/", 1)[0] for name in names if "/" in name
            and not name.startswith((metadata, metadata.replace(".dist-info", ".data")))}


def _series_changes(pristine: Path, patched: Path, packages: set[str]) -> list[str]:
    changed = []
    for package in sorted(packages):
        before = _files(pristine / package, pristine)
        after = _files(patched / package, patched)
        changed += [name for name in sorted(before | after)
                    if name not in before or name not in after
                    or (pristine / name).read_bytes() != (patched / name).read_bytes()]
    return [name for name in changed if "__pycache__" not in name]


def _files(folder: Path, root: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    return {p.relative_to(root).as_posix() for p in folder.rglob("*") if p.is_file()}
