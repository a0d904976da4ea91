"""Kernel seeds: a published wheel's compiled extensions as a tag's kernel cache entry.

A tag with `kernels: {wheel: FILE, sha256: HEX}` takes its kernels from that wheel of the
package index (vLLM's own release wheel, say) instead of compiling them: the wheels stage is
then that wheel with the series' changes to its Python files, made on this host (no builder,
no compiler, no emulation for another platform). The seed stands for the pristine upstream's
compiled inputs only, so no patch of the tag may change those.
"""

from __future__ import annotations

import importlib.util
import json
import re
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from sparkbake import records, trust
from sparkbake.config.settings import Settings
from sparkbake.config.versions import KernelSeed, Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import require_tool, run, step
from sparkbake.errors import BuildError, ConfigError
from sparkbake.fetch.upstream_tree import download, index_url_of
from sparkbake.files import atomic_dir, read_json
from sparkbake.hashing import file_sha256
from sparkbake.wheelfile.contents import spelled_name
from sparkbake.wheels import container_build, entrycheck
from sparkbake.wheels.container_build import WheelSet, check_sass
from sparkbake.wheels.overlay import overlay
from sparkbake.wheels.report import Kernel, KernelsUsed, Wheel, WheelsReport, write_report

__all__ = ["KERNELS_FILE", "assembles", "build_wheels", "list_kernels", "overlay",
           "require_python_only", "seed"]

KERNELS_FILE = "kernels.json"
LIBRARY = re.compile(r"\.so(\.\d+)*$")
CUBIN = re.compile(r"\.(sm_\d+[af]?)\.cubin")


def require_python_only(tag: Tag, kernel_patches: Sequence[str]) -> None:
    """A seed holds the upstream's kernels: refuse patches that change compiled inputs."""
    if tag.kernels and kernel_patches:
        raise ConfigError(
            f"tag {tag.name} takes its kernels from {tag.kernels.wheel}, but these patches "
            f"change compiled inputs: {', '.join(kernel_patches)}",
            "drop `kernels:` from the tag to compile them, or keep those patches out of it")


def seed(kernels: KernelSeed, entry: Path, settings: Settings, *, console: Console) -> None:
    """Make the kernel cache entry from the seed wheel unless it is there."""
    if (entry / KERNELS_FILE).is_file():
        return
    url = index_url_of(kernels.project, {kernels.wheel}, settings)
    if url is None:
        raise ConfigError(f"kernels: no {kernels.wheel} on the package index",
                          "check the wheel's file name in versions.yaml")
    with atomic_dir(entry) as tmp:
        download(url, tmp / kernels.wheel, kernels.sha256, settings, console, "kernels")
        (tmp / KERNELS_FILE).write_text(json.dumps(
            {"wheel": kernels.wheel, "sha256": kernels.sha256, "seeded": True,
             "kernels": list_kernels(tmp / kernels.wheel, console=console)}, indent=2))
    console.detail(f"kernels: seeded {entry.name[:12]} from {kernels.wheel}")


def list_kernels(wheel: Path, *, console: Console) -> list[dict[str, object]]:
    """The wheel's shared libraries with device code: path, sha256 and SASS arches, read by
    this host's cuobjdump (it reads ELF files of any machine)."""
    cuobjdump = _cuobjdump()
    kernels: list[dict[str, object]] = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as scratch:
        for member in sorted(archive.namelist()):
            if not LIBRARY.search(member):
                continue
            library = Path(archive.extract(member, scratch))
            listing = run(console, [cuobjdump, "--list-elf", library], error=BuildError,
                          what=f"cuobjdump of {member}", capture=True, check=False)
            if listing.returncode != 0:
                if "does not contain device code" in listing.stdout + listing.stderr:
                    continue
                raise BuildError(f"cuobjdump cannot read {member} of {wheel.name}: "
                                 f"{listing.stderr.strip()[:200]}", "check the seed wheel")
            kernels.append({"path": member, "sha256": file_sha256(library),
                            "sass": sorted(set(CUBIN.findall(listing.stdout)))})
            library.unlink()
    return kernels


def _cuobjdump() -> str:
    """cuobjdump of the nvidia-cuda-cuobjdump package beside sparkbake, else from PATH."""
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for found in sorted(Path(folder).glob("cu*/bin/cuobjdump")):
            return str(found)
    return require_tool("cuobjdump", "nvidia-cuda-toolkit (or pip install nvidia-cuda-cuobjdump)")


def assembles(entry: Path) -> bool:
    """Is the kernel cache entry a wheel of the pristine tree (a seed, or a build's pristine
    copy), from which this host can assemble any series' wheel?"""
    listing = entry / KERNELS_FILE
    if not listing.is_file():
        return False
    described = read_json(listing)
    return bool(described.get("seeded") or described.get("pristine"))


def build_wheels(tag: Tag, entry: Path, pristine: Path, patched: Path, folder: Path,
                 source_date: int, local: str = "", *, console: Console) -> WheelSet:
    """The wheels stage on this host with no builder and no compiler: the kernel cache's
    wheel (a seed, or the pristine copy of an earlier build) with the series' Python changes
    and the local version (stamping); its kernels checked for the tag's arch from the
    cache's listing (their bytes are the cached ones)."""
    if container_build.is_built(folder):
        return container_build.cached(tag, folder, console=console)
    listing = read_json(entry / KERNELS_FILE)
    cached_wheel = str(listing["wheel"])
    seeded = bool(listing.get("seeded"))
    with step(console, f"wheels for {tag.name}: {cached_wheel} + the series (no compiler)"), \
            atomic_dir(folder) as out:
        made = overlay(entry / cached_wheel, pristine, patched, out, source_date, local,
                       tag.upstream.overrides)
        wheel = made.wheel
        console.detail(f"wheels: {len(made.changed)} file(s) of the series in {wheel.name}")
        kernels = tuple(records.from_json(Kernel, kernel) for kernel in listing["kernels"])
        report = WheelsReport(
            cuda_arch=tag.cuda_arch, sm_arch=tag.sm_arch,
            nvcc=f"none: kernels from {cached_wheel}",
            wheels=(Wheel(wheel.name, made.sha256, spelled_name(wheel.name), kernels),),
            local_version=local,
            kernels=KernelsUsed(entry.name, reused=True, seed=cached_wheel if seeded else "",
                                assembled_from="" if seeded else cached_wheel),
            series_files=tuple(made.changed))
        check_sass(tag, report, console=console)
        # its sha256 was taken as it was written: the entry's check need not read it again
        trust.remember(wheel, out / entrycheck.STAMPS / wheel.name)
        write_report(out, report)
    return WheelSet(folder, folder.name, report)
