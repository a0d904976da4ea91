"""compile-farm up|status|down: the handler (docs/how-to/compile-farm.md)."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from sparkbake.errors import EngineError, SmokeError, UsageError
from sparkbake.run import Run
from sparkbake.wheels import farm_cgroup, farm_local, farm_remote
from sparkbake.wheels.farm_state import FarmProcess, FarmRecord, Layout, alive, read

__all__ = ["compile_farm", "layout_of", "memory_gib"]


def layout_of(build_dir: Path) -> Layout:
    return Layout(build_dir / "compile-farm")


def compile_farm(args: argparse.Namespace, run: Run, hosts: list[str] | None = None) -> int:
    """up|status|down; hosts: the nodes' ssh hosts of --hosts or --nodes-file (read by
    nodes.farm_hosts, which calls this)."""
    layout = layout_of(run.config.build_dir)
    if args.action == "up":
        return _up_on_nodes(run, layout, hosts) if hosts else _up(args, run, layout)
    record = read(layout)
    if record is None:
        run.console.result("compile farm: none is up")
        return 0
    return _down(run, layout, record) if args.action == "down" else \
        _status(run, layout, record)


def _up(args: argparse.Namespace, run: Run, layout: Layout) -> int:
    if not args.local:
        raise UsageError("compile-farm up needs --local N (servers on this machine), --hosts "
                         "or --nodes-file (a server on each node)",
                         "run `sparkbake compile-farm up --local 2` (docs/how-to/"
                         "compile-farm.md)")
    record = farm_local.start(layout, args.local, memory_gib=memory_gib(),
                              gib_per_job=run.settings.gib_per_job,
                              cache_dir=run.settings.cache_dir, console=run.console)
    _say_up(run, layout, record)
    return 0


def _up_on_nodes(run: Run, layout: Layout, hosts: list[str]) -> int:
    record, failed = farm_local.start_on_nodes(layout, hosts,
                                               gib_per_job=run.settings.gib_per_job,
                                               cache_dir=run.settings.cache_dir,
                                               console=run.console)
    _say_up(run, layout, record)
    _left_out(failed, "up", "check ssh to it as root, then `sparkbake compile-farm down` and "
                            "up again")
    return 0


def _say_up(run: Run, layout: Layout, record: FarmRecord) -> None:
    for line in _lines(record, layout):
        run.console.result(line)
    run.console.result(f"compile farm up: {len(record.servers)} servers, {record.slots} slots; "
                       "builds use it until `sparkbake compile-farm down`")


def _left_out(failed: list[farm_remote.NodeFailed], action: str, remedy: str) -> None:
    """Exit 6 naming the nodes an action did not reach (each was named in its line)."""
    if failed:
        raise SmokeError(f"compile-farm {action}: {len(failed)} node(s) not reached: "
                         f"{', '.join(exc.host for exc in failed)}", remedy)


def _down(run: Run, layout: Layout, record: FarmRecord) -> int:
    left, failed = farm_local.stop(layout, run.console)
    if left:
        raise EngineError("compile-farm down: still running after SIGKILL: "
                          + ", ".join(f"{p.name} (pid {p.pid})" for p in left),
                          "end them by their pid and run down again")
    for exc in failed:
        run.console.notice(f"compile farm: {exc}")
    run.console.result(f"compile farm down: {len(record.processes)} processes ended")
    _left_out(failed, "down", "stop its service by hand: ssh HOST systemctl stop "
                              "sparkbake-farm-server (its config under /etc/sparkbake-farm "
                              "holds the farm's token: remove it)")
    return 0


def _status(run: Run, layout: Layout, record: FarmRecord) -> int:
    for line in _lines(record, layout):
        run.console.result(line)
    try:
        counted = farm_local.scheduler_status(record.scheduler_port, client_token(layout))
    except (OSError, ValueError, KeyError) as exc:
        raise EngineError(f"compile farm: the scheduler on 127.0.0.1:{record.scheduler_port} "
                          f"does not answer ({exc})",
                          "run `sparkbake compile-farm down`, then up again") from exc
    run.console.result(f"scheduler: {counted['num_servers']} servers, {counted['num_cpus']} "
                       f"slots, {counted['in_progress']} jobs running")
    return 0 if counted["num_servers"] == len(record.servers) else EngineError.exit_code


def _lines(record: FarmRecord, layout: Layout) -> list[str]:
    lines = []
    for process in record.processes:
        state = "running" if alive(process, layout) else "not running"
        where = f" 127.0.0.1:{process.port}" if process.port else ""
        slots = (f", {len(process.cores)} slots (CPUs {','.join(map(str, process.cores))}, "
                 f"{process.memory_gib:g} GiB), {_limit(process)}"
                 ) if process.role == "server" else ""
        lines.append(f"{process.name}{where}: pid {process.pid} {state}{slots}")
    return lines


def _limit(server: FarmProcess) -> str:
    """A local server's memory limit; a node's service state (its unit sets MemoryMax)."""
    if not server.host:
        return farm_cgroup.limit_line(server.cgroup)
    state = farm_remote.node_state(farm_remote.SshRunner(lambda args, log: 0), server.host)
    return f"MemoryMax {server.memory_gib:g} GiB, {state}"


def client_token(layout: Layout) -> str:
    token: str = tomllib.loads((layout.client / "client.toml").read_text())["dist"]["auth"][
        "token"]
    return token


def memory_gib(meminfo: Path = Path("/proc/meminfo")) -> float:
    """This machine's memory, as the kernel counts it."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0
