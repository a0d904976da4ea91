"""The few files of a baked image the SBOM is made from, read from its layers in an OCI
layout: dpkg's status, the venv's distribution metadata and /opt/sparkbake/manifest.json.

Pure file work, offline: each layer is read once, bottom first, and a later layer's file (or
its whiteout) wins, as in the container's filesystem. What a layer gives (its wanted files
and whiteouts, in order) is kept beside the layout's blobs by the layer's digest, so an
image that shares most of its layers with one read before reads only its new ones.
"""

from __future__ import annotations

import base64
import json
import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sparkbake import trust
from sparkbake.console.display import Console
from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.files import atomic_write
from sparkbake.oci import image_layout

__all__ = ["ImageFiles", "read", "remember"]

DPKG_STATUS = "var/lib/dpkg/status"
MANIFEST = "opt/sparkbake/manifest.json"
OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
DIST_METADATA = re.compile(r"opt/venv/lib/python[0-9.]+/site-packages/[^/]+\.dist-info/METADATA")
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"

Change = tuple[str, str, str]  # ("put", path, base64 content) or ("drop", path, "self"/"")


@dataclass(frozen=True)
class ImageFiles:
    """The files found, by path in the image (no leading slash)."""

    files: dict[str, bytes]

    @property
    def manifest(self) -> BakedManifest:
        found: BakedManifest = json.loads(self.files.get(MANIFEST, b"{}"))
        return found

    @property
    def dpkg_status(self) -> str:
        return self.files.get(DPKG_STATUS, b"").decode("utf-8", "replace")

    @property
    def os_id(self) -> str:
        """/etc/os-release's ID (debian, ubuntu): the namespace of its packages' purls."""
        text = (self.files.get(OS_RELEASE[0]) or self.files.get(OS_RELEASE[1]) or b"").decode()
        found = re.search(r'^ID="?([^"\n]+)"?$', text, re.MULTILINE)
        return found[1] if found else "debian"

    def dist_metadata(self) -> list[bytes]:
        return [data for path, data in sorted(self.files.items()) if DIST_METADATA.fullmatch(path)]


def wanted(path: str) -> bool:
    return path in (DPKG_STATUS, MANIFEST, *OS_RELEASE) or DIST_METADATA.fullmatch(path) is not None


def read(layout: image_layout.Layout, image: image_layout.Descriptor, *,
         console: Console) -> ImageFiles:
    files: dict[str, bytes] = {}
    for layer in layout.read_manifest(image.digest).layers:
        for kind, path, data in _changes(layout, layer, console=console):
            if kind == "put":
                files[path] = base64.b64decode(data)
            else:
                _remove(files, path, keep_self=bool(data))
    return ImageFiles(files)


def _changes(layout: image_layout.Layout, layer: image_layout.Descriptor, *,
             console: Console) -> list[Change]:
    """What one layer does to the wanted files, from its record or read from its blob (a
    damaged record is dropped and the blob read again)."""
    record = layout.read_files(layer.digest)
    found = trust.record_or_drop(record, ("changes",), "a layer's SBOM files", console=console)
    if found is not None:
        try:
            return [(str(k), str(p), _checked(k, d)) for k, p, d in found["changes"]]
        except (TypeError, ValueError) as exc:  # JSON, but not what this module writes
            console.notice(trust.removed(record, f"not a layer's SBOM files ({exc})"))
            record.unlink(missing_ok=True)
    changes = _read_layer(layout, layer)
    atomic_write(record, json.dumps({"layer": layer.digest, "changes": changes}) + "\n")
    return changes


def remember(layout: image_layout.Layout, digest: str, root: Path, paths: Iterable[str]) -> None:
    """What a layer just written from paths under root gives (its wanted regular files; it
    has no whiteouts), recorded as reading its blob would record it."""
    changes: list[Change] = [
        ("put", name, base64.b64encode((root / name).read_bytes()).decode())
        for name in sorted(paths) if wanted(name) and not (root / name).is_symlink()
        and (root / name).is_file()]
    atomic_write(layout.read_files(digest), json.dumps({"layer": digest, "changes": changes})
                 + "\n")


def _checked(kind: object, data: object) -> str:
    """A recorded change's data, checked as read does: base64 for a file, else a flag."""
    if kind == "put":
        base64.b64decode(str(data), validate=True)
    elif kind != "drop":
        raise ValueError(f"no change {kind!r}")
    return str(data)


def _read_layer(layout: image_layout.Layout, layer: image_layout.Descriptor) -> list[Change]:
    """One layer's wanted files and whiteouts, in the order they come."""
    changes: list[Change] = []
    with layout.blob(layer.digest).open("rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
        for member in tar:
            path = member.name.removeprefix("./").rstrip("/")
            folder, _, name = path.rpartition("/")
            if name == OPAQUE:  # the folder's lower content is gone
                changes.append(("drop", folder, ""))
            elif name.startswith(WHITEOUT):
                changes.append(("drop", f"{folder}/{name[len(WHITEOUT):]}".lstrip("/"), "self"))
            elif member.isfile() and wanted(path):
                extracted = tar.extractfile(member)
                data = extracted.read() if extracted else b""
                changes.append(("put", path, base64.b64encode(data).decode()))
    return changes


def _remove(files: dict[str, bytes], gone: str, keep_self: bool = True) -> None:
    for path in [p for p in files if (keep_self and p == gone) or p.startswith(gone + "/")]:
        del files[path]
