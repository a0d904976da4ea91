"""The runtime packages of /opt/venv in groups that move together, a layer each, so that a
runtime lock change that moves one group's package re-bakes and re-pushes that group alone.

GROUPS is the one table, bottom layer first. A distribution is in the first group one of
whose patterns (fnmatch) matches its canonical name; what none matches is in the rest. A
file is its distribution's by that distribution's RECORD (bytecode follows its source);
a file in no RECORD (the venv skeleton's links, pyvenv.cfg, the CUDA toolkit link) is the
rest's, and so is a distribution of a group that has no layer (no package of the lock is
in it). A folder is in the layer of every group with a file below it (`layers.from_paths`
adds the folders above a path), with the same metadata in each.

The layers are kept together under the runtime key (the whole lock) and each by its content
when the venv is installed (venvlayers), so a lock change writes again only the groups whose
files it changed.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from packaging.utils import canonicalize_name

from sparkbake.bake import venvsplit

__all__ = ["GROUPS", "REST", "Group", "group_of", "present", "split"]


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


def _layer_of(owners: frozenset[str], groups: tuple[Group, ...]) -> Group:
    """The layer of a file its owners' RECORDs list: the first of their groups in the
    table (two distributions may list one file); the rest's when it has none."""
    wanted = {group_of(owner) for owner in owners}
    return next((group for group in groups if group in wanted), REST)
