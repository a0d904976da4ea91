"""The runtime packages of /opt/venv in groups that move together, a layer each, so that a
runtime lock change that moves one group's package re-bakes and re-pushes that group alone.

GROUPS is the one table, bottom layer first. A distribution is in the first group one of
whose patterns (fnmatch) matches its canonical name; what none matches is in the rest. A
file is its distribution's by that distribution's RECORD (bytecode follows its source);
a file in no RECORD (the venv skeleton's links, pyvenv.cfg, the CUDA toolkit link) is the
rest's, and so is a distribution of a group that has no layer (no package of the lock is
in it). A folder is in the layer of every group with a file below it (`layers.from_paths`
adds the folders above a path), with the same metadata in each.

Each group's layer is keyed by its packages' lock lines (name, version, hashes) and the
wheel files of them in the wheelhouse, with what every group's key has (the base, the
skeleton, the platform, ...: venvlayers), so a lock change leaves the other groups' keys.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from packaging.utils import canonicalize_name

from sparkbake.bake import venvsplit
from sparkbake.hashing import data_hash

__all__ = ["GROUPS", "REST", "Group", "distributions", "group_of", "keys", "present",
           "split"]


@dataclass(frozen=True)
class Group:
    name: str  # of its layer record (`runtime-<name>`) and console line
    title: str  # in its layer's history line
    patterns: tuple[str, ...]  # canonical distribution names, fnmatch patterns


GROUPS: Final = (
    # torch pins these CUDA libraries exactly (its cuda-toolkit extras and nvidia-* pins):
    # they move with torch, as its ABI-bound companions do; about 3.3 GB of wheels
    Group("torch", "torch and CUDA", (
        "torch", "torchvision", "torchaudio", "torchcodec", "triton", "cuda-toolkit",
        "nvidia-cublas*", "nvidia-cuda-cupti*", "nvidia-cuda-nvrtc*", "nvidia-cuda-runtime*",
        "nvidia-cudnn-cu*", "nvidia-cufft*", "nvidia-cufile*", "nvidia-curand*",
        "nvidia-cusolver*", "nvidia-cusparse*", "nvidia-nccl-cu*", "nvidia-nvjitlink*",
        "nvidia-nvshmem-cu*", "nvidia-nvtx*")),
    # the kernels compiled on first use and what compiles them (the tag's pinned nvcc, crt,
    # nvvm, cuda-python): FlashInfer's releases move several of them at once; about 0.5 GB
    Group("jit", "JIT kernels and toolchain", (
        "flashinfer-*", "nvidia-cutlass-dsl*", "nvidia-cudnn-frontend", "b12x", "tilelang",
        "tokenspeed-*", "quack-kernels", "humming-kernels", "apache-tvm-ffi",
        "torch-c-dlpack-ext", "cuda-tile", "cuda-python", "cuda-bindings", "cuda-core",
        "cuda-pathfinder", "nvidia-cuda-nvcc*", "nvidia-cuda-crt*", "nvidia-nvvm*",
        "nvidia-cuda-cccl*", "ninja", "nccl4py", "nccl-extensions")),
    Group("rest", "the rest", ("*",)),
)
REST: Final = GROUPS[-1]


def group_of(name: str) -> Group:
    """The group of a distribution: the first whose pattern matches its canonical name."""
    canonical = str(canonicalize_name(name))
    return next(group for group in GROUPS
                if any(fnmatch.fnmatchcase(canonical, p) for p in group.patterns))


def present(names: Iterable[str]) -> tuple[Group, ...]:
    """The groups with a layer: those a distribution of names is in, and the rest always
    (it holds the skeleton), in the table's order."""
    found = {group_of(name) for name in names} | {REST}
    return tuple(group for group in GROUPS if group in found)


def keys(common: Mapping[str, Any], pinned: Mapping[str, list[str]]) -> dict[str, str]:
    """Each present group's layer key: common (what every group's layer is made with), the
    table, and what pinned (canonical name -> its lock line and wheel files) says of the
    group's own packages."""
    table = [[group.name, *group.patterns] for group in GROUPS]
    return {group.name: data_hash({**common, "table": table, "packages": sorted(
        [name, *lines] for name, lines in pinned.items() if group_of(name) is group)})
        for group in present(pinned)}


def split(root: Path, python: str, runtime: Iterable[str],
          groups: tuple[Group, ...]) -> dict[str, tuple[str, ...]]:
    """The runtime part's paths (venvsplit.Split.runtime) by group name: files by the
    RECORD that lists them, folders with no file below them the rest's."""
    owners = venvsplit.recorded_files(root, python)
    parts: dict[str, list[str]] = {group.name: [] for group in groups}
    folders = []
    for name in runtime:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            folders.append(name)
        else:
            parts[_layer_of(owners.get(name, frozenset()), groups).name].append(name)
    above = {name.rsplit("/", depth)[0] for files in parts.values() for name in files
             for depth in range(1, name.count("/") + 1)}
    parts[REST.name] += [name for name in folders if name not in above]
    return {name: tuple(sorted(paths)) for name, paths in parts.items()}


def distributions(root: Path, python: str, groups: tuple[Group, ...],
                  upstream: Iterable[str]) -> dict[str, list[str]]:
    """The installed distributions (`name==version`) of each group's layer, by group name,
    the upstream's left out (their own layers): what a group's layer holds, recorded with it
    and checked when another group's layer misses."""
    held: dict[str, list[str]] = {group.name: [] for group in groups}
    leave = {str(canonicalize_name(name)) for name in upstream}
    for name, version in venvsplit.installed(root, python).items():
        if name not in leave:
            held[_layer_of(frozenset({name}), groups).name].append(f"{name}=={version}")
    return {name: sorted(found) for name, found in held.items()}


def _layer_of(owners: frozenset[str], groups: tuple[Group, ...]) -> Group:
    """The layer of a file its owners' RECORDs list: the first of their groups in the
    table (two distributions may list one file); the rest's when it has none."""
    wanted = {group_of(owner) for owner in owners}
    return next((group for group in groups if group in wanted), REST)
