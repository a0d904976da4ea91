"""The bench figures per image, kept where they outlive the cluster record that `down`
removes: build/clusters/TAG.bench.json, keyed by the image ID the engine gave the head's
container, each with the image's manifest digests (its RepoDigests). A release is written
before any cluster runs it, so `diff` finds a release's figures here, by its image ID or
its digest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sparkbake import records
from sparkbake.files import atomic_write
from sparkbake.nodes.bench import BenchFigures

__all__ = ["SUFFIX", "Measured", "digests_of", "lookup", "remember"]

SUFFIX = ".bench.json"


@dataclass(frozen=True)
class Measured:
    """One image's latest bench: the cluster that ran it, the image as up named it, the
    engine's ID of it and its manifest digests, and the figures."""

    cluster: str
    image: str
    image_id: str
    digests: tuple[str, ...]
    figures: BenchFigures

    def of_any(self, ids: Iterable[str]) -> bool:
        """Whether this image is one of ids (image IDs or manifest digests)."""
        return not {self.image_id, *self.digests}.isdisjoint(ids)


def digests_of(repo_digests: Iterable[str]) -> tuple[str, ...]:
    """The manifest digests of an image's RepoDigests (`repository@sha256:...`)."""
    return tuple(sorted({ref.rpartition("@")[2] for ref in repo_digests if "@" in ref}))


def remember(path: Path, measured: Measured) -> None:
    """Keep the image's bench in the tag's file, in place of its earlier one."""
    kept = _read(path)
    kept[measured.image_id] = records.to_json(measured)
    atomic_write(path, json.dumps(kept, indent=2) + "\n")


def lookup(folder: Path, ids: Iterable[str]) -> Measured | None:
    """The latest bench kept in folder (any tag's file) of an image among ids; None where
    none was benched."""
    wanted = {i for i in ids if i}
    found = [m for path in sorted(folder.glob(f"*{SUFFIX}")) for m in _entries(path)
             if m.of_any(wanted)]
    return max(found, key=lambda m: m.figures.date, default=None)


def _entries(path: Path) -> list[Measured]:
    """A file's entries that read whole (one damaged entry does not hide the others)."""
    found = []
    for entry in _read(path).values():
        try:
            found.append(records.from_json(Measured, entry))
        except (records.RecordError, TypeError, KeyError):
            continue
    return found


def _read(path: Path) -> dict[str, object]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
