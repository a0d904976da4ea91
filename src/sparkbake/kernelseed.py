"""Kernel seeds: a published wheel's compiled extensions as a tag's kernel cache entry.

A tag with `kernels: {wheel: FILE, sha256: HEX}` takes its kernels from that wheel of the
package index (vLLM's own release wheel, say) instead of compiling them: the wheels stage then
builds the patched Python around it, as for any cached kernel key. The seed stands for the
pristine upstream's compiled inputs only, so no patch of the tag may change those.
"""

from __future__ import annotations

import json
from pathlib import Path

from .cache import atomic_dir
from .config import KernelSeed, Tag
from .errors import ConfigError
from .proc import echo
from .settings import HostSettings
from .sources import download, index_url_of

__all__ = ["KERNELS_FILE", "require_python_only", "seed"]

KERNELS_FILE = "kernels.json"


def require_python_only(tag: Tag, kernel_patches: list[str]) -> None:
    """A seed holds the upstream's kernels: refuse patches that change compiled inputs."""
    if tag.kernels and kernel_patches:
        raise ConfigError(
            f"tag {tag.name} takes its kernels from {tag.kernels.wheel}, but these patches "
            f"change compiled inputs: {', '.join(kernel_patches)}",
            "drop `kernels:` from the tag to compile them, or keep those patches out of it")


def seed(kernels: KernelSeed, entry: Path, settings: HostSettings) -> None:
    """Make the kernel cache entry from the seed wheel unless it is there."""
    if (entry / KERNELS_FILE).is_file():
        return
    url = index_url_of(kernels.project, {kernels.wheel}, settings)
    if url is None:
        raise ConfigError(f"kernels: no {kernels.wheel} on the package index",
                          "check the wheel's file name in versions.yaml")
    with atomic_dir(entry) as tmp:
        download(url, tmp / kernels.wheel, kernels.sha256, settings, "kernels")
        (tmp / KERNELS_FILE).write_text(json.dumps(
            {"wheel": kernels.wheel, "sha256": kernels.sha256, "seeded": True,
             "kernels": None}, indent=2))
    echo(f"kernels: seeded {entry.name[:12]} from {kernels.wheel}")
