"""/opt/venv as layers by rate of change, each kept by its key (layercache).

- runtime packages: the venv skeleton, the runtime lock's packages, the CUDA toolkit link,
  in a layer per group of packages that move together (venvgroups: torch and CUDA, the JIT
  kernels and toolchain, the rest with the skeleton and the link). Together they are kept
  under the runtime key: what installs them (the base, the skeleton, the whole lock, the
  asked names, the upstream's requirements, the platform, the source date, the host's pip
  and Python, the group table, the formats). When it is cached, pip installs only the
  tag's wheels, without their dependencies: the 10 GB of a vLLM image are neither
  installed, tarred nor compressed again. When it is not, everything is installed and each
  group's layer is kept by its content (layercache.content_key), so a lock change that
  moves one group's package writes and pushes that group's layer alone, and a group whose
  files another group's change touched (a dependency it now pulls in, a shared file, the
  CUDA link) is written as its content says, never taken by name.
- the upstream's compiled libraries, and the rest of its files (Python, bytecode,
  dist-info, scripts): each keyed by its content, so a patch that changes only Python
  leaves the libraries' blob as it was. The libraries' layer is also kept under the
  wheels' ELF members (wheelkernels): when it is cached so and pip installs the tag's
  wheels alone, pip gets them without those members (two thirds of a vLLM wheel's bytes).

A bake from the cache gives the bytes a clean one gives: the split (venvsplit) makes the
runtime part independent of the upstream's files, a group's files are those its packages'
RECORDs list, and pip lays out a wheel's files the same way with or without its
dependencies beside it.
"""

from __future__ import annotations

import functools
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename

from sparkbake import resources
from sparkbake.attest import imagefiles
from sparkbake.bake import venv, venvgroups, venvsplit, wheelkernels
from sparkbake.bake.layercache import FORMAT, LayerCache, content_key
from sparkbake.bases import BaseImage
from sparkbake.config.platforms import Platform
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.errors import BakeError
from sparkbake.hashing import data_hash
from sparkbake.lock import pins
from sparkbake.oci import image_layout, layers
from sparkbake.oci.docker_engine import Client
from sparkbake.wheelfile.contents import spelled_name

__all__ = ["FORMAT_VENV", "VenvLayers", "VenvPackages", "make_layers", "runtime_key"]

# raise when venv.py, venvsplit.py or venvgroups.py put other files into a part (4: the
# host's pip configuration no longer reaches the install)
FORMAT_VENV = 4


@dataclass(frozen=True)
class VenvPackages:
    """What the bake installs into /opt/venv: the tag's wheels, and the runtime lock's with
    what the tag asks for by name."""

    image: str  # the image's ref, for messages
    platform: Platform
    wheels: Path  # the tag's built wheels
    names: tuple[str, ...]  # their distributions
    house: Path | None  # the runtime lock's wheelhouse
    lock: Path | None  # the runtime lock
    asked: tuple[str, ...]  # what the tag asks for by name
    kernel_key: str  # what the compiled libraries were built from
    tree_hash: str  # the patched tree the rest comes from


@dataclass(frozen=True)
class VenvLayers:
    added: tuple[tuple[layers.Layer, str], ...]  # (layer, what made it), bottom first
    cuda_home: str | None  # CUDA_HOME when the venv has nvcc
    cached: tuple[str, ...]  # the parts taken from the cache


def runtime_key(client: Client, runtime: BaseImage, packages: VenvPackages, source_date: int,
                pinned: dict[str, list[str]]) -> str:
    """What the runtime packages' layers are made of together, without installing anything
    (pinned: the lock's packages, _pinned): every group's layer is taken from the cache
    under it only with all the others."""
    from importlib.metadata import version  # here: it imports the email package, slow

    return data_hash({
        "format": [FORMAT_VENV, FORMAT, image_layout.FORMAT, layers.COMPRESSION],
        "base": str(client.images.get(runtime.ref).id),
        "skeleton": resources.digest(venv.SKELETON), "platform": str(packages.platform),
        "source_date": source_date, "asked": sorted(packages.asked),
        "requires": _requires(packages.wheels), "lock": pinned,
        "table": [[group.name, *group.patterns] for group in venvgroups.GROUPS],
        # pip lays out the files; this host's Python compiles the bytecode
        "host": [version("pip"), list(sys.version_info[:2])],
    })


