"""compile-farm up|status|down: the handler (docs/how-to/compile-farm.md)."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from sparkbake.errors import EngineError, UsageError
from sparkbake.run import Run
from sparkbake.wheels import farm_local
from sparkbake.wheels.farm_state import FarmRecord, Layout, alive, read

__all__ = ["compile_farm", "layout_of", "memory_gib"]


def layout_of(build_dir: Path) -> Layout:
    return Layout(build_dir / "compile-farm")


def compile_farm(args: argparse.Namespace, run: Run) -> int:
    layout = layout_of(run.config.build_dir)
    if args.action == "up":
        return _up(args, run, layout)
    record = read(layout)
    if record is None:
        run.console.result("compile farm: none is up")
        return 0
    return _down(run, layout, record) if args.action == "down" else \
        _status(run, layout, record)


def _up(args: argparse.Namespace, run: Run, layout: Layout) -> int:
    if not args.local:
        raise UsageError("compile-farm up needs --local N (servers on this machine)",
                         "run `sparkbake compile-farm up --local 2`; a farm on the cluster's "
                         "nodes is not started by this command yet (docs/how-to/"
                         "compile-farm.md, On the nodes)")
    record = farm_local.start(layout, args.local, memory_gib=memory_gib(),
                              gib_per_job=run.settings.gib_per_job,
                              cache_dir=run.settings.cache_dir, console=run.console)
    for line in _lines(record, layout):
        run.console.result(line)
    run.console.result(f"compile farm up: {len(record.servers)} servers, {record.slots} slots; "
                       "builds use it until `sparkbake compile-farm down`")
    return 0


def _down(run: Run, layout: Layout, record: FarmRecord) -> int:
    left = farm_local.stop(layout, run.console)
    if left:
        raise EngineError("compile-farm down: still running after SIGKILL: "
                          + ", ".join(f"{p.name} (pid {p.pid})" for p in left),
                          "end them by their pid and run down again")
    run.console.result(f"compile farm down: {len(record.processes)} processes ended")
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
                 f"{process.memory_gib:g} GiB)") if process.role == "server" else ""
        lines.append(f"{process.name}{where}: pid {process.pid} {state}{slots}")
    return lines


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
