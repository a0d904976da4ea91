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
from collections.abc import Iterable
from pathlib import Path

from . import wheelfile, wheelversion
from .cache import atomic_dir
from .config import KernelSeed, Tag
from .errors import BuildError, ConfigError
from .hashing import file_sha256
from .proc import echo, require_tool, run, step
from .settings import HostSettings
from .sources import download, index_url_of
from .wheels import REPORT, WheelSet, check_sass

__all__ = ["KERNELS_FILE", "build_wheels", "list_kernels", "overlay", "require_python_only",
           "seed"]

KERNELS_FILE = "kernels.json"
LIBRARY = re.compile(r"\.so(\.\d+)*$")
CUBIN = re.compile(r"\.(sm_\d+[af]?)\.cubin")


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
             "kernels": list_kernels(tmp / kernels.wheel)}, indent=2))
    echo(f"kernels: seeded {entry.name[:12]} from {kernels.wheel}")


def overlay(seed_wheel: Path, pristine: Path, patched: Path, folder: Path, source_date: int,
            local: str = "") -> tuple[Path, list[str]]:
    """The seed wheel with the series' changes to its packages (files the patched tree has
    other than the pristine one: changed, added, removed), entries dated source_date and the
    local version in its name and metadata (wheelversion), written into folder. Its compiled
    libraries stay the seed's, byte for byte. Returns the wheel and the changed paths."""
    with zipfile.ZipFile(seed_wheel) as seed:
        files = wheelfile.read(seed)
        changed = _series_changes(pristine, patched, _packages(files, wheelfile.dist_info(files)))
        for name in changed:
            if (patched / name).is_file():
                files[name] = (0o644, (patched / name).read_bytes)
            else:
                files.pop(name, None)
        dest = folder / wheelversion.stamped_file_name(seed_wheel.name, local)
        wheelfile.write(dest, wheelversion.stamp_entries(files, local), source_date)
    return dest, changed


def _packages(names: Iterable[str], metadata: str) -> set[str]:
    """The wheel's top-level folders but its metadata: what the tree's changes may reach."""
    return {name.split("/", 1)[0] for name in names if "/" in name
            and not name.startswith((metadata, metadata.replace(".dist-info", ".data")))}


def _series_changes(pristine: Path, patched: Path, packages: set[str]) -> list[str]:
    changed = []
    for package in sorted(packages):
        before = _files(pristine / package, pristine)
        after = _files(patched / package, patched)
        changed += [name for name in sorted(before | after)
                    if name not in before or name not in after
                    or (pristine / name).read_bytes() != (patched / name).read_bytes()]
    return [name for name in changed if "__pycache__" not in name]


def _files(folder: Path, root: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    return {p.relative_to(root).as_posix() for p in folder.rglob("*") if p.is_file()}


def list_kernels(wheel: Path) -> list[dict[str, object]]:
    """The wheel's shared libraries with device code: path, sha256 and SASS arches, read by
    this host's cuobjdump (it reads ELF files of any machine)."""
    cuobjdump = _cuobjdump()
    kernels: list[dict[str, object]] = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as scratch:
        for member in sorted(archive.namelist()):
            if not LIBRARY.search(member):
                continue
            library = Path(archive.extract(member, scratch))
            listing = run([cuobjdump, "--list-elf", library], error=BuildError,
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


def build_wheels(tag: Tag, entry: Path, pristine: Path, patched: Path, folder: Path,
                 source_date: int, local: str = "") -> WheelSet:
    """The wheels stage of a seeded tag, on this host with no builder and no compiler: the
    seed wheel with the series' Python changes and the local version (wheelversion); its
    kernels checked for the tag's arch."""
    if (folder / REPORT).is_file():
        echo(f"wheels: {tag.name} cached at wheels/{folder.name[:12]}")
        return WheelSet(folder, folder.name, json.loads((folder / REPORT).read_text()))
    listing = json.loads((entry / KERNELS_FILE).read_text())
    with step(f"wheels for {tag.name}: {listing['wheel']} + the series (no compiler)"), \
            atomic_dir(folder) as out:
        wheel, changed = overlay(entry / listing["wheel"], pristine, patched, out, source_date,
                                 local)
        echo(f"wheels: {len(changed)} file(s) of the series in {wheel.name}")
        report = {"cuda_arch": tag.cuda_arch, "sm_arch": tag.sm_arch,
                  "nvcc": f"none: kernels from {listing['wheel']}",
                  "wheels": [{"file": wheel.name, "sha256": file_sha256(wheel),
                              "name": wheel.name.split("-", 1)[0],
                              "kernels": listing["kernels"]}],
                  "kernels": {"key": entry.name, "reused": True, "seed": listing["wheel"]},
                  "series files": changed, "local_version": local}
        check_sass(tag, report)
        (out / REPORT).write_text(json.dumps(report, indent=2))
    return WheelSet(folder, folder.name, report)
