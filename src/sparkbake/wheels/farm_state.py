"""farm_state: where a compile farm keeps its record, configs and sockets, and the record.

build/compile-farm/ holds farm.json (the processes `down` ends: no secret in it), secrets/
(0700: the scheduler's and servers' configs, which hold the tokens, each 0600), client/
(the builder's read-only mount: client.toml 0600, with the client token) and sockets/ (the
host bridge's Unix sockets, mounted into the builder).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from sparkbake.errors import damaged_record
from sparkbake.files import atomic_write

__all__ = ["FarmProcess", "FarmRecord", "Layout", "alive", "read", "write_private"]

CLIENT_CONFIG = "client.toml"


@dataclass(frozen=True)
class FarmProcess:
    """A process `up` started: its role, pid, loopback port (0: none), CPUs, memory share,
    the cgroup that limits its memory ("": none) and, for a node's server, the node's ssh
    host (the process here is its tunnel)."""

    role: str  # scheduler, server, bridge
    name: str
    pid: int
    port: int = 0
    cores: tuple[int, ...] = ()
    memory_gib: float = 0.0
    cgroup: str = ""
    host: str = ""


@dataclass(frozen=True)
class FarmRecord:
    scheduler_port: int
    processes: tuple[FarmProcess, ...]

    @property
    def servers(self) -> tuple[FarmProcess, ...]:
        return tuple(p for p in self.processes if p.role == "server")

    @property
    def slots(self) -> int:
        return sum(len(server.cores) for server in self.servers)

    @property
    def ports(self) -> list[int]:
        """Every port the builder dials: the scheduler's and each server's."""
        return [self.scheduler_port, *(server.port for server in self.servers)]


@dataclass(frozen=True)
class Layout:
    home: Path  # build/compile-farm

    @property
    def record(self) -> Path:
        return self.home / "farm.json"

    @property
    def secrets(self) -> Path:
        return self.home / "secrets"

    @property
    def client(self) -> Path:
        return self.home / "client"

    @property
    def sockets(self) -> Path:
        return self.home / "sockets"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    def write(self, record: FarmRecord) -> None:
        atomic_write(self.record, json.dumps(asdict(record), indent=2) + "\n")


def read(layout: Layout) -> FarmRecord | None:
    """The farm `up` recorded; None when there is none."""
    try:
        raw = json.loads(layout.record.read_text())
        return FarmRecord(int(raw["scheduler_port"]), tuple(
            FarmProcess(p["role"], p["name"], int(p["pid"]), int(p["port"]),
                        tuple(p["cores"]), float(p["memory_gib"]), str(p.get("cgroup", "")),
                        str(p.get("host", "")))
            for p in raw["processes"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise damaged_record(layout.record, ValueError(str(exc))) from exc


def write_private(path: Path, text: str) -> None:
    """A file only its owner reads (0600, in a 0700 folder): it holds a farm token."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    path.chmod(0o600)


def alive(process: FarmProcess, layout: Layout) -> bool:
    """Is pid alive and one of this farm's (its command line names the farm's folder)? A
    reused pid is not ours."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(process.pid, os.WNOHANG)  # reap our own child that has ended
    try:
        argv = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        state = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and str(layout.home).encode() in argv
