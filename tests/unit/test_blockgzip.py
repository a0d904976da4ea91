"""gzip on every core: what comes out is gzip (Python's module and gzip(1) read it back) and
the same bytes whatever the number of workers."""

from __future__ import annotations

import gzip
import io
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkbake.oci import blockgzip


def sample(size: int) -> bytes:
    """Compressible and not: repeated text with random runs."""
    chunks = random.Random(size)
    out = bytearray()
    while len(out) < size:
        out += b"import torch  # a line of a Python file\n" * chunks.randint(1, 40)
        out += chunks.randbytes(chunks.randint(1, 3000))
    return bytes(out[:size])


def packed(data: bytes, workers: int, pieces: int = 3) -> bytes:
    sink = io.BytesIO()
    writer = blockgzip.BlockGzip(sink, workers=workers)
    step = max(1, len(data) // pieces)
    for start in range(0, len(data), step):  # writes that straddle blocks
        writer.write(data[start:start + step])
    writer.close()
    return sink.getvalue()


@pytest.mark.parametrize("size", [0, 1, blockgzip.BLOCK - 1, blockgzip.BLOCK,
                                  3 * blockgzip.BLOCK + 12345])
def test_it_is_gzip_that_gives_back_the_input(size: int) -> None:
    data = sample(size)
    assert gzip.decompress(packed(data, workers=2)) == data


def test_the_bytes_do_not_depend_on_the_workers() -> None:
    data = sample(5 * blockgzip.BLOCK + 777)
    one = packed(data, workers=1, pieces=7)
    assert packed(data, workers=2, pieces=2) == one
    assert packed(data, workers=5, pieces=11) == one
    assert len(one) < len(data) * 0.7  # it compresses, dictionary across blocks and all


def test_gzip_the_tool_reads_it_and_the_header_has_no_name_and_no_time(tmp_path: Path) -> None:
    assert shutil.which("gzip")
    data = sample(2 * blockgzip.BLOCK + 5)
    blob = packed(data, workers=2)
    assert blob[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    (tmp_path / "layer.gz").write_bytes(blob)
    tested = subprocess.run(["gzip", "-t", str(tmp_path / "layer.gz")], capture_output=True)
    assert tested.returncode == 0, tested.stderr
    out = subprocess.run(["gzip", "-dc", str(tmp_path / "layer.gz")], capture_output=True,
                         check=True).stdout
    assert out == data


def test_the_format_key_names_the_deflate_implementation() -> None:
    """zlib-ng (or another zlib) may deflate one input to other bytes: keys must differ."""
    import zlib

    assert blockgzip.FORMAT.startswith(f"gzip-{blockgzip.LEVEL}-blocks-{blockgzip.BLOCK}-")
    expected = f"zlib-ng-{zlib.ZLIBNG_VERSION}" if hasattr(zlib, "ZLIBNG_VERSION") else \
        f"zlib-{zlib.ZLIB_RUNTIME_VERSION}"
    assert blockgzip.FORMAT.endswith(expected) and expected == blockgzip.DEFLATE
