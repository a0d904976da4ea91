"""Waiting for what a test waits on, by asking for it, not by sleeping a fixed time."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable


def until(ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Ask `ready` every 0.1 s until it says yes; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not so after {timeout:g} s")
        time.sleep(0.1)


def listening(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), 0.5):
        return True
    return False
