"""GPU smoke checks: a device is visible, its compute capability is the tag's, and a custom
op of the image's wheels runs on it and matches a reference. Standard library only here;
the vLLM op imports torch, which a vLLM image has. Without a GPU each check is skipped
(`--gpu auto`) or failed (`--gpu require`) with the reason."""

from __future__ import annotations

import ctypes
import importlib
import random
import re
import struct
from collections.abc import Callable
from typing import Any

from smoke_common import CheckFailed, CheckSkipped, Image

CAPABILITY_MAJOR, CAPABILITY_MINOR = 75, 76  # CUdevice_attribute in cuda.h


def check_gpu(image: Image, expected: dict[str, Any]) -> str:
    count, how = require_devices(image, expected)
    return f"{count} GPU(s) visible ({how})"


def require_devices(image: Image, expected: dict[str, Any]) -> tuple[int, str]:
    """(count, how) when a GPU is visible; else skipped (auto) or failed (require)."""
    gpu = expected.get("gpu") or {}
    mode = gpu.get("mode", "auto")
    if mode == "skip":
        raise CheckSkipped("not asked for (--gpu skip)")
    count, how = device_count(image, gpu.get("unavailable"))
    if count > 0:
        return count, how
    reason = f"no GPU visible: {how}"
    if mode == "require":
        raise CheckFailed(f"{reason} (--gpu require)")
    raise CheckSkipped(reason)


def kernel_function(image: Image, name: str) -> tuple[Any, str] | None:
    """The first kernel library of the manifest that exports `name`: (function, its path)."""
    for kernel in image.kernels():
        library = ctypes.CDLL(str(image.site_file(str(kernel["path"]))))
        if hasattr(library, name):
            function = getattr(library, name)
            function.restype = ctypes.c_int
            return function, str(kernel["path"])
    return None


def device_count(image: Image, unavailable: str | None) -> tuple[int, str]:
    """How many GPUs the image sees, and through what (or why none)."""
    if unavailable:
        return 0, unavailable
    found = kernel_function(image, "sparkbake_device_count")
    if found is not None:
        count = int(found[0]())
        return count, f"sparkbake_device_count() in {found[1]} returned {count}"
    return driver_device_count()


def libcuda() -> Any:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return cuda if int(cuda.cuInit(0)) == 0 else None


def driver_device_count() -> tuple[int, str]:
    cuda = libcuda()
    if cuda is None:
        return 0, "libcuda.so.1 cannot be loaded or initialized (no NVIDIA driver in the container)"
    count = ctypes.c_int(0)
    status = int(cuda.cuDeviceGetCount(ctypes.byref(count)))
    if status != 0:
        return 0, f"cuDeviceGetCount failed with CUDA error {status}"
    return count.value, f"libcuda reports {count.value} device(s)"


def wanted_capability(cuda_arch: str) -> tuple[int, int]:
    """`12.1a` -> (12, 1)."""
    match = re.fullmatch(r"(\d+)\.(\d)[af]?", cuda_arch)
    if match is None:
        raise CheckFailed(f"cuda_arch {cuda_arch!r} is not MAJOR.MINOR[a|f]")
    return int(match.group(1)), int(match.group(2))


def device_capability(image: Image, index: int) -> tuple[int, int]:
    """Device index's compute capability: from the kernel library's
    sparkbake_device_capability(index) (major * 10 + minor) if it has one, else libcuda."""
    found = kernel_function(image, "sparkbake_device_capability")
    if found is not None:
        value = int(found[0](index))
        if value < 0:
            raise CheckFailed(f"sparkbake_device_capability({index}) in {found[1]} failed "
                              f"with CUDA error {-value}")
        return divmod(value, 10)
    cuda = libcuda()
    if cuda is None:
        raise CheckFailed("libcuda.so.1 cannot be loaded or initialized to read the capability")
    device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    for call, args in (("cuDeviceGet", (ctypes.byref(device), index)),
                       ("cuDeviceGetAttribute", (ctypes.byref(major), CAPABILITY_MAJOR, device)),
                       ("cuDeviceGetAttribute", (ctypes.byref(minor), CAPABILITY_MINOR, device))):
        status = int(getattr(cuda, call)(*args))
        if status != 0:
            raise CheckFailed(f"{call} for device {index} failed with CUDA error {status}")
    return major.value, minor.value


