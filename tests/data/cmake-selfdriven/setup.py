"""Builds selfdriven/_selfdriven.so with CMake, the way many projects do: its own configure
command with its own toolchain file (cmake/toolchain.cmake), and no CMAKE_ARGS from the
environment. The arches come from TORCH_CUDA_ARCH_LIST."""

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CMAKE = "cmake"  # as found on PATH


def gencode_flags(arch_list: str) -> str:
    """'12.1a 9.0' -> '-gencode arch=compute_121a,code=sm_121a ...'."""
    flags = []
    for arch in re.split(r"[;\s]+", arch_list.strip()):
        major, minor, suffix = re.fullmatch(r"(\d+)\.(\d)([af]?)", arch).groups()
        number = f"{major}{minor}{suffix}"
        flags += ["-gencode", f"arch=compute_{number},code=sm_{number}"]
    return " ".join(flags)


def run(cmd: list[str]) -> None:
    print("+ " + shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        output = Path(self.get_ext_fullpath(ext.name))
        build = Path(self.build_temp) / "cmake"
        source = Path(__file__).resolve().parent
        gencode = gencode_flags(os.environ.get("TORCH_CUDA_ARCH_LIST", "12.1a"))
        run([CMAKE, "-S", str(source), "-B", str(build), "-G", "Ninja",
             f"-DCMAKE_TOOLCHAIN_FILE={source / 'cmake' / 'toolchain.cmake'}",
             f"-DSELFDRIVEN_GENCODE={gencode}"])
        run([CMAKE, "--build", str(build)])
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(build / "libselfdriven.so", output)


setup(
    ext_modules=[Extension("selfdriven._selfdriven", sources=["csrc/value.cu"])],
    cmdclass={"build_ext": CMakeBuild},
)
