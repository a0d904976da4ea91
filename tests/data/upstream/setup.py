"""Builds tinykern/_kernels.so with nvcc for the arches in TORCH_CUDA_ARCH_LIST.

Like vLLM, VLLM_USE_PRECOMPILED=1 with VLLM_PRECOMPILED_WHEEL_LOCATION=<wheel> takes the
compiled library from that wheel instead of running nvcc.
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
        member = next(n for n in archive.namelist() if n.startswith("tinykern/_kernels"))
        with archive.open(member) as source, output.open("wb") as target:
            shutil.copyfileobj(source, target)


class NvccBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        output = Path(self.get_ext_fullpath(ext.name))
        output.parent.mkdir(parents=True, exist_ok=True)
        if os.environ.get("VLLM_USE_PRECOMPILED") == "1":
            copy_precompiled(os.environ["VLLM_PRECOMPILED_WHEEL_LOCATION"], output)
            return
        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "12.1a")
        cmd = ["nvcc", "-O2", "-shared", "-Xcompiler", "-fPIC", *gencode_flags(arch_list),
               *ext.sources, "-o", str(output)]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


setup(
    ext_modules=[Extension("tinykern._kernels", sources=["csrc/scale.cu"])],
    cmdclass={"build_ext": NvccBuild},
)
