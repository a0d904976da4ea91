"""The distributions installed in a folder (pip --target's, a venv's site-packages), read by
importlib.metadata: each one's name, version and the files its RECORD lists."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

if TYPE_CHECKING:
    # imported where used at run time: it imports the email package, slow, and only a
    # build that installs packages reads their metadata
    from importlib import metadata

__all__ = ["Distribution", "RecordedFile", "installed"]


@dataclass(frozen=True)
class RecordedFile:
    """One row of a RECORD."""

    path: str  # relative to the folder that holds the .dist-info
    hash: str  # `sha256=<urlsafe base64>`; "" where RECORD gives none (RECORD itself, bytecode)


@dataclass(frozen=True)
class Distribution:
    name: str  # canonical (PEP 503)
    version: str
    files: tuple[RecordedFile, ...]


def installed(folder: Path) -> list[Distribution]:
    """Every distribution installed in folder, by name and version; a .dist-info without
    the METADATA that names it and its version is none."""
    from importlib import metadata

    found = []
    for dist in metadata.distributions(path=[str(folder)]):
        meta = dist.metadata  # read anew on each access
        if "Name" in meta and "Version" in meta:
            found.append(Distribution(str(canonicalize_name(meta["Name"])), meta["Version"],
                                      _recorded(dist)))
    return sorted(found, key=lambda dist: (dist.name, dist.version))


def _recorded(dist: metadata.Distribution) -> tuple[RecordedFile, ...]:
    """RECORD's rows, read as pip writes them (CSV) but for rows without a path: importlib's
    own `files` fails on a blank line."""
    rows = csv.reader((dist.read_text("RECORD") or "").splitlines())
    return tuple(RecordedFile(row[0], row[1] if len(row) > 1 else "") for row in rows
                 if row and row[0])
