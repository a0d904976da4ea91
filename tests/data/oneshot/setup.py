"""Builds oneshot/_kernels.so as some upstreams do: one `nvcc -shared -o lib.so x.cu` step,
which compiles and links without `-c` (nvcc then names its intermediate files after its
process id). sccache, when it is on PATH and VLLM_DISABLE_SCCACHE is not 1, launches it.
"""

import os
import re
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
        flags += ["-gencode", f"arch=compute_{major}{minor}{suffix},code=sm_{major}{minor}{suffix}"]
    return flags


class OneStepNvcc(build_ext):
    def build_extension(self, ext: Extension) -> None:
        output = Path(self.get_ext_fullpath(ext.name))
        output.parent.mkdir(parents=True, exist_ok=True)
        use_sccache = shutil.which("sccache") and os.environ.get("VLLM_DISABLE_SCCACHE") != "1"
        cmd = [*(["sccache"] if use_sccache else []), "nvcc", "-O2", "-shared", "-Xcompiler",
               "-fPIC", *gencode_flags(os.environ.get("TORCH_CUDA_ARCH_LIST", "12.1a")),
               "-o", str(output), *ext.sources]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


setup(
    ext_modules=[Extension("oneshot._kernels", sources=["csrc/add.cu"])],
    cmdclass={"build_ext": OneStepNvcc},
)
