"""In-image smoke checks of what compiles on first use, and of the distributions a tag asks
for by name. CPU only: nvcc and ptxas compile for the tag's arch without a GPU. Standard
library only; mounted beside smoke_check.py, never baked."""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from smoke_common import CheckFailed, CheckSkipped, Image, one_line, top_level_packages

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190  # the ELF machine of a cubin
KERNEL = """__global__ void scale(float* x, float by) { x[threadIdx.x] *= by; }\n"""
COMPILE_SECONDS = 900  # nvcc's front end under qemu takes minutes


def check_jit_toolchain(image: Image, expected: dict[str, Any]) -> str:
    """The image's nvcc compiles a kernel for the tag's arch, the ptxas Triton takes for
    that arch assembles its PTX, and the JIT cache folder is writable."""
    jit = image.manifest().get("jit")
    if not jit:
        if expected.get("jit_required"):
            raise CheckFailed("the image has no CUDA toolchain (no nvcc wheel in its venv): "
                              "FlashInfer, Triton and CuTe DSL cannot compile on first use")
        raise CheckSkipped("the image carries no CUDA toolchain (its upstream has no "
                           "runtime requirements)")
    sm_arch = str(expected["sm_arch"])
    home = image.root / str(jit["cuda_home"]).lstrip("/")
    problems = environment_problems(image, jit)
    if problems:
        raise CheckFailed("; ".join(problems))
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "kernel.cu").write_text(KERNEL)
        nvcc = str(home / "bin" / "nvcc")
        compile_with([nvcc, f"-arch={sm_arch}", "-cubin", "-o", "kernel.cubin", "kernel.cu"],
                     work, "nvcc")
        require_cubin(work / "kernel.cubin", "nvcc")
        compile_with([nvcc, f"-arch={sm_arch}", "-ptx", "-o", "kernel.ptx", "kernel.cu"],
                     work, "nvcc -ptx")
        ptxas = triton_ptxas(sm_arch)
        compile_with([str(ptxas), f"-arch={sm_arch}", "-o", "triton.cubin", "kernel.ptx"],
                     work, "Triton's ptxas")
        require_cubin(work / "triton.cubin", "Triton's ptxas")
    return (f"nvcc {tool_version(nvcc)} and Triton's ptxas {tool_version(str(ptxas))} "
            f"compile for {sm_arch}; cache {jit['cache']} writable")


def environment_problems(image: Image, jit: dict[str, Any]) -> list[str]:
    """What the first-use compiles find: CUDA_HOME, a host C++ compiler, the cache folder."""
    problems = []
    if image.root == Path("/"):
        for name, value in sorted(dict(jit.get("env", {})).items()):
            if os.environ.get(name) != value:
                problems.append(f"{name}={os.environ.get(name)!r}, the manifest says {value!r}")
        if shutil.which("c++") is None:
            problems.append("no host C++ compiler (c++) on PATH: nvcc and FlashInfer's JIT "
                            "need one; give the runtime base g++")
    cache = image.root / str(jit["cache"]).lstrip("/")
    if not cache.is_dir() or not os.access(cache, os.W_OK | os.X_OK):
        problems.append(f"the JIT cache folder {jit['cache']} is missing or not writable")
    return problems


def compile_with(argv: list[str], work: Path, what: str) -> None:
    try:
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False,
                              timeout=COMPILE_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CheckFailed(f"{what} did not run: {one_line(exc)}") from exc
    if done.returncode != 0:
        first = next((line for line in (done.stderr + done.stdout).splitlines()
                      if "error" in line.lower()), done.stderr.strip()[-200:])
        raise CheckFailed(f"{what} failed (exit {done.returncode}): {first.strip()}")


def require_cubin(path: Path, what: str) -> None:
    data = path.read_bytes() if path.is_file() else b""
    if data[:4] != ELF_MAGIC or int.from_bytes(data[18:20], "little") != EM_CUDA:
        raise CheckFailed(f"{what} wrote no cubin ({path.name}: {len(data)} bytes)")


def triton_ptxas(sm_arch: str) -> Path:
    """The ptxas Triton itself picks for the arch (its wheel carries two: CUDA 12's, and a
    newer one it takes for Blackwell), asked of Triton's own compiler module."""
    capability = int("".join(ch for ch in sm_arch.removeprefix("sm_") if ch.isdigit()))
    try:
        compiler = importlib.import_module("triton.backends.nvidia.compiler")
        return Path(str(compiler.get_ptxas(capability).path))
    except Exception as exc:
        raise CheckFailed(f"Triton cannot name its ptxas for {sm_arch}: {one_line(exc)}") from exc


def tool_version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False,
                          timeout=COMPILE_SECONDS)
    release = [word for word in done.stdout.split() if word.startswith("V")]
    return release[-1] if release else "?"


def check_asked(image: Image, expected: dict[str, Any]) -> str:
    """Each distribution the tag asks for (an extra's requirement, a pin) is installed at the
    locked version, every file of its RECORD is its own copy, and it imports."""
    asked = image.manifest().get("asked") or []
    if not asked:
        raise CheckSkipped("the tag asks for no extras or pins")
    return "; ".join(asked_detail(entry) for entry in asked)


def asked_detail(entry: dict[str, Any]) -> str:
    name, requirement = str(entry["name"]), str(entry["requirement"])
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise CheckFailed(f"{name} is not installed ({entry['why']}: {requirement})") from exc
    pinned = requirement.split(";")[0].partition("==")[2].strip()
    if pinned and dist.version != pinned:
        raise CheckFailed(f"{name} {dist.version} is installed, {entry['why']} asks {pinned}")
    changed = [str(file) for file in dist.files or [] if file.hash and file.hash.mode == "sha256"
               and record_digest(Path(str(file.locate()))) != file.hash.value]
    if changed:
        raise CheckFailed(f"{name}: {len(changed)} file(s) differ from its RECORD, e.g. "
                          f"{changed[0]} (another distribution wrote it)")
    packages = top_level_packages(dist)
    for package in packages:
        try:
            importlib.import_module(package)
        except Exception as exc:
            raise CheckFailed(f"import {package} ({name}) failed: {one_line(exc)}") from exc
    return f"{name} {dist.version} ({entry['why']}; imports {', '.join(packages)})"


def record_digest(path: Path) -> str:
    if not path.is_file():
        return "missing"
    digest = hashlib.sha256(path.read_bytes()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
