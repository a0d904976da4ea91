"""Platforms: what an image is built for, `linux/arm64` as versions.yaml, OCI and the engine
write it, and every other tool's name for its architecture, in one table (PLATFORMS).

A multi-platform tag (`platforms: {linux/arm64: "12.1a", linux/amd64: "12.0a"}`, read by
versions.py) NAME becomes one ordinary tag per platform, NAME-<architecture> (NAME-arm64,
NAME-amd64), each of one platform and its CUDA arch, built, smoked and recorded on its own;
NAME is the release of them all, which `publish` pushes as one OCI image index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["AMD64", "ARM64", "PLATFORM", "PLATFORMS", "Platform", "of_elf_machine",
           "of_machine", "parse", "platform_name"]

PLATFORM = re.compile(r"linux/[a-z0-9]+")  # a platform as versions.yaml writes it


@dataclass(frozen=True)
class Platform:
    """A Linux platform and its architecture in each tool's words. One that the table lacks
    (versions.yaml may name it; only locks, debootstrap and the ELF check need the table)
    has its architecture as its machine too, as `uname -m` says of most."""

    architecture: str  # OCI's and the engine's (linux/arm64): lock files, release tag names
    machine: str  # the kernel's (uname -m): qemu's binfmt handler, uv's and wheels' tags
    debian: str | None = None  # dpkg's, for debootstrap --arch
    elf_machine: int | None = None  # e_machine in the header of its ELF files

    os: ClassVar[str] = "linux"

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}"


AMD64 = Platform("amd64", machine="x86_64", debian="amd64", elf_machine=62)
ARM64 = Platform("arm64", machine="aarch64", debian="arm64", elf_machine=183)
PLATFORMS = (AMD64, ARM64)  # the table, in the order remedies list it


def parse(text: str) -> Platform:
    """The platform versions.yaml names (PLATFORM): the table's, else one of its own."""
    if not PLATFORM.fullmatch(text):
        raise ValueError(f"not a platform such as linux/arm64: {text!r}")
    architecture = text.split("/", 1)[1]
    return next((p for p in PLATFORMS if p.architecture == architecture),
                Platform(architecture, machine=architecture))


def of_machine(name: str) -> Platform:
    """The Linux platform of a machine as the kernel (x86_64) or an engine (x86_64 or amd64)
    names it; another as it is named."""
    return next((p for p in PLATFORMS if name in (p.machine, p.architecture)),
                Platform(name, machine=name))


def of_elf_machine(number: int) -> Platform | None:
    """The platform an ELF file's e_machine is for; None for one the table lacks."""
    return next((p for p in PLATFORMS if p.elf_machine == number), None)


def platform_name(release: str, platform: Platform) -> str:
    """The tag of one platform of a release: NAME-<architecture>."""
    return f"{release}-{platform.architecture}"
