"""gzip on every core, with the same bytes whatever the number of cores.

The input is cut into blocks of a fixed size; each block is deflated on its own, with the 32
KiB before it as its dictionary, and ends on a byte boundary (a sync flush), so the blocks
join into one deflate stream (pigz's way). What comes out depends on the input, the level
and the block size only: workers change how fast, never which bytes. Blocks go to a thread
pool (zlib lets go of the GIL while it deflates) and are written in order, a bounded number
in flight. The gzip header carries no name and no time, as Python's gzip module writes it.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

__all__ = ["BLOCK", "FORMAT", "BlockGzip"]

BLOCK = 1 << 20  # bytes of input per block
WINDOW = 1 << 15  # deflate's dictionary: the 32 KiB before a block
# level 1: on the CUDA and torch libraries that are most of an image it deflates 2.5 times as
# fast as level 6 for 2-3 % more bytes (Python sources: 30 % more, but they are small)
LEVEL = 1
# the deflate implementation Python was built with: zlib-ng, or another zlib, may write other
# bytes for the same input, so a key made with one never names a blob of another
DEFLATE = (f"zlib-ng-{zlib.ZLIBNG_VERSION}" if hasattr(zlib, "ZLIBNG_VERSION")
           else f"zlib-{zlib.ZLIB_RUNTIME_VERSION}")
FORMAT = f"gzip-{LEVEL}-blocks-{BLOCK}-{DEFLATE}"  # part of every key whose blob this writes
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, mtime 0, OS unknown


def _deflate(block: bytes, dictionary: bytes, level: int) -> bytes:
    packer = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=dictionary) \
        if dictionary else zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(block) + packer.flush(zlib.Z_SYNC_FLUSH)


class BlockGzip:
    """A write-only gzip stream into sink, deflated block by block on `workers` threads."""

    def __init__(self, sink: IO[bytes] | Any, workers: int, level: int = LEVEL) -> None:
        self.sink, self.level = sink, level
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers))
        self.pending: deque[Future[bytes]] = deque()
        self.limit = 2 * max(1, workers)  # blocks in flight: bounded memory
        self.buffer = bytearray()
        self.tail = b""  # the last WINDOW bytes given to a block
        self.crc, self.size = 0, 0
        self.sink.write(HEADER)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        self.size += len(view)
        self.buffer += view
        while len(self.buffer) >= BLOCK:
            self._submit(bytes(self.buffer[:BLOCK]))
            del self.buffer[:BLOCK]
        return len(view)

    def _submit(self, block: bytes) -> None:
        self.pending.append(self.pool.submit(_deflate, block, self.tail, self.level))
        self.tail = (self.tail + block)[-WINDOW:]
        while len(self.pending) >= self.limit:
            self.sink.write(self.pending.popleft().result())

    def close(self) -> None:
        """The last block, the final (empty) deflate block and the gzip trailer."""
        if self.buffer:
            self._submit(bytes(self.buffer))
            self.buffer.clear()
        while self.pending:
            self.sink.write(self.pending.popleft().result())
        self.pool.shutdown()
        self.sink.write(zlib.compressobj(self.level, zlib.DEFLATED, -zlib.MAX_WBITS)
                        .flush(zlib.Z_FINISH))
        self.sink.write(struct.pack("<II", self.crc, self.size & 0xFFFFFFFF))
