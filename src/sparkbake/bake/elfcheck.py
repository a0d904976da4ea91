"""The bake's platform check: every ELF file going into an image is for its platform."""

from __future__ import annotations

import os
from pathlib import Path

from sparkbake.errors import BakeError

__all__ = ["ELF_MACHINES", "machine_of", "require_platform"]

ELF_MACHINES = {62: "linux/amd64", 183: "linux/arm64"}  # e_machine -> platform
# how a folder says its files are for that platform (a toolchain's stubs for cross targets)
FOLDER_NAMES = {"linux/amd64": ("x86_64", "amd64"), "linux/arm64": ("aarch64", "arm64")}
_MAGIC = b"\x7fELF"


def machine_of(header: bytes) -> int | None:
    """e_machine of an ELF header (its first 20 bytes), None for anything else."""
    if len(header) < 20 or not header.startswith(_MAGIC):
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def kept_for(found: str, relative: Path) -> bool:
    """A file for another platform that a folder of its path names as that platform's
    (`stubs/aarch64-unknown-linux-gnu/lib.so`): there on purpose. Its own name does not
    count: a `...-x86_64-linux-gnu.so` extension in an arm64 image is the error to find."""
    return any(word in folder for folder in relative.parent.parts
               for word in FOLDER_NAMES.get(found, ()))


def require_platform(root: Path, platform: str) -> None:
    """Refuse the first ELF file under root built for another machine than platform's, but
    files kept under a folder named for their own platform (kept_for)."""
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = Path(folder, name)
            if path.is_symlink():
                continue
            with path.open("rb") as handle:
                machine = machine_of(handle.read(20))
            if machine is None or ELF_MACHINES.get(machine) == platform:
                continue
            found = ELF_MACHINES.get(machine, f"ELF machine {machine}")
            if kept_for(found, path.relative_to(root)):
                continue
            raise BakeError(
                f"/{path.relative_to(root)} is built for {found}, the image is {platform}",
                "install a wheel built for the image's platform (check the runtime lock and "
                "the tag's platform)")
