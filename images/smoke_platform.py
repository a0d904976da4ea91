"""vLLM told the tag's GPU, without one: what backend-capability (smoke_backends.py),
layer-weights (smoke_layers.py) and kv-plan (smoke_kv.py) share.

vLLM's platform reports a CUDA device of the tag's compute capability, and torch reports it
to the kernel packages that ask torch (b12x). vLLM's compiled libraries link the CUDA
driver, which a container without a GPU lacks: there driver_stub compiles a stub of it with
the image's C compiler, as NVIDIA's toolkit ships one for linking, each driver function the
libraries name answering CUDA_ERROR_STUB_LIBRARY, so they load; the checks call none of
them. Standard library plus the image's vLLM and torch; mounted beside smoke_check.py, never
baked.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from smoke_common import CheckFailed, CheckSkipped

ARCH = re.compile(r"(\d+)\.(\d+)[af]?")
DRIVER = "libcuda.so.1"
STUB_LIBRARY = 34  # CUDA_ERROR_STUB_LIBRARY: what the toolkit's own driver stub answers


def driver_functions(vllm_dir: Path) -> list[str]:
    """The CUDA driver functions vLLM's compiled libraries name (`nm`, binutils)."""
    names: set[str] = set()
    for library in sorted(vllm_dir.rglob("*.so")):
        listed = subprocess.run(["nm", "-D", "--undefined-only", str(library)],
                                capture_output=True, text=True, timeout=120, check=False)
        names |= {line.split()[-1] for line in listed.stdout.splitlines()
                  if re.fullmatch(r"cu[A-Z]\w*", line.split()[-1] if line.split() else "")}
    return sorted(names)


def driver_stub(folder: Path) -> dict[str, str]:
    """Environment under which vLLM's libraries load without a GPU: {} where the driver is
    there, else LD_LIBRARY_PATH to a stub compiled into folder; CheckSkipped without a
    compiler."""
    try:
        ctypes.CDLL(DRIVER)
        return {}
    except OSError:
        pass
    compiler = shutil.which("cc") or shutil.which("gcc")
    spec = importlib.util.find_spec("vllm")
    if compiler is None or shutil.which("nm") is None or spec is None or not spec.origin:
        raise CheckSkipped(f"no CUDA driver ({DRIVER}) here, and no C compiler and nm to make "
                           "its stub: vLLM's kernels cannot load; run with a GPU (--gpu)")
    source = folder / "cuda_stub.c"
    source.write_text("".join(f"int {name}(void) {{ return {STUB_LIBRARY}; }}\n"
                              for name in driver_functions(Path(spec.origin).parent)))
    built = subprocess.run([compiler, "-shared", "-fPIC", f"-Wl,-soname,{DRIVER}", "-o",
                            str(folder / DRIVER), str(source)], capture_output=True,
                           text=True, timeout=300, check=False)
    if built.returncode != 0:
        raise CheckFailed(f"the CUDA driver stub did not compile: {built.stderr.strip()[-200:]}")
    return {"LD_LIBRARY_PATH": ":".join(filter(None, [str(folder),
                                                      os.environ.get("LD_LIBRARY_PATH")]))}


def use_gpu(major: int, minor: int) -> None:
    """Make vLLM's platform a CUDA one whose device has this compute capability."""
    import vllm.platforms
    from vllm.platforms.cuda import NonNvmlCudaPlatform
    from vllm.platforms.interface import DeviceCapability

    class TaggedGpu(NonNvmlCudaPlatform):  # type: ignore[misc]
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(major=major, minor=minor)

    vllm.platforms.current_platform = TaggedGpu()


def torch_reports(major: int, minor: int) -> None:
    """Make torch report that GPU too: kernel packages gate on it (b12x asks
    torch.cuda.get_device_capability). Done after the imports, which need no device."""
    import torch

    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_capability = lambda device=None: (major, minor)


def import_model(model: str) -> None:
    """The modules whose code gives the verdicts, imported before torch reports the GPU."""
    import vllm.model_executor.kernels.linear
    import vllm.model_executor.layers.fused_moe.oracle.mxfp4
    import vllm.models.deepseek_v4.nvidia.model  # noqa: F401
