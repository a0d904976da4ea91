"""One holder at a time: an flock on a file that says which process holds it.

The lock is the kernel's (fcntl.flock), so it ends with its holder, however the holder ends
(`kill -9` included); the file's text (`PID HOST`) only names the holder to whoever waits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["Busy", "exclusive", "holder"]

POLL = 0.2  # seconds between attempts while another process holds the lock


class Busy(Exception):
    """The lock stayed held for the whole wait; the message names the holder."""


@contextlib.contextmanager
def exclusive(path: Path, wait: float, waiting: Callable[[str], None]) -> Iterator[None]:
    """Hold path's lock for the block. While another process holds it, waiting(holder) is
    called once and the lock tried again until wait seconds have passed (then Busy)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        _acquire(handle.fileno(), path, wait, waiting)
        handle.truncate(0)
        handle.write(f"{os.getpid()} {socket.gethostname()}\n")
        handle.flush()
        yield


def holder(path: Path) -> str:
    """Who holds the lock, as its file says: `pid 123 on host`, or `another process`."""
    with contextlib.suppress(OSError):
        pid, _, host = path.read_text(errors="replace").strip().partition(" ")
        if pid.isdigit():
            return f"pid {pid} on {host}" if host else f"pid {pid}"
    return "another process"


def _acquire(fd: int, path: Path, wait: float, waiting: Callable[[str], None]) -> None:
    deadline = time.monotonic() + wait
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Busy(holder(path)) from None
            if not told:
                waiting(holder(path))
                told = True
            time.sleep(POLL)
