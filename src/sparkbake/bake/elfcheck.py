"""The bake's platform check: every ELF file going into an image is for its platform."""

from __future__ import annotations

import os
from pathlib import Path

from sparkbake.config.platforms import Platform, of_elf_machine
from sparkbake.errors import BakeError

__all__ = ["machine_of", "require_platform"]

_MAGIC = b"\x7fELF"


def machine_of(header: bytes) -> int | None:
    """e_machine of an ELF header (its first 20 bytes), None for anything else."""
    if len(header) < 20 or not header.startswith(_MAGIC):
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def kept_for(found: Platform, relative: Path) -> bool:
    """A file for another platform that a folder of its path names as that platform's, by
    its machine or its architecture (`stubs/aarch64-unknown-linux-gnu/lib.so`): there on
    purpose. Its own name does not count: a `...-x86_64-linux-gnu.so` extension in an arm64
    image is the error to find."""
    return any(word in folder for folder in relative.parent.parts
               for word in (found.machine, found.architecture))


def require_platform(root: Path, platform: Platform) -> None:
    """Refuse the first ELF file under root built for another machine than platform's, but
    files kept under a folder named for their own platform (kept_for)."""
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = Path(folder, name)
            if path.is_symlink():
                continue
            with path.open("rb") as handle:
                machine = machine_of(handle.read(20))
            if machine is None:
                continue
            found = of_elf_machine(machine)
            if found == platform or (found is not None
                                     and kept_for(found, path.relative_to(root))):
                continue
            built_for = found or f"ELF machine {machine}"
            raise BakeError(
                f"/{path.relative_to(root)} is built for {built_for}, the image is {platform}",
                "install a wheel built for the image's platform (check the runtime lock and "
                "the tag's platform)")