def check_gpu_capability(image: Image, expected: dict[str, Any]) -> str:
    count, _ = require_devices(image, expected)
    want = wanted_capability(str(expected["cuda_arch"]))
    found = [device_capability(image, index) for index in range(count)]
    wrong = [f"device {i} is {c[0]}.{c[1]}" for i, c in enumerate(found) if c != want]
    if wrong:
        raise CheckFailed(f"{', '.join(wrong)}; the tag's cuda_arch {expected['cuda_arch']} "
                          f"needs compute capability {want[0]}.{want[1]}")
    return f"{count} device(s) of compute capability {want[0]}.{want[1]}"


def float32(value: float) -> float:
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def tinykern_scale() -> str:
    """tinykern.scale on the GPU against the same product in Python, rounded to float32
    (the product of two float32 is exact in a double, so the results must be equal)."""
    tinykern = importlib.import_module("tinykern")
    rng = random.Random(121)
    values = [float32(rng.uniform(-100.0, 100.0)) for _ in range(4096)]
    factor = float32(1.7)
    try:
        got = tinykern.scale(values, factor)
    except RuntimeError as error:  # the launch's or the copy's CUDA error, named
        built = ", ".join(f"sm_{arch[:-1]}" for arch in tinykern.archs()) or "no arch"
        raise CheckFailed(f"tinykern.scale failed on this GPU: {error}; its kernels are built "
                          f"for {built}") from None
    want = [float32(v * factor) for v in values]
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w]
    if len(got) != len(want) or bad:
        first = f"; first at {bad[0]}: {got[bad[0]]!r} vs {want[bad[0]]!r}" if bad else ""
        raise CheckFailed(f"tinykern.scale(x, {factor}) differs from the Python reference in "
                          f"{len(bad) or abs(len(got) - len(want))} of {len(want)} values{first}")
    return f"tinykern.scale on {len(values)} floats equals the Python reference"


def vllm_ops() -> str:
    """vllm._custom_ops.rms_norm and the silu_and_mul op on the GPU against torch."""
    torch = importlib.import_module("torch")
    ops = importlib.import_module("vllm._custom_ops")
    functional = importlib.import_module("torch.nn.functional")
    generator = torch.Generator(device="cuda").manual_seed(121)
    x = torch.randn(32, 4096, dtype=torch.bfloat16, device="cuda", generator=generator)
    weight = torch.randn(4096, dtype=torch.bfloat16, device="cuda", generator=generator)
    out = torch.empty_like(x)
    ops.rms_norm(out, x, weight, 1e-6)
    xf = x.float()
    norm = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
    gate = torch.randn(32, 2 * 2048, dtype=torch.bfloat16, device="cuda", generator=generator)
    activated = torch.empty(32, 2048, dtype=torch.bfloat16, device="cuda")
    torch.ops._C.silu_and_mul(activated, gate)
    silu = functional.silu(gate[:, :2048].float()) * gate[:, 2048:].float()
    torch.cuda.synchronize()
    errors = []
    for name, got, want in (("rms_norm", out, norm), ("silu_and_mul", activated, silu)):
        rounded = want.to(torch.bfloat16).float()  # the reference in the op's dtype
        error = float((got.float() - rounded).abs().max())
        if not bool(torch.allclose(got.float(), rounded, atol=3e-2, rtol=3e-2)):
            raise CheckFailed(f"vllm {name} on {torch.cuda.get_device_name(0)} differs from "
                              f"torch: max abs error {error:.4g}")
        errors.append(f"{name} max abs error {error:.3g}")
    return f"vllm ops on {torch.cuda.get_device_name(0)} match torch: {', '.join(errors)}"


# import name of a wheel's package -> the op check run when the image has it
OPS: dict[str, Callable[[], str]] = {"vllm": vllm_ops, "tinykern": tinykern_scale}


def check_gpu_op(image: Image, expected: dict[str, Any]) -> str:
    require_devices(image, expected)
    names = [str(w.get("name", "")).replace("-", "_").lower() for w in image.wheels()]
    known = [name for name in names if name in OPS]
    if not known:
        raise CheckSkipped(f"no custom op check for this image's wheels ({', '.join(names)}); "
                           f"there are checks for {', '.join(sorted(OPS))}")
    return "; ".join(OPS[name]() for name in known)
