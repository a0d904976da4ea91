"""farm_local: a compile farm of processes on this machine (`compile-farm up --local N`).

A scheduler, N sccache-dist servers (root, bubblewrap, the overlay builder; each bound to
its share of this machine's CPUs, so its slots follow its share of the memory, and held to
that share by a cgroup v2 memory.max where the machine allows it: farm_cgroup) and the host
side of the builder's bridge (images/farm_bridge.py), all on loopback. `up` records their
pids; `down` ends each one it recorded (its process group: a server's sandboxes too) and
checks that none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from sparkbake import resources
from sparkbake.config.settings import child_environment
from sparkbake.console.display import Console
from sparkbake.errors import EngineError, UsageError
from sparkbake.wheels import farm_binary, farm_cgroup, farm_plan, farm_remote
from sparkbake.wheels.farm_remote import NodeFailed
from sparkbake.wheels.farm_state import FarmProcess, FarmRecord, Layout, alive, read, write_private

__all__ = ["scheduler_status", "start", "start_on_nodes", "stop"]

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
Children = dict[int, subprocess.Popen[bytes]]  # the processes this run started, by pid


def start(layout: Layout, count: int, *, memory_gib: float, gib_per_job: float,
          cache_dir: Path, console: Console) -> FarmRecord:
    """Start the scheduler, count servers and the bridge; record them; wait until the
    scheduler counts every server. Anything started is ended again if one part fails."""
    _refuse_second(layout)
    _require_root_and_bwrap()
    binary = farm_binary.sccache_dist(cache_dir, console=console)
    ports = _free_ports(count + 1)
    servers = _servers(ports[1:], memory_gib, gib_per_job)

    def local_servers(tokens: farm_plan.FarmTokens, children: Children) -> list[FarmProcess]:
        return [_server(layout, binary, server, ports[0], tokens, console, children)
                for server in servers]
    return _start(layout, binary, ports, local_servers, console)


def start_on_nodes(layout: Layout, hosts: list[str], *, gib_per_job: float, cache_dir: Path,
                   console: Console) -> tuple[FarmRecord, list[NodeFailed]]:
    """The scheduler and bridge here, a server on each node that ssh reaches (farm_remote);
    the nodes left out, each named in one line."""
    _refuse_second(layout)
    binary = farm_binary.sccache_dist(cache_dir, console=console)
    ports = _free_ports(len(hosts) + 1)
    failed: list[NodeFailed] = []

    def node_servers(tokens: farm_plan.FarmTokens, children: Children) -> list[FarmProcess]:
        runner = farm_remote.SshRunner(lambda args, log: _spawn(args, log, console, children))
        farm = farm_remote.Farm(ports[0], tokens, binary.read_bytes(), os.uname().machine,
                                gib_per_job, layout.logs)
        started, missed = farm_remote.start_nodes(runner, dict(zip(hosts, ports[1:], strict=True)),
                                                  farm, console.notice)
        failed.extend(missed)
        return started
    return _start(layout, binary, ports, node_servers, console), failed


ServerStarter = Callable[[farm_plan.FarmTokens, Children], list[FarmProcess]]


def _start(layout: Layout, binary: Path, ports: list[int], servers: ServerStarter,
           console: Console) -> FarmRecord:
    tokens = farm_plan.make_tokens()
    started: list[FarmProcess] = []
    children: Children = {}
    try:
        started.append(_scheduler(layout, binary, ports[0], tokens, console, children))
        started += servers(tokens, children)
        started.append(_bridge(layout, ports, console, children))
        record = FarmRecord(ports[0], tuple(started))
        layout.write(record)
        write_private(layout.client / "client.toml", farm_plan.client_config(ports[0], tokens))
        _wait_for_servers(layout, record, tokens.client, children)
    except BaseException:
        _end(started, layout, console)
        _end_unrecorded(children, started)
        farm_cgroup.remove_groups([p.cgroup for p in started])
        _stop_nodes(started)
        layout.record.unlink(missing_ok=True)
        for folder in (layout.secrets, layout.client):  # the tokens go with the farm
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return record


def _refuse_second(layout: Layout) -> None:
    record = read(layout)
    if record is not None and any(alive(p, layout) for p in record.processes):
        raise UsageError(f"a compile farm is already up ({layout.record}: scheduler on "
                         f"127.0.0.1:{record.scheduler_port})",
                         "run `sparkbake compile-farm down` first")


def _require_root_and_bwrap() -> None:
    if os.geteuid() != 0:
        raise EngineError("compile-farm up: sccache-dist's servers run as root (bubblewrap's "
                          "overlay sandbox), and this is not root",
                          "run it as root, or on the nodes as a service (--hosts)")
    if shutil.which("bwrap") is None:
        raise EngineError("compile-farm up: bubblewrap (bwrap) is not installed",
                          "install it: apt-get install -y bubblewrap")


def _servers(ports: list[int], memory_gib: float, gib_per_job: float) -> list[farm_plan.Server]:
    """Each server's CPUs: its share of this machine's, as many as its share of the memory
    gives slots (sccache takes one slot per CPU it may use)."""
    shares = farm_plan.split_cores(tuple(sorted(os.sched_getaffinity(0))), len(ports))
    per_server = memory_gib / len(ports)
    return [farm_plan.Server(f"local-{i + 1}", port,
                             cores[:farm_plan.slots_for(len(cores), per_server, gib_per_job)],
                             round(per_server, 1))
            for i, (port, cores) in enumerate(zip(ports, shares, strict=True))]


def _free_ports(count: int) -> list[int]:
    """Ports of 127.0.0.1 free now (the kernel's picks, all held until all are chosen)."""
    held = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def _scheduler(layout: Layout, binary: Path, port: int, tokens: farm_plan.FarmTokens,
               console: Console, children: Children) -> FarmProcess:
    config = layout.secrets / "scheduler.toml"
    write_private(config, farm_plan.scheduler_config(port, tokens))
    pid = _spawn([str(binary), "scheduler", "--config", str(config)],
                 layout.logs / "scheduler.log", console, children)
    return FarmProcess("scheduler", "scheduler", pid, port)


def _server(layout: Layout, binary: Path, server: farm_plan.Server, scheduler_port: int,
            tokens: farm_plan.FarmTokens, console: Console,
            children: Children) -> FarmProcess:
    folder = layout.home / "servers" / server.name
    (folder / "build").mkdir(parents=True, exist_ok=True)
    config = layout.secrets / f"{server.name}.toml"
    write_private(config, farm_plan.server_config(server, scheduler_port, tokens, str(folder),
                                                  shutil.which("bwrap") or "/usr/bin/bwrap"))
    cores = ",".join(map(str, server.cores))
    group = _memory_group(server, scheduler_port, console)
    command = ["taskset", "-c", cores, str(binary), "server", "--config", str(config)]
    pid = _spawn(farm_cgroup.joined(group, command), layout.logs / f"{server.name}.log",
                 console, children)
    return FarmProcess("server", server.name, pid, server.port, server.cores, server.memory_gib,
                       str(group or ""))


def _memory_group(server: farm_plan.Server, scheduler_port: int,
                  console: Console) -> Path | None:
    """The server's cgroup with its memory.max; none where the machine gives none (a
    notice then, and `status` says why)."""
    reason = farm_cgroup.unavailable()
    if reason is None:
        try:
            return farm_cgroup.make_group(farm_cgroup.ROOT, str(scheduler_port), server.name,
                                          server.memory_gib)
        except OSError as exc:
            reason = f"{exc.filename}: {exc.strerror}"
    console.notice(f"compile farm: {server.name} runs without a memory limit ({reason})")
    return None


def _bridge(layout: Layout, ports: list[int], console: Console,
            children: Children) -> FarmProcess:
    layout.sockets.mkdir(parents=True, exist_ok=True)
    pid = _spawn([sys.executable, "-I", str(resources.path("farm_bridge.py")), "host",
                  str(layout.sockets), *map(str, ports)],
                 layout.logs / "bridge.log", console, children)
    return FarmProcess("bridge", "bridge", pid)


def _spawn(args: list[str], log: Path, console: Console, children: Children) -> int:
    """Start a process of the farm in its own session; its pid. Its Popen is kept so that
    `up` sees it end (a process just started may still show its parent's command line)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    console.detail(f"+ {' '.join(args)} >{log} 2>&1 &")
    with log.open("ab") as out:
        child = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True,
                                 env=child_environment(console.env, {"SCCACHE_LOG": "info",
                                                                     "SCCACHE_NO_DAEMON": "1"}))
    children[child.pid] = child
    return child.pid


def scheduler_status(port: int, client_token: str, timeout: float = 2.0) -> dict[str, int]:
    """The scheduler's own count: num_servers, num_cpus (slots), in_progress (jobs)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/scheduler/status",
                                     headers={"Authorization": f"Bearer {client_token}",
                                              "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        status: dict[str, int] = json.loads(answer.read())
    return status


def _wait_for_servers(layout: Layout, record: FarmRecord, client_token: str,
                      children: Children) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    counted = 0
    while time.monotonic() < deadline:
        dead = [p for p in record.processes
                if p.pid in children and children[p.pid].poll() is not None]
        if dead:
            log = layout.logs / f"{dead[0].name}.log"
            raise EngineError(f"compile-farm up: {dead[0].name} ended as it started "
                              f"(log: {log})", f"last log line: {_last_line(log)}")
        try:
            counted = scheduler_status(record.scheduler_port, client_token)["num_servers"]
        except (OSError, ValueError, KeyError):
            counted = 0
        if counted == len(record.servers):
            return
        time.sleep(0.3)
    raise EngineError(f"compile-farm up: the scheduler counts {counted} of "
                      f"{len(record.servers)} servers after {START_TIMEOUT:.0f} s",
                      f"see the logs in {layout.logs}")


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return lines[-1][:240] if lines else "(empty log)"


def stop(layout: Layout, console: Console) -> tuple[list[FarmProcess], list[NodeFailed]]:
    """End every process the record names (servers first) and each node's service; the
    processes still alive after SIGKILL, and the nodes not reached. The record, configs and
    sockets go; the logs stay."""
    record = read(layout)
    if record is None:
        return [], []
    failed = _stop_nodes(list(record.servers))
    left = _end(list(record.processes), layout, console)
    if not left:
        farm_cgroup.remove_groups([p.cgroup for p in record.servers])
        for folder in (layout.secrets, layout.client, layout.sockets, layout.home / "servers"):
            shutil.rmtree(folder, ignore_errors=True)
        layout.record.unlink(missing_ok=True)
    return left, failed


def _end_unrecorded(children: Children, recorded: list[FarmProcess]) -> None:
    """Kill what started before the failed part recorded it (a server list cut short)."""
    for pid, child in children.items():
        if pid not in {p.pid for p in recorded} and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            child.wait()


def _stop_nodes(processes: list[FarmProcess]) -> list[NodeFailed]:
    """Each node's service stopped and removed; the nodes not reached."""
    runner = farm_remote.SshRunner(lambda args, log: 0)  # stopping starts nothing
    failed = []
    for host in [p.host for p in processes if p.host]:
        try:
            farm_remote.stop_node(runner, host)
        except NodeFailed as exc:
            failed.append(exc)
    return failed


def _end(processes: list[FarmProcess], layout: Layout, console: Console) -> list[FarmProcess]:
    order = sorted(processes, key=lambda p: ("server", "scheduler", "bridge").index(p.role))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        running = [p for p in order if alive(p, layout)]
        for process in running:
            console.detail(f"+ kill -{sig.name} -{process.pid}  ({process.name})")
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + STOP_TIMEOUT
        while any(alive(p, layout) for p in running) and time.monotonic() < deadline:
            time.sleep(0.1)
    return [p for p in order if alive(p, layout)]
