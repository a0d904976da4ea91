"""farm_remote: a compile farm's servers on the cluster's nodes (`compile-farm up --hosts A,B`
or `--nodes-file NODES.yaml`).

Each node gets sccache-dist as a host service over ssh (farm_plan.systemd_unit: root and
bubblewrap, CPUAffinity and MemoryMax, so that its slots follow the node's memory), its
config and unit on ssh's standard input, and the head one SSH tunnel to it
(farm_plan.remote_commands): every address stays 127.0.0.1. Every command goes through a
Runner, so the orchestration is tested with a recording one; it has not been run against a
real node. A node that ssh does not reach, or whose step fails, is named in one line and
left out; the others run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sparkbake.errors import SmokeError
from sparkbake.wheels import farm_plan
from sparkbake.wheels.farm_state import FarmProcess

__all__ = ["Farm", "NodeFailed", "Runner", "SshRunner", "node_state", "start_node", "start_nodes",
           "stop_node"]

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
WORK_DIR = "/var/lib/sparkbake-farm"  # on a node: the server's toolchains and builds
PROBE = "nproc && sed -n 's/^MemTotal: *\\([0-9]*\\) kB$/\\1/p' /proc/meminfo && uname -m"
INSTALL = (f"install -d {Path(farm_plan.REMOTE_BINARY).parent} && "
           f"cat > {farm_plan.REMOTE_BINARY}.new && chmod 0755 {farm_plan.REMOTE_BINARY}.new && "
           f"mv {farm_plan.REMOTE_BINARY}.new {farm_plan.REMOTE_BINARY}")
REMOVE = (f"systemctl stop {farm_plan.REMOTE_UNIT}; rm -f /etc/systemd/system/"
          f"{farm_plan.REMOTE_UNIT} && systemctl daemon-reload && rm -rf {farm_plan.REMOTE_DIR} "
          f"{WORK_DIR}")


class Runner(Protocol):
    def run(self, args: list[str], stdin: bytes = b"") -> tuple[int, str]:
        """Run a command to its end: its exit status and its output."""
        ...

    def spawn(self, args: list[str], log: Path) -> int:
        """Start a long-running command (a tunnel) in its own session: its pid."""
        ...


@dataclass(frozen=True)
class SshRunner:
    """The runner of `compile-farm`: ssh and its tunnels as processes of this machine."""

    spawner: Callable[[list[str], Path], int]

    def run(self, args: list[str], stdin: bytes = b"") -> tuple[int, str]:
        done = subprocess.run(args, input=stdin, capture_output=True, check=False)
        return done.returncode, (done.stdout + done.stderr).decode(errors="replace")

    def spawn(self, args: list[str], log: Path) -> int:
        return self.spawner(args, log)


class NodeFailed(Exception):
    """A node left out of the farm: its name and why, for one line."""

    def __init__(self, host: str, why: str) -> None:
        super().__init__(f"{host}: {why}")
        self.host = host
        self.why = why


@dataclass(frozen=True)
class Shape:
    cpus: int
    memory_gib: float
    machine: str  # uname -m


@dataclass(frozen=True)
class Farm:
    """What every node's server shares: the scheduler's port, the tokens, the binary for
    this machine's kind, and the job size the slots are counted with."""

    scheduler_port: int
    tokens: farm_plan.FarmTokens
    binary: bytes
    machine: str
    gib_per_job: float
    logs: Path


def start_nodes(runner: Runner, ports: dict[str, int], farm: Farm,
                say: Callable[[str], None]) -> tuple[list[FarmProcess], list[NodeFailed]]:
    """A server on each node (host -> its port), in turn; a node that fails is named in one
    line and left out. None started at all is an error."""
    started, failed = [], []
    for host, port in ports.items():
        try:
            started.append(start_node(runner, host, port, farm))
        except NodeFailed as exc:
            say(f"compile farm: {exc}; left out")
            failed.append(exc)
    if not started:
        raise SmokeError(f"compile-farm up: no node's server started ({len(failed)} tried)",
                         "check ssh to each node as root: ssh -o BatchMode=yes HOST true")
    return started, failed


def start_node(runner: Runner, host: str, port: int, farm: Farm) -> FarmProcess:
    """Install and start a node's server, then the head's tunnel to it; NodeFailed names
    the step that failed."""
    shape = probe(runner, host)
    if shape.machine != farm.machine:
        raise NodeFailed(host, f"it is {shape.machine}, this machine's sccache-dist "
                               f"{farm.machine} (docs/how-to/compile-farm.md, On the nodes)")
    slots = farm_plan.slots_for(shape.cpus, shape.memory_gib, farm.gib_per_job)
    memory = min(shape.memory_gib, slots * farm.gib_per_job)  # its MemoryMax: what slots take
    server = farm_plan.Server(host, port, tuple(range(slots)), round(memory, 1))
    ssh(runner, host, INSTALL, farm.binary, "installing sccache-dist")
    config, unit, restart, tunnel = farm_plan.remote_commands(host, server, farm.scheduler_port)
    inputs = [farm_plan.server_config(server, farm.scheduler_port, farm.tokens, WORK_DIR),
              farm_plan.systemd_unit(server), ""]
    for command, data, step in zip((config, unit, restart), inputs,
                                   ("its config", "its unit", "starting the service"),
                                   strict=True):
        ssh(runner, host, command[-1], data.encode(), step)
    log = farm.logs / f"tunnel-{host}.log"
    pid = runner.spawn([*tunnel[:-1], *SSH_OPTIONS, "-E", str(log), tunnel[-1]], log)
    return FarmProcess("server", host, pid, port, server.cores, server.memory_gib, host=host)


def probe(runner: Runner, host: str) -> Shape:
    """The node's CPUs, memory and machine, as it reports them over ssh."""
    out = ssh(runner, host, PROBE, b"", "reaching it over ssh")
    try:
        cpus, kib, machine = out.split()
        return Shape(int(cpus), int(kib) / 2**20, machine)
    except ValueError as exc:
        raise NodeFailed(host, f"its CPUs and memory could not be read ({out.strip()!r})") \
            from exc


def ssh(runner: Runner, host: str, command: str, stdin: bytes, step: str) -> str:
    """One command on the node; its output, or NodeFailed with ssh's last line."""
    status, out = runner.run(["ssh", *SSH_OPTIONS, host, command], stdin)
    if status != 0:
        last = (out.strip().splitlines() or [f"exit {status}"])[-1][:200]
        raise NodeFailed(host, f"{step} failed: {last}")
    return out


def stop_node(runner: Runner, host: str) -> None:
    """The node's service stopped and removed, with its config (it holds its token)."""
    ssh(runner, host, REMOVE, b"", "removing its server")


def node_state(runner: Runner, host: str) -> str:
    """What systemd says of the node's service (active, inactive, failed, ...), or why it
    could not be asked."""
    status, out = runner.run(["ssh", *SSH_OPTIONS, host, "systemctl", "is-active",
                              farm_plan.REMOTE_UNIT])
    state = (out.strip().splitlines() or [""])[-1]
    return f"service {state}" if status in (0, 3) and state else \
        f"not reached ({state or f'exit {status}'})"
