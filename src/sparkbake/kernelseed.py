"""Kernel seeds: a published wheel's compiled extensions as a tag's kernel cache entry.

A tag with `kernels: {wheel: FILE, sha256: HEX}` takes its kernels from that wheel of the
package index (vLLM's own release wheel, say) instead of compiling them: the wheels stage is
then that wheel with the series' changes to its Python files, made on this host (no builder,
no compiler, no emulation for another platform). The seed stands for the pristine upstream's
compiled inputs only, so no patch of the tag may change those.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from .cache import atomic_dir
from .config import KernelSeed, Tag
from .errors import BuildError, ConfigError
from .hashing import file_sha256, record_hash
from .proc import echo, require_tool, run, step
from .settings import HostSettings
from .sources import download, index_url_of
from .wheels import REPORT, WheelSet, check_sass

__all__ = ["KERNELS_FILE", "build_wheels", "list_kernels", "overlay", "require_python_only",
           "seed"]

KERNELS_FILE = "kernels.json"
ZIP_EPOCH = 315532800  # 1980-01-01: the earliest time a zip entry stores
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


def overlay(seed_wheel: Path, pristine: Path, patched: Path, dest: Path,
            source_date: int) -> list[str]:
    """dest: the seed wheel with the series' changes to its packages (files the patched tree
    has other than the pristine one: changed, added, removed), entries dated source_date.
    Its compiled libraries stay the seed's, byte for byte. Returns the changed paths."""
    with zipfile.ZipFile(seed_wheel) as seed:
        infos = {i.filename: i for i in seed.infolist() if not i.filename.endswith("/")}
        record = next(name for name in infos if name.endswith(".dist-info/RECORD"))
        changed = _series_changes(pristine, patched, _packages(infos, record))
        files: dict[str, tuple[int, Callable[[], bytes]]] = {
            name: (info.external_attr >> 16 or 0o644, functools.partial(seed.read, info))
            for name, info in infos.items() if name != record}
        for name in changed:
            if (patched / name).is_file():
                files[name] = (0o644, (patched / name).read_bytes)
            else:
                files.pop(name, None)
        _write_wheel(dest, files, record, source_date)
    return changed


def _packages(names: Iterable[str], record: str) -> set[str]:
    """The wheel's top-level folders but its metadata: what the tree's changes may reach."""
    metadata = record.split("/", 1)[0]
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


def _write_wheel(dest: Path, files: dict[str, tuple[int, Callable[[], bytes]]], record: str,
                 source_date: int) -> None:
    """A wheel whose bytes depend only on files and source_date: sorted entries but the
    metadata last (as wheels write it), one time, RECORD made anew."""
    stamp = time.gmtime(max(source_date, ZIP_EPOCH))[:6]
    metadata = record.split("/", 1)[0] + "/"
    lines = []
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for name in sorted(files, key=lambda name: (name.startswith(metadata), name)):
            mode, read = files[name]
            data = read()
            out.writestr(_zip_info(name, stamp, mode), data)
            lines.append(f"{name},{record_hash(data)},{len(data)}")
        lines.append(f"{record},,")
        out.writestr(_zip_info(record, stamp, 0o644), "\n".join(lines) + "\n")


def _zip_info(name: str, stamp: tuple[int, ...], mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=stamp)  # type: ignore[arg-type]
    info.external_attr = (mode & 0o7777 | 0o100000) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


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
                 source_date: int) -> WheelSet:
    """The wheels stage of a seeded tag, on this host with no builder and no compiler: the
    seed wheel with the series' Python changes; its kernels checked for the tag's arch."""
    if (folder / REPORT).is_file():
        echo(f"wheels: {tag.name} cached at wheels/{folder.name[:12]}")
        return WheelSet(folder, folder.name, json.loads((folder / REPORT).read_text()))
    listing = json.loads((entry / KERNELS_FILE).read_text())
    with step(f"wheels for {tag.name}: {listing['wheel']} + the series (no compiler)"), \
            atomic_dir(folder) as out:
        wheel = out / listing["wheel"]
        changed = overlay(entry / listing["wheel"], pristine, patched, wheel, source_date)
        echo(f"wheels: {len(changed)} file(s) of the series in {wheel.name}")
        report = {"cuda_arch": tag.cuda_arch, "sm_arch": tag.sm_arch,
                  "nvcc": f"none: kernels from {listing['wheel']}",
                  "wheels": [{"file": wheel.name, "sha256": file_sha256(wheel),
                              "name": wheel.name.split("-", 1)[0],
                              "kernels": listing["kernels"]}],
                  "kernels": {"key": entry.name, "reused": True, "seed": listing["wheel"]},
                  "series files": changed}
        check_sass(tag, report)
        (out / REPORT).write_text(json.dumps(report, indent=2))
    return WheelSet(folder, folder.name, report)
