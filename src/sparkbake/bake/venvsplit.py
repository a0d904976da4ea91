"""/opt/venv split by file into layers by rate of change, from the installed packages' RECORDs.

The upstream's distributions (the tag's built wheels) own the files their RECORDs list, and
the bytecode of those files; of these, the compiled libraries (ELF files) change only with
the kernel key, the rest (Python, dist-info, scripts) with the patched tree. Everything
else under the root (the venv skeleton, the runtime lock's packages, the CUDA toolkit link)
is the runtime packages' part. A folder holding only the upstream's files is not the
runtime part's, so that part is the same whatever the upstream holds. Pure file work.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from sparkbake.bake import distributions
from sparkbake.bake.elfcheck import machine_of
from sparkbake.bake.venv import DATA_DIRS, VENV, site_packages

__all__ = ["Split", "recorded_files", "split", "upstream_files"]


@dataclass(frozen=True)
class Split:
    """Paths relative to the root (the image's `/`), each in exactly one part."""

    runtime: tuple[str, ...]  # the skeleton, the runtime lock's packages, their folders
    kernels: tuple[str, ...]  # the upstream's compiled libraries
    python: tuple[str, ...]  # the rest of the upstream's files


def split(root: Path, python: str, upstream: Iterable[str]) -> Split:
    """The files under root by part; upstream: the distribution names of the tag's wheels."""
    owned = upstream_files(root, python, {str(canonicalize_name(n)) for n in upstream})
    kernels = sorted(name for name in owned if _is_elf(root / name))
    python_files = sorted(owned.difference(kernels))
    return Split(tuple(_runtime_part(root, owned)), tuple(kernels), tuple(python_files))


def upstream_files(root: Path, python: str, names: set[str]) -> set[str]:
    """The files under root that the RECORDs of the named distributions list, with the
    bytecode of those that are sources (compiled after pip, so in no RECORD)."""
    owned = recorded_files(root, python)
    return {path for path, owners in owned.items() if owners & names}


def recorded_files(root: Path, python: str) -> dict[str, frozenset[str]]:
    """Each file under root that a RECORD lists, and bytecode of a listed source, with the
    canonical names of the distributions that list it (or its source)."""
    venv = root / VENV.lstrip("/")
    packages = site_packages(venv, python)
    owners: dict[str, set[str]] = {}
    for dist in distributions.installed(packages):
        for listed in _record_paths((f.path for f in dist.files), packages, venv, root):
            owners.setdefault(listed, set()).add(dist.name)
    found = {path: frozenset(names) for path, names in owners.items()
             if (root / path).is_file() or (root / path).is_symlink()}
    for pyc in _bytecode(packages, root):
        source = found.get(_source_of(pyc))
        if source is not None:
            found[pyc] = source
    return found


def _record_paths(listed: Iterable[str], packages: Path, venv: Path, root: Path) -> list[str]:
    """A RECORD's paths, relative to root: site-packages' files, and the scripts and data
    pip --target wrote beside them that the bake moved into the venv (`bin/`, `share/`)."""
    found = []
    for path in listed:
        where = venv / path if PurePosixPath(path).parts[0] in DATA_DIRS else packages / path
        relative = os.path.relpath(where, root)
        if not relative.startswith(".."):  # a path out of the image's root is none of ours
            found.append(Path(relative).as_posix())
    return found


def _bytecode(packages: Path, root: Path) -> list[str]:
    return [path.relative_to(root).as_posix() for path in packages.rglob("__pycache__/*.pyc")]


def _source_of(pyc: str) -> str:
    """`a/__pycache__/b.cpython-311.pyc` -> `a/b.py` (the interpreter tag has no dot)."""
    folder, _, name = pyc.rpartition("/__pycache__/")
    stem = name.removesuffix(".pyc").rsplit(".", 1)[0]
    return f"{folder}/{stem}.py"


def _is_elf(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with path.open("rb") as handle:
        return machine_of(handle.read(20)) is not None


def _runtime_part(root: Path, owned: set[str]) -> list[str]:
    """Every path under root but the upstream's files and the folders that hold only them
    (an empty folder is the runtime part's: no wheel makes one)."""
    every = sorted(path.relative_to(root).as_posix() for path in root.rglob("*"))
    kept = [name for name in every if name not in owned and not _is_folder(root / name)]
    folders = {"/".join(parts[:depth]) for parts in (name.split("/") for name in kept)
               for depth in range(1, len(parts))}
    empty = {name for name in every if _is_folder(root / name) and not any(
        (root / name).iterdir())}
    return sorted({*kept, *folders, *empty})


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()
