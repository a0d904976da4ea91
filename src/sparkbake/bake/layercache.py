"""Compressed layers kept by key, so that an unchanged layer is neither tarred nor gzipped
again.

A record build/layers/<part>-<key>.json names the blob, which lives in the bake's OCI
layout (build/oci) like every other: one copy of a 10 GB layer, not two. The blob goes in
first and the record is written atomically after it, so an interrupted bake leaves no record
of a missing blob; a record whose blob is gone (a cleaned layout) or damaged (not its
digest's bytes: `image_layout.Layout.intact`), and a record that cannot be read, count as no
record. The cache is the build folder's: a clean build (and verify's rebuild) makes every
layer anew.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sparkbake import trust
from sparkbake.files import atomic_write
from sparkbake.hashing import data_hash, file_sha256
from sparkbake.oci import image_layout, layers

__all__ = ["FORMAT", "LayerCache", "content_key"]

FORMAT = 1  # raise when a layer of the same key would get other bytes


class LayerCache:
    """Layer blobs by key: records under root, blobs in layout."""

    def __init__(self, root: Path, layout: image_layout.Layout) -> None:
        self.root, self.layout = root, layout

    def record(self, part: str, key: str) -> Path:
        return self.root / f"{part}-{key}.json"

    def get(self, part: str, key: str) -> tuple[layers.Layer, dict[str, Any]] | None:
        """The cached layer of part and key with what its record says besides, if there."""
        found = self._read(self.record(part, key))
        if found is None or not self.layout.intact(found["digest"], found["size"]):
            return None
        layer = layers.Layer(self.layout.blob(found["digest"]), found["digest"], found["size"],
                             found["diff_id"])
        return layer, found.get("about") or {}

    def _read(self, path: Path) -> dict[str, Any] | None:
        """The record at path; None when missing, or damaged (then removed, with a warning)."""
        return trust.record_or_drop(path, ("digest", "size", "diff_id"), "a layer record",
                                    console=self.layout.console)

    def put(self, part: str, key: str, layer: layers.Layer,
            about: dict[str, Any] | None = None) -> layers.Layer:
        """Keep layer under part and key; returns it as the layout holds it."""
        self.layout.add_file(layer.path, layer.digest, layers.MEDIA_TYPE)
        record = {"part": part, "key": key, "digest": layer.digest, "size": layer.size,
                  "diff_id": layer.diff_id, "about": about or {}}
        atomic_write(self.record(part, key), json.dumps(record, indent=2, sort_keys=True) + "\n")
        return layers.Layer(self.layout.blob(layer.digest), layer.digest, layer.size,
                            layer.diff_id)

    def layer(self, part: str, key: str, make: Callable[[], layers.Layer]) -> tuple[
            layers.Layer, bool]:
        """The cached layer of part and key, else make's, kept; and whether it was cached."""
        cached = self.get(part, key)
        if cached is not None:
            return cached[0], True
        return self.put(part, key, make()), False


def content_key(root: Path, names: Iterable[str], mtime: int) -> str:
    """What a layer of these paths under root is made of (`layers.from_paths`): every path's
    kind, mode, size and bytes, the layer time and the writers' formats. Reading the files
    is far cheaper than compressing them."""
    listing = [_describe(root / name, name) for name in sorted(set(names))]
    return data_hash({"format": [FORMAT, image_layout.FORMAT, layers.COMPRESSION], "mtime": mtime,
                      "paths": listing})


def _describe(path: Path, name: str) -> list[str]:
    if path.is_symlink():
        return [name, "symlink", str(path.readlink())]
    if path.is_dir():
        return [name, "dir"]
    executable = "x" if path.stat().st_mode & 0o111 else "-"
    return [name, "file", executable, str(path.stat().st_size), file_sha256(path)]
