"""Builds tinykern/_kernels.so with nvcc for the arches in TORCH_CUDA_ARCH_LIST.

Like vLLM, VLLM_USE_PRECOMPILED=1 with VLLM_PRECOMPILED_WHEEL_LOCATION=<wheel> takes the
compiled library from that wheel instead of running nvcc, and sccache, when it is on PATH
and VLLM_DISABLE_SCCACHE is not 1, launches the compiles (vLLM's CMAKE_*_COMPILER_LAUNCHER).
"""

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def gencode_flags(arch_list: str) -> list[str]:
    """'12.1a 9.0' -> ['-gencode', 'arch=compute_121a,code=sm_121a', ...]."""
    flags = []
    for arch in re.split(r"[;\s]+", arch_list.strip()):
        major, minor, suffix = re.fullmatch(r"(\d+)\.(\d)([af]?)", arch).groups()
        number = f"{major}{minor}{suffix}"
        flags += ["-gencode", f"arch=compute_{number},code=sm_{number}"]
    return flags


def copy_precompiled(wheel: str, output: Path) -> None:
    print(f"using precompiled kernels from {wheel}", flush=True)
    with zipfile.ZipFile(wheel) as archive:
        member = next(m for m in archive.infolist() if m.filename.startswith("tinykern/_kernels"))
        with archive.open(member) as source, output.open("wb") as target:
            shutil.copyfileobj(source, target)
        if member.external_attr >> 16:  # the mode it had, as vLLM's setup.py restores it
            os.chmod(output, member.external_attr >> 16)


class NvccBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        output = Path(self.get_ext_fullpath(ext.name))
        output.parent.mkdir(parents=True, exist_ok=True)
        if os.environ.get("VLLM_USE_PRECOMPILED") == "1":
            copy_precompiled(os.environ["VLLM_PRECOMPILED_WHEEL_LOCATION"], output)
            return
        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "12.1a")
        cmd = ["nvcc", "-O2", "-shared", "-Xcompiler", "-fPIC", *gencode_flags(arch_list),
               *compile_objects(ext.sources, Path(self.build_temp), arch_list), "-o", str(output)]
        run(cmd)


def launcher() -> list[str]:
    """sccache in front of the compiler, as vLLM's setup.py (is_sccache_available) does."""
    if shutil.which("sccache") and not int(os.environ.get("VLLM_DISABLE_SCCACHE", "0")):
        return ["sccache"]
    return []


def compile_objects(sources: list[str], folder: Path, arch_list: str) -> list[str]:
    """Each source compiled to an object (-c) before the link, as CMake does: nvcc then names
    its intermediate files after the object (with -objtemp), not after its process id."""
    folder.mkdir(parents=True, exist_ok=True)
    objects = []
    for source in sources:
        obj = folder / (Path(source).stem + ".o")
        run([*launcher(), "nvcc", "-O2", "-c", "-Xcompiler", "-fPIC", *gencode_flags(arch_list),
             source, "-o", str(obj)])
        objects.append(str(obj))
    return objects


def run(cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


setup(
    ext_modules=[Extension("tinykern._kernels", sources=["csrc/scale.cu"])],
    cmdclass={"build_ext": NvccBuild},
)
