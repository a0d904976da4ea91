"""farm_client: what a builder gets when a compile farm is up (`compile-farm up`).

The builder keeps `--network none`. It gets the host bridge's socket folder, the client
config (read-only: it holds the client token, so it is mounted, never put in the image, its
environment or a record) and the farm's scripts (images/farm_*.py, read-only), and starts
from images/farm_builder.py: its bridge, one test compile through the farm, the build.
Whether a unit ran on the farm enters no key: a remote object is the bytes a local compile
makes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbake import resources
from sparkbake.console.display import Console
from sparkbake.files import scratch_dir
from sparkbake.wheels.farm_state import FarmRecord, Layout, alive, read
from sparkbake.wheels.report import Jobs

__all__ = ["FarmUse", "container_args", "fallback_line", "in_use", "remote_count",
           "say_where_compiled", "with_farm_slots"]

SCRIPTS = {"farm_builder.py": "farm_builder.py", "farm_bridge.py": "farm_bridge.py",
           "farm_sccache.py": "sccache"}  # images/ name -> name in the builder's /farm/bin
ENTRY = ["/opt/builder/bin/python", "-I", "/farm/bin/farm_builder.py"]
FALLBACK = re.compile(r"^compile farm: .*; compiling here$", re.MULTILINE)


@dataclass(frozen=True)
class FarmUse:
    layout: Layout
    record: FarmRecord


def in_use(build_dir: Path, compile_cache: str, machine: str, *,
           console: Console) -> FarmUse | None:
    """The farm `compile-farm up` started for this project, if every process of it runs;
    none without sccache (SPARKBAKE_COMPILE_CACHE=off), nor for a builder of another
    machine than this one's (emulated: its compilers would not run on the servers)."""
    layout = Layout(build_dir / "compile-farm")
    record = read(layout)
    if record is None or compile_cache == "off":
        return None
    if machine != os.uname().machine:
        console.notice(f"compile farm: the builder is {machine} under emulation, the farm's "
                       f"servers {os.uname().machine}; compiling here")
        return None
    down = [p.name for p in record.processes if not alive(p, layout)]
    if down:
        console.notice(f"compile farm: {', '.join(down)} not running; compiling here "
                       "(`sparkbake compile-farm down`, then up again)")
        return None
    return FarmUse(layout, record)


def with_farm_slots(jobs: Jobs, farm: FarmUse | None) -> Jobs:
    """MAX_JOBS counts the farm's slots too; the builder's own CPU and memory limits stay
    the local ones. A job count the user fixed stays as it is."""
    if farm is None or jobs.reason == "SPARKBAKE_MAX_JOBS":
        return jobs
    slots = farm.record.slots
    return Jobs(jobs.max_jobs + slots, jobs.nvcc_threads,
                f"{jobs.reason}; + {slots} compile farm slots")


@contextlib.contextmanager
def container_args(farm: FarmUse | None, scratch: Path) -> Iterator[dict[str, Any]]:
    """The builder's mounts, environment and entry point with the farm; none without."""
    if farm is None:
        yield {}
        return
    with scratch_dir(scratch / "contexts", "farm-bin.") as bin_dir:
        for name, target in SCRIPTS.items():
            shutil.copy(resources.path(name), bin_dir / target)
            (bin_dir / target).chmod(0o755)
        bin_dir.chmod(0o755)
        yield {"volumes": {
            str(farm.layout.client / "client.toml"): {"bind": "/farm/client.toml", "mode": "ro"},
            str(bin_dir): {"bind": "/farm/bin", "mode": "ro"},
            str(farm.layout.sockets): {"bind": "/farm-sockets", "mode": "rw"}},
            "environment": {"SCCACHE_CONF": "/farm/client.toml"}, "entrypoint": ENTRY}


def say_where_compiled(farm: FarmUse | None, output: str, built: dict[str, Any], *,
                       console: Console) -> None:
    """Why the builder compiled here (one line), and how many compiles ran on the farm."""
    if farm is None:
        return
    fallback = fallback_line(output)
    if fallback:
        console.notice(fallback)
    remote, compiled = remote_count((built.get("sccache") or {}).get("stats"))
    console.notice(f"compiled remotely: {remote} of {compiled}")


def remote_count(stats: dict[str, Any] | None) -> tuple[int, int]:
    """(units compiled on the farm, units compiled): sccache's distributed compiles against
    the compiles it ran, here or there. nvcc is sent in steps: its cudafe++, cicc, ptxas and
    host compiler each count; the outer nvcc (preprocessing, fatbinary) runs here."""
    raw = (stats or {}).get("stats", {})
    remote = sum(int(n) for n in (raw.get("dist_compiles") or {}).values())
    return remote, int(raw.get("compilations", 0))


def fallback_line(output: str) -> str | None:
    """The builder's one line saying why it compiled here instead of on the farm."""
    found = FALLBACK.search(output)
    return found.group(0) if found else None
