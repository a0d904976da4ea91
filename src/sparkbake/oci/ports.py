"""Who listens on a local TCP port: read from /proc (Linux), so that a command refusing a
taken port can name the process that holds it."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

__all__ = ["holder"]

LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


def holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """`docker-registry (pid 123)` for the process listening on port; `a process this user
    cannot see` when the socket's owner is not readable; None when the port is free."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None if _bindable(port) else "a process this user cannot see"
    for pid_dir in sorted(proc.glob("[0-9]*"), key=lambda p: int(p.name)):
        with contextlib.suppress(OSError):
            for fd in (pid_dir / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return f"{_command(pid_dir)} (pid {pid_dir.name})"
    return "a process this user cannot see"


def _listening_inodes(port: int, proc: Path) -> set[str]:
    """socket:[inode] of each listening socket on port, IPv4 and IPv6."""
    found = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in (proc / "net" / table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                    found.add(f"socket:[{inode}]")
    return found


def _command(pid_dir: Path) -> str:
    argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
    return Path(argv[0].decode(errors="replace")).name or pid_dir.name


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        # as a server binds: a closed connection's TIME_WAIT does not hold the port
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