def make_layers(client: Client, runtime: BaseImage, packages: VenvPackages, cache: LayerCache,
                work: Path, source_date: int, log: Path, workers: int,
                bytecode_cache: Path | None = None, *, console: Console) -> VenvLayers:
    """The layers of /opt/venv, from the cache where their keys are there (workers: the
    threads that compress a layer written; bytecode_cache: the host's .pyc files kept by
    source, None for none)."""
    pinned = _pinned(packages)
    key = runtime_key(client, runtime, packages, source_date, pinned)
    groups = venvgroups.present(pinned)
    found = [cache.get(_part(group.name), key) for group in groups]
    recorded = None if None in found else [hit for hit in found if hit]
    # every group under this key: the rest's record (the last) says Python and CUDA_HOME
    python = recorded[-1][1]["python"] if recorded else None
    kernels = wheelkernels.find(packages.wheels, packages.names)
    kept = _kernels_by_members(cache, kernels, python, packages, source_date)
    wheels = packages.wheels
    if kept is not None and kernels is not None:
        console.detail("bake: the compiled libraries' layer is cached for these wheels: pip "
                       "installs "
             f"them without their {len(kernels.members)} ELF files")
        wheels = wheelkernels.trimmed(kernels, wheels, work / "wheels-without-kernels")
    installed = _install(client, runtime, packages, wheels, python, work, source_date, log,
                         bytecode_cache, console=console)
    with step(console, f"{venv.VENV}: split into layers"):
        parts = venvsplit.split(installed.root, installed.python, packages.names)
    if recorded:
        about = recorded[-1][1]
        made = [_Made(_part(group.name), hit[0], True, _runtime_what(packages, group))
                for group, hit in zip(groups, recorded, strict=True)]
    else:
        about = {"python": installed.python, "cuda_home": installed.cuda_home}
        made = _runtime_layers(installed, parts.runtime, packages, cache, key, groups, about,
                               work, source_date, workers, console=console)
    made += [_kernels_layer(installed, parts.kernels, packages, cache, kernels, kept, work,
                            source_date, workers),
             _upstream_layer("python", installed, parts.python, packages, cache, work,
                             source_date, workers)]
    for one in made:
        console.detail(f"bake: {venv.VENV} layer {one.part}: "
                       f"{'cached' if one.cached else 'written'} "
             f"{one.layer.digest[:19]} ({one.layer.size} bytes)")
    return VenvLayers(tuple((one.layer, one.what) for one in made), about["cuda_home"],
                      tuple(one.part for one in made if one.cached))


@dataclass(frozen=True)
class _Made:
    part: str
    layer: layers.Layer
    cached: bool
    what: str  # the history line


def _kernels_layer(installed: venv.Installed, paths: tuple[str, ...], packages: VenvPackages,
                   cache: LayerCache, kernels: wheelkernels.Kernels | None,
                   kept: layers.Layer | None, work: Path, source_date: int,
                   workers: int) -> _Made:
    """The compiled libraries' layer: kept, the one cached for the wheels' ELF members (pip
    left them out), else by its content; kept under the members' key too when its files are
    exactly theirs."""
    if kept is not None:
        if paths:  # find() saw every ELF member: pip cannot have installed one
            raise BakeError(f"/{paths[0]}: pip installed an ELF file the scan of the wheels "
                            "missed", "remove build/layers (the layer cache) and bake again")
        return _Made("kernels", kept, True, _upstream_what(packages, "kernels"))
    made = _upstream_layer("kernels", installed, paths, packages, cache, work, source_date,
                           workers)
    if kernels is None:
        return made
    members_key = _members_key(kernels, installed.python, packages, source_date)
    site = venv.site_packages(installed.root / venv.VENV.lstrip("/"), installed.python)
    # checked once per key: the check hashes every library again
    if cache.get(wheelkernels.PART, members_key) is None and wheelkernels.installed_exactly(
            kernels, site, paths, installed.root):
        cache.put(wheelkernels.PART, members_key, made.layer)
    return made


def _upstream_layer(part: str, installed: venv.Installed, paths: tuple[str, ...],
                    packages: VenvPackages, cache: LayerCache, work: Path, source_date: int,
                    workers: int) -> _Made:
    """The layer of the upstream's files in part, by their content."""
    what = _upstream_what(packages, part)
    content = content_key(installed.root, paths, source_date)
    layer, was_cached = cache.layer(part, content, functools.partial(
        _written, cache.layout, what, installed.root, paths, work / f"{part}.tar.gz",
        source_date, workers))
    return _Made(part, layer, was_cached, what)


