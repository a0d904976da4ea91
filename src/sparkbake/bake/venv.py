"""/opt/venv: the venv made by the runtime base's own Python, the wheels installed into it
by this host's pip (`venvlayers` splits it into layers).

Only `python3 -m venv` runs in a container of the runtime base (emulated where the image is
another platform's: seconds). Resolving and unpacking the wheels, compiling their bytecode
and writing the layers is file work, done natively with pip's `--target` for the image's
platform and Python, so an arm64 bake costs about what an amd64 one does.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sparkbake import resources
from sparkbake.bake import bytecode, distributions, elfcheck
from sparkbake.config.platforms import Platform
from sparkbake.console.display import Console
from sparkbake.console.tools import run, step
from sparkbake.errors import BakeError
from sparkbake.hashing import record_hash
from sparkbake.lock.wheelhouse import platform_tags
from sparkbake.oci.docker_engine import Client, run_container

__all__ = ["CUDA_HOME", "DATA_DIRS", "INTERPRETER", "SKELETON", "VENV", "Installed", "install",
           "install_only", "site_packages"]

VENV = "/opt/venv"
INTERPRETER = f"{VENV}/bin/python3"
SKELETON = "make_venv.sh"
PYTHON_MARK = "sparkbake-python "  # the skeleton script's line giving its Python version
HOST_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # whose markers pip reads
DATA_DIRS = ("bin", "include", "share", "etc")  # pip --target's non-package top folders
# the CUDA toolkit of NVIDIA's wheels (nvcc, ptxas, headers) as one stable path: the JIT of
# FlashInfer, Triton and CuTe DSL finds it through CUDA_HOME
CUDA_HOME = f"{VENV}/cuda"
TOOLKIT = "nvidia/cu13"  # where those wheels put it in site-packages


@dataclass(frozen=True)
class Installed:
    """A venv tree under root (root is the image's `/`), for the image's Python (`3.11`)."""

    root: Path
    python: str
    cuda_home: str | None  # CUDA_HOME when the venv has nvcc


def site_packages(venv: Path, python: str) -> Path:
    return venv / "lib" / f"python{python}" / "site-packages"


def install(client: Client, runtime_ref: str, image: str, platform: Platform,
            wheel_dirs: list[Path], names: list[str], work: Path, source_date: int,
            log: Path, asked: tuple[str, ...] = (),
            bytecode_cache: Path | None = None, *, console: Console) -> Installed:
    """/opt/venv of image with names (and what they need, from wheel_dirs), under work/root.
    Where two distributions hold the same file, an asked one's copy is kept. Bytecode
    comes from bytecode_cache where it holds it."""
    with step(console, f"{VENV}: the venv skeleton"):
        root, python = _skeleton(client, runtime_ref, work, source_date, log, console=console)
    venv = root / VENV.lstrip("/")
    site = work / "site"
    with step(console, f"{VENV}: pip install"):
        _pip_target(site, image, platform, python, wheel_dirs,
                    _asked_of_pip(names, asked, wheel_dirs, python), source_date, log,
                    console=console)
    with step(console, f"{VENV}: shared files, merge"):
        _settle_shared_files(site, wheel_dirs, {str(canonicalize_name(a)) for a in asked},
                             console=console)
        installed = _merge(site, venv, python)
    _compiled_and_checked(installed, root, python, platform, bytecode_cache, console=console)
    return Installed(root, python, _link_toolkit(venv, python))


def _asked_of_pip(names: list[str], asked: tuple[str, ...], wheel_dirs: list[Path],
                  python: str) -> list[str]:
    """names and asked, for pip to resolve from wheel_dirs. For an image whose Python is not
    this host's, pip would read the wheels' markers (`python_version <= "3.12"`) for this
    host's Python and refuse the lock; then names and every wheel of the runtime lock's
    wheelhouse (wheel_dirs[1]: the closure uv resolved for the image's Python), unresolved
    and with no Requires-Python read for this host's Python either."""
    if python == HOST_PYTHON or len(wheel_dirs) < 2:
        return [*names, *asked]
    return ["--no-deps", "--ignore-requires-python", *names,
            *sorted(str(w) for w in wheel_dirs[1].glob("*.whl"))]


def install_only(image: str, platform: Platform, python: str, wheel_dirs: list[Path],
                 names: list[str], work: Path, source_date: int, log: Path,
                 bytecode_cache: Path | None = None, *, console: Console) -> Installed:
    """names alone (no dependencies) into an empty /opt/venv tree under work/root: their
    files as `install` would put them, when the rest of the venv is a cached layer."""
    root = work / "root"
    venv = root / VENV.lstrip("/")
    (venv / "bin").mkdir(parents=True)
    site_packages(venv, python).mkdir(parents=True)
    site = work / "site"
    _pip_target(site, image, platform, python, wheel_dirs, ["--no-deps", *names], source_date,
                log, console=console)
    installed = _merge(site, venv, python)
    _compiled_and_checked(installed, root, python, platform, bytecode_cache, console=console)
    return Installed(root, python, None)


def _compiled_and_checked(installed: list[Path], root: Path, python: str,
                          platform: Platform, bytecode_cache: Path | None, *,
                          console: Console) -> None:
    with step(console, f"{VENV}: bytecode"):
        _compile(installed, root, python, bytecode_cache, console=console)
    with step(console, f"{VENV}: the platform of its ELF files"):
        elfcheck.require_platform(root, platform)


def _settle_shared_files(site: Path, wheel_dirs: list[Path], asked: set[str], *,
                         console: Console) -> None:
    """A file two distributions' RECORDs list with different hashes (flashinfer-python ships
    a `b12x` shim over the b12x package) holds whichever pip wrote last; make it the asked
    distribution's. One line per pair of distributions says what happened."""
    owners: dict[str, list[tuple[distributions.Distribution, str]]] = {}
    for dist in distributions.installed(site):
        for recorded in dist.files:
            if not recorded.path.startswith("..") and ".dist-info/" not in recorded.path:
                owners.setdefault(recorded.path, []).append((dist, recorded.hash))
    shared: dict[tuple[str, ...], list[str]] = {}
    for path, claims in sorted(owners.items()):
        if len({digest for _, digest in claims}) < 2:
            continue  # one distribution, or the same bytes in each
        dists = [dist for dist, _ in claims]
        keep = next((dist for dist in dists if dist.name in asked), None)
        if keep is not None:
            (site / path).write_bytes(_wheel_member(keep, wheel_dirs, path))
        key = (*sorted(dist.name for dist in dists), keep.name if keep else "")
        shared.setdefault(key, []).append(path)
    for (*names, kept), paths in shared.items():
        outcome = (f"{kept}'s copies are kept (the tag asks for it)" if kept
                   else "pip's last copies stay; pin or ask for the one to keep")
        console.detail(f"bake: {' and '.join(names)} hold {len(paths)} same-named file(s) with "
                       "other "
             f"bytes ({', '.join(paths[:2])}{', ...' if len(paths) > 2 else ''}); {outcome}")


def _wheel_member(dist: distributions.Distribution, wheel_dirs: list[Path],
                  member: str) -> bytes:
    """The bytes of member in the wheel that installed dist."""
    installed = (dist.name, Version(dist.version))
    for folder in wheel_dirs:
        for wheel in sorted(folder.glob("*.whl")):
            if parse_wheel_filename(wheel.name)[:2] == installed:
                with zipfile.ZipFile(wheel) as archive:
                    return archive.read(member)
    raise BakeError(f"the wheel of {dist.name}-{dist.version} is not in "
                    f"{', '.join(map(str, wheel_dirs))}",
                    "rerun the bake; a wheelhouse is made anew when it is incomplete")


def _link_toolkit(venv: Path, python: str) -> str | None:
    """venv/cuda -> site-packages/nvidia/cu13, when NVIDIA's nvcc wheel is installed."""
    toolkit = Path("lib") / f"python{python}" / "site-packages" / TOOLKIT
    if not (venv / toolkit / "bin" / "nvcc").is_file():
        return None
    (venv / "cuda").symlink_to(toolkit)
    return CUDA_HOME


def _skeleton(client: Client, runtime_ref: str, work: Path, source_date: int,
              log: Path, *, console: Console) -> tuple[Path, str]:
    """python3 -m venv /opt/venv in a network-less container of the runtime base, unpacked
    under work/root; and its Python version (`3.11`)."""
    archive = work / "venv-skeleton.tar"
    result = run_container(
        client, runtime_ref, [],
        entrypoint=["/bin/sh", "-c", resources.path(SKELETON).read_text(), SKELETON],
        environment={"SOURCE_DATE_EPOCH": str(source_date), "PYTHONHASHSEED": "0"},
        network=False, copy_out=(VENV, archive), console=console)
    versions = [line[len(PYTHON_MARK):].strip() for line in result.output.splitlines()
                if line.startswith(PYTHON_MARK)]
    if result.exit_code != 0 or not versions:
        raise BakeError(f"making {VENV} in {runtime_ref} failed (exit {result.exit_code}; log: "
                        f"{log})", "last output: " + " / ".join(result.tail(4).splitlines()))
    root = work / "root"
    (root / "opt").mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(root / "opt", filter="tar")
    archive.unlink()
    return root, versions[0]


def _pip_target(site: Path, image: str, platform: Platform, python: str, wheel_dirs: list[Path],
                names: list[str], source_date: int, log: Path, *, console: Console) -> None:
    """This host's pip resolves and installs for the image's platform and Python, offline;
    no bytecode: pip would record this host's paths in it (see _compile). The host's pip
    configuration (its files and PIP_* variables: find-links, constraints) has no part in
    it: the venv is the lock's on any host."""
    links = [arg for folder in wheel_dirs for arg in ("--find-links", str(folder))]
    done = run(console, [sys.executable, "-m", "pip", "--isolated", "install", "--no-index",
                "--no-cache-dir", "--disable-pip-version-check", "--only-binary=:all:",
                "--target", site,
                f"--python-version={python}", "--implementation=cp",
                *(f"--platform={tag}" for tag in platform_tags(platform)),
                "--no-compile", *links, *names],
               error=BakeError, what="pip", capture=True, check=False,
               env={"SOURCE_DATE_EPOCH": str(source_date), "PYTHONHASHSEED": "0",
                    "PIP_CONFIG_FILE": os.devnull})  # --isolated leaves the global file
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-2:]
        raise BakeError(f"building {image} failed: installing its wheels for {platform} ended "
                        f"with exit {done.returncode} (log: {log})",
                        "last output: " + " / ".join(tail))


def _merge(site: Path, venv: Path, python: str) -> list[Path]:
    """pip --target's folder into the venv: packages into site-packages, its bin/ (scripts
    whose `#!` names this host's Python) and data folders beside the venv's own. Returns
    what went into site-packages."""
    packages = site_packages(venv, python)
    installed = []
    for entry in sorted(site.iterdir()):
        if entry.name in DATA_DIRS and entry.is_dir():
            _merge_folder(entry, venv / entry.name)
        else:
            _replace(entry, packages / entry.name)
            installed.append(packages / entry.name)
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            _rewrite_shebang(script)
    for record in packages.glob("*.dist-info/RECORD"):
        _rewrite_record(record, packages, venv)
    return installed


def _compile(installed: list[Path], root: Path, python: str, cache: Path | None, *,
             console: Console) -> None:
    """Bytecode of the installed packages as the image's Python imports them: its source path
    in the image, checked-hash based (no mtime); from cache where it holds a file's. Left
    out when this host's Python is another version (the image's then compiles on import)."""
    if python != f"{sys.version_info[0]}.{sys.version_info[1]}":
        console.notice(f"bake: the image's Python is {python}, this host's {sys.version_info[0]}."
                       f"{sys.version_info[1]}: no bytecode in {VENV}")
        return
    trees = [(path, "/" + path.relative_to(root).as_posix()) for path in installed]
    made = bytecode.compile_trees(trees, cache, os.cpu_count() or 1)
    dropped = f"; {made.dropped} damaged cache entries dropped" if made.dropped else ""
    console.detail(f"bake: bytecode: {made.compiled} files compiled, {made.reused} from the cache, "
         f"{made.failed} left as source{dropped}")


def _merge_folder(source: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        _replace(entry, dest / entry.name)


def _replace(source: Path, dest: Path) -> None:
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.exists() or dest.is_symlink():
        dest.unlink()
    os.replace(source, dest)


def _rewrite_shebang(script: Path) -> None:
    """A script pip wrote for this host's interpreter runs the venv's instead."""
    data = script.read_bytes()
    first, newline, rest = data.partition(b"\n")
    if first.startswith(b"#!") and b"python" in first:
        script.write_bytes(f"#!{INTERPRETER}".encode() + newline + rest)


def _rewrite_record(record: Path, packages: Path, venv: Path) -> None:
    """RECORD lines of moved scripts: their place beside the venv and their new hash."""
    lines = []
    for line in record.read_text().splitlines():
        path, *_ = line.rsplit(",", 2)
        if path.startswith("bin/"):
            moved = venv / path
            path = os.path.relpath(moved, packages)
            data = moved.read_bytes() if moved.is_file() else None
            line = f"{path},," if data is None else f"{path},{record_hash(data)},{len(data)}"
        lines.append(line)
    record.write_text("\n".join(lines) + "\n")


