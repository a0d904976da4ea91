"""farm_cgroup: a memory limit for each server of a local farm (`compile-farm up --local N`).

sccache-dist takes one slot per CPU it may use, so a server's CPU affinity sets its slots;
its memory is bounded by a cgroup v2 child group with `memory.max`, where /sys/fs/cgroup is
the unified hierarchy with the memory controller and this process may write there (root).
Elsewhere (cgroup v1, a read-only mount, not root) the servers run without one, and `up` and
`status` say why. A server joins its group itself before it starts (`sh -c 'echo $$ >
cgroup.procs; exec ...'`), so its sandboxes are in it from the first job.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["ROOT", "joined", "limit_line", "make_group", "remove_groups", "unavailable"]

ROOT = Path("/sys/fs/cgroup")
JOIN = 'echo $$ > "$0/cgroup.procs" && exec "$@"'  # sh -c JOIN GROUP COMMAND...


def unavailable(root: Path = ROOT) -> str | None:
    """Why no server here gets a memory limit; None when they can."""
    controllers = root / "cgroup.controllers"
    if not controllers.is_file():
        return f"{root} is not a cgroup v2 hierarchy"
    if "memory" not in controllers.read_text().split():
        return f"the memory controller is not available in {root}"
    if not os.access(root / "cgroup.subtree_control", os.W_OK) or not os.access(root, os.W_OK):
        return f"{root} is not writable here (it needs root)"
    return None


def make_group(root: Path, farm: str, server: str, memory_gib: float) -> Path:
    """The server's group, ROOT/sparkbake-farm-FARM/SERVER, with memory.max set."""
    parent = root / f"sparkbake-farm-{farm}"
    parent.mkdir(exist_ok=True)
    _enable_memory(root)
    _enable_memory(parent)
    group = parent / server
    group.mkdir(exist_ok=True)
    (group / "memory.max").write_text(f"{int(memory_gib * 2**30)}\n")
    return group


def _enable_memory(group: Path) -> None:
    """The memory controller for the group's children (cgroup.subtree_control)."""
    control = group / "cgroup.subtree_control"
    if "memory" not in control.read_text().split():
        control.write_text("+memory\n")


def joined(group: Path | None, command: list[str]) -> list[str]:
    """The command, run in the group when there is one."""
    return ["sh", "-c", JOIN, str(group), *command] if group is not None else command


def limit_line(group: str) -> str:
    """What a server's status says of its memory: the limit its group holds."""
    if not group:
        return f"no memory limit ({unavailable() or 'its group could not be made, see up'})"
    try:
        limit = (Path(group) / "memory.max").read_text().strip()
    except OSError:
        return f"memory limit gone ({group} is missing)"
    shown = limit if limit == "max" else f"{int(limit) / 2**30:.1f} GiB"
    return f"memory.max {shown} ({group})"


def remove_groups(groups: list[str]) -> None:
    """The servers' groups and their farm's parent, once their processes have ended."""
    for group in map(Path, filter(None, groups)):
        with contextlib.suppress(OSError):
            group.rmdir()
        with contextlib.suppress(OSError):
            group.parent.rmdir()