def _runtime_layers(installed: venv.Installed, runtime: tuple[str, ...], packages: VenvPackages,
                    cache: LayerCache, key: str, groups: tuple[venvgroups.Group, ...],
                    about: dict[str, Any], work: Path, source_date: int,
                    workers: int, *, console: Console) -> list[_Made]:
    """A layer per runtime group, bottom first, from the venv just installed: each kept by
    its content (a group whose files are as before keeps its blob, neither compressed nor
    pushed again), and recorded under the runtime key for the next bake of this lock."""
    with step(console, f"{venv.VENV}: runtime packages by group"):
        paths = venvgroups.split(installed.root, installed.python, runtime, groups)
    made = []
    for group in groups:
        part, what = _part(group.name), _runtime_what(packages, group)
        content = content_key(installed.root, paths[group.name], source_date)
        layer, was_cached = cache.layer(part, content, functools.partial(
            _written, cache.layout, what, installed.root, paths[group.name],
            work / f"{part}.tar.gz", source_date, workers))
        cache.put(part, key, layer, about)
        made.append(_Made(part, layer, was_cached, what))
    return made


def _written(layout: image_layout.Layout, what: str, root: Path, paths: tuple[str, ...],
             dest: Path, source_date: int, workers: int) -> layers.Layer:
    """A layer written and compressed, as a timed step (the bake's longest); what the SBOM
    reads of it is taken from the files it was written from, not read back from its blob."""
    with step(layout.console, f"layer {what}"):
        layer = layers.from_paths(root, paths, dest, source_date, workers=workers)
    imagefiles.remember(layout, layer.digest, root, paths)
    return layer


def _part(group: str) -> str:
    """A runtime group's name as a layer part: its cache records' and console lines'."""
    return f"runtime-{group}"


def _kernels_by_members(cache: LayerCache, kernels: wheelkernels.Kernels | None,
                        python: str | None, packages: VenvPackages,
                        source_date: int) -> layers.Layer | None:
    """The kernels layer kept under the wheels' ELF members, for a bake that installs the
    tag's wheels alone (python: the image's, from the cached runtime record; else None)."""
    if kernels is None or python is None or not kernels.members:
        return None
    found = cache.get(wheelkernels.PART, _members_key(kernels, python, packages, source_date))
    return None if found is None else found[0]


def _members_key(kernels: wheelkernels.Kernels, python: str, packages: VenvPackages,
                 source_date: int) -> str:
    return wheelkernels.key(kernels, python, packages.platform, source_date,
                            [FORMAT_VENV, FORMAT, image_layout.FORMAT, layers.COMPRESSION])


def _install(client: Client, runtime: BaseImage, packages: VenvPackages, wheels: Path,
             cached_python: str | None, work: Path, source_date: int,
             log: Path, bytecode_cache: Path | None, *, console: Console) -> venv.Installed:
    """Everything into the venv; or, when every runtime group's layer is cached (the rest's record
    says the image's Python), the tag's wheels alone (from wheels: packages.wheels, or their
    copies without the compiled libraries)."""
    names = list(packages.names)
    if cached_python is not None:
        console.detail(f"bake: runtime packages cached (every group): installing {' '.join(names)} "
             "alone")
        return venv.install_only(packages.image, packages.platform, cached_python,
                                 [wheels], names, work, source_date, log, bytecode_cache,
                                 console=console)
    dirs = [wheels] if packages.house is None else [wheels, packages.house]
    return venv.install(client, runtime.ref, packages.image, packages.platform, dirs, names,
                        work, source_date, log, packages.asked, bytecode_cache, console=console)


def _runtime_what(packages: VenvPackages, group: venvgroups.Group) -> str:
    lock = f"runtime lock {packages.house.name}" if packages.house else "no runtime lock"
    return f"sparkbake: {venv.VENV}: runtime packages: {group.title} ({lock})"


def _upstream_what(packages: VenvPackages, part: str) -> str:
    names = " ".join(packages.names)
    if part == "kernels":
        return (f"sparkbake: {venv.VENV}: {names} compiled libraries "
                f"(kernel key {packages.kernel_key[:12]})")
    return f"sparkbake: {venv.VENV}: {names} Python (patched tree {packages.tree_hash[:12]})"


def _pinned(packages: VenvPackages) -> dict[str, list[str]]:
    """The runtime lock's packages by canonical name: each one's lock line and the names of
    its wheels in the wheelhouse (their hashes were checked against the lock at download)."""
    if packages.lock is None or packages.house is None:
        return {}
    pinned = {name: [line] for name, line in pins.packages(packages.lock).items()}
    for wheel in sorted(packages.house.glob("*.whl")):
        name = str(parse_wheel_filename(wheel.name)[0])
        pinned.setdefault(name, []).append(wheel.name)
    return pinned


def _requires(folder: Path) -> list[str]:
    """The Requires-Dist lines of the tag's wheels: which of the lock's packages pip takes."""
    found: list[str] = []
    for wheel in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            meta = next((n for n in archive.namelist()
                         if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
            if meta is None:
                continue
            parsed = Parser().parsestr(archive.read(meta).decode("utf-8"))
            found += [f"{spelled_name(wheel.name)}: {line}"
                      for line in parsed.get_all("Requires-Dist") or []]
    return sorted(found)
