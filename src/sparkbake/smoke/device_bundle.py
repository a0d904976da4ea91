"""The device bundle's format: what `sparkbake device-bundle` writes and
sparkbake.smoke.oci_runtime reads. One tar file (xz) holding bundle.json (a Bundle), the
cut root under rootfs/ (the checker and what it checks against inside it) and the OCI
runtime's Debian packages under packages/, unpacked here without dpkg. Standard library and
sparkbake's records only: it runs where nothing is installed.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sparkbake import records
from sparkbake.core.smoke_record import CheckResult

__all__ = ["BUNDLE_FILE", "EXPECTED", "PACKAGES", "ROOT", "Bundle", "BundleError", "Package",
           "ar_members", "read_bundle", "unpack_bundle", "unpack_deb"]

BUNDLE_FILE = "bundle.json"
EXPECTED = "/opt/sparkbake-smoke/expected.json"  # in the root, beside the checker
ROOT = "rootfs"
PACKAGES = "packages"


class BundleError(Exception):
    """The bundle or the machine cannot run the smoke; str() is the one line, remedy what
    to do."""

    def __init__(self, message: str, remedy: str, code: int = 2) -> None:
        super().__init__(message)
        self.remedy, self.code = remedy, code


@dataclass(frozen=True)
class Package:
    """A Debian package carried in the bundle: the OCI runtime and what it links."""

    name: str
    file: str
    sha256: str


@dataclass(frozen=True)
class Bundle:
    """bundle.json: what the bundle holds and how the checker is started in it."""

    schema: int
    tag: str
    image: str
    image_id: str
    inputs: str
    suite: str
    cuda_arch: str
    env: tuple[str, ...]  # the image's config Env, as the engine would set it
    checker: tuple[str, ...]  # the checker's argv inside the root
    packages: tuple[Package, ...]
    root_files: int  # what the cut root keeps of the image's
    image_files: int
    root_bytes: int
    image_bytes: int
    checks_here: tuple[CheckResult, ...]  # the checks of the traced run, in the engine


def read_bundle(folder: Path) -> Bundle:
    path = folder / BUNDLE_FILE
    try:
        return records.from_json(Bundle, json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, records.RecordError) as exc:
        raise BundleError(f"{path.name}: not a device bundle's description ({exc})",
                          "make the bundle again with `sparkbake device-bundle TAG`") from None


def unpack_bundle(archive: Path, folder: Path) -> Bundle:
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="tar")
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"{archive}: not a readable bundle ({unreadable(exc)})",
                          "copy it again, or make it again with `sparkbake device-bundle TAG`"
                          ) from None
    return read_bundle(folder)


def unreadable(exc: OSError | tarfile.TarError) -> str:
    """Why an archive cannot be read, in a few words (tarfile's own text spans lines)."""
    if isinstance(exc, tarfile.TarError):
        return "not a tar file, or a damaged one"
    return exc.strerror or type(exc).__name__


def ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The members of an ar archive (a .deb is one): (name, bytes)."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset:offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        start = offset + 60
        yield name, data[start:start + size]
        offset = start + size + (size % 2)


def unpack_deb(deb: Path, folder: Path) -> None:
    """A .deb's files (its data.tar.*) under folder, as `dpkg -x` puts them."""
    try:
        members = dict(ar_members(deb.read_bytes()))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{deb.name}: not a Debian package ({exc})",
                          "make the bundle again") from None
    data = next((name for name in members if name.startswith("data.tar")), None)
    if data is None or data.endswith(".zst"):
        raise BundleError(f"{deb.name}: its files are in {data or 'no data.tar member'}, which "
                          "this Python cannot unpack", "carry a package compressed with xz or gzip "
                          "(Debian's are)")
    with tempfile.TemporaryFile() as raw:
        raw.write(members[data])
        raw.seek(0)
        with tarfile.open(fileobj=raw) as tar:
            tar.extractall(folder, filter="tar")
