"""The few files of a baked image the SBOM is made from, read from its layers in an OCI
layout: dpkg's status, the venv's distribution metadata and /opt/sparkbake/manifest.json.

Pure file work, offline: each layer is read once, bottom first, and a later layer's file (or
its whiteout) wins, as in the container's filesystem.
"""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import dataclass
from typing import Any

from sparkbake.oci import ocilayout

__all__ = ["ImageFiles", "read"]

DPKG_STATUS = "var/lib/dpkg/status"
MANIFEST = "opt/sparkbake/manifest.json"
OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
DIST_METADATA = re.compile(r"opt/venv/lib/python[0-9.]+/site-packages/[^/]+\.dist-info/METADATA")
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class ImageFiles:
    """The files found, by path in the image (no leading slash)."""

    files: dict[str, bytes]

    @property
    def manifest(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.files.get(MANIFEST, b"{}"))
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


def read(layout: ocilayout.Layout, image: ocilayout.Descriptor) -> ImageFiles:
    files: dict[str, bytes] = {}
    for layer in layout.read_manifest(image.digest).layers:
        _apply(layout, layer, files)
    return ImageFiles(files)


def _apply(layout: ocilayout.Layout, layer: ocilayout.Descriptor, files: dict[str, bytes]) -> None:
    """One layer onto files: its wanted files replace, its whiteouts remove."""
    with layout.blob(layer.digest).open("rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
        for member in tar:
            path = member.name.removeprefix("./").rstrip("/")
            folder, _, name = path.rpartition("/")
            if name == OPAQUE:  # the folder's lower content is gone
                _remove(files, folder, keep_self=False)
            elif name.startswith(WHITEOUT):
                _remove(files, f"{folder}/{name[len(WHITEOUT):]}".lstrip("/"))
            elif member.isfile() and wanted(path):
                extracted = tar.extractfile(member)
                files[path] = extracted.read() if extracted else b""


def _remove(files: dict[str, bytes], gone: str, keep_self: bool = True) -> None:
    for path in [p for p in files if (keep_self and p == gone) or p.startswith(gone + "/")]:
        del files[path]
