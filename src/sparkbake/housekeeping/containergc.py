"""The engine's containers left by sparkbake runs that ended without removing them (`gc`).

Every container sparkbake makes carries the run that made it (`dev.sparkbake.run`,
HOST:PID). A run killed outright (`kill -9`, a lost machine) cannot remove its containers;
gc removes those whose run is over: made on this host by a process that no longer runs.
Those of a live run, or of a run on another host using the same engine, stay.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from sparkbake.housekeeping.sweep import Item, Kept
from sparkbake.oci.docker_engine import RUN_LABEL, Client

__all__ = ["leftover_items", "run_is_over"]


def leftover_items(client: Client) -> list[Item]:
    """An item per container of a sparkbake run; refused where its run may still need it."""
    boxes = client.containers.list(all=True, filters={"label": RUN_LABEL})
    return sorted((_item(box) for box in boxes), key=lambda item: item.label)


def run_is_over(run: str, host: str | None = None) -> bool | None:
    """Whether the run HOST:PID has ended: None when it ran on another host (unknowable)."""
    made_on, _, pid = run.rpartition(":")
    if made_on != (host or socket.gethostname()) or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process has that pid: it runs
        return False
    return False


def _item(box: Any) -> Item:
    run = str((box.labels or {}).get(RUN_LABEL, ""))
    over = run_is_over(run)
    label = f"container {box.short_id} ({box.status}, of run {run})"
    if over is None:
        refused = "made by a run on another host: `sparkbake gc` there removes it"
    else:
        refused = "" if over else "its run is still going"
    return Item(label, 0, "left by a run that ended without removing it",
                lambda: _remove(box), refused)


def _remove(box: Any) -> None:
    import docker.errors  # here: the Docker SDK is slow to import and most commands remove nothing

    try:
        box.remove(force=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        raise Kept(f"the engine keeps it: {exc.explanation or exc}") from exc
