"""tinykern: a tiny upstream with one CUDA kernel, the fixture sparkbake builds."""

from __future__ import annotations

import ctypes
from pathlib import Path

__all__ = ["archs", "device_count", "scale"]
from ._version import __version__ as __version__

# setuptools names the library with the ABI suffix: _kernels.cpython-311-x86_64-linux-gnu.so
_library = ctypes.CDLL(str(next(Path(__file__).parent.glob("_kernels*.so"))))
_library.tinykern_archs.restype = ctypes.c_char_p


def archs() -> list[str]:
    """The device architectures the kernels were compiled for, e.g. ['1210']."""
    return [a for a in _library.tinykern_archs().decode().split(",") if a]


def device_count() -> int:
    return int(_library.sparkbake_device_count())


def scale(values: list[float], factor: float) -> list[float]:
    """Multiply values by factor on the GPU."""
    array = (ctypes.c_float * len(values))(*values)
    status = _library.tinykern_scale(array, len(values), ctypes.c_float(factor))
    if status != 0:
        for function in (_library.tinykern_error_name, _library.tinykern_error_string):
            function.restype = ctypes.c_char_p
        name = _library.tinykern_error_name(status).decode()
        text = _library.tinykern_error_string(status).decode()
        raise RuntimeError(f"CUDA error {status} ({name}: {text})")
    return list(array)
