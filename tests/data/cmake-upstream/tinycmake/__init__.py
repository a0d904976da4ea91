"""tinycmake: a CUDA library built by CMake around a FetchContent dependency (tinydep)."""

import ctypes
import pathlib


def library() -> pathlib.Path:
    return next(pathlib.Path(__file__).parent.glob("_tinycmake*.so"))


def value() -> int:
    """tinydep's value, as compiled into the library."""
    return int(ctypes.CDLL(str(library())).tinycmake_value())
