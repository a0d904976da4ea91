"""Builds tinycmake/_tinycmake.so with CMake (configure, where FetchContent gets tinydep,
then build) for the arches in TORCH_CUDA_ARCH_LIST. CMAKE_ARGS (space separated) join the
configure command, as in vLLM's setup.py; sccache launches the compile when it is on PATH
and VLLM_DISABLE_SCCACHE is not 1, as there."""

import os
import re
import shlex
import shutil
import subprocess
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


def launcher() -> str:
    if shutil.which("sccache") and not int(os.environ.get("VLLM_DISABLE_SCCACHE", "0")):
        return "sccache"
    return ""


def run(cmd: list[str]) -> None:
    print("+ " + shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        output = Path(self.get_ext_fullpath(ext.name))
        build = Path(self.build_temp) / "cmake"
        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "12.1a")
        run(["cmake", "-S", ".", "-B", str(build), "-G", "Ninja",
             f"-DTINYCMAKE_GENCODE={' '.join(gencode_flags(arch_list))}",
             f"-DTINYCMAKE_LAUNCHER={launcher()}",
             *shlex.split(os.environ.get("CMAKE_ARGS", ""))])
        run(["cmake", "--build", str(build)])
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(build / "libtinycmake.so", output)


setup(
    ext_modules=[Extension("tinycmake._tinycmake", sources=["csrc/value.cu"])],
    cmdclass={"build_ext": CMakeBuild},
)
