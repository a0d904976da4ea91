"""A compile farm test's end: `compile-farm down`, then no process of the farm, nor a local
server's cgroup, left (any process left is killed by its pid, so that no test leaves one
running, and the test fails)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.wheels.farm_state import Layout, alive, read
from tests.conftest import Project, copy_project


@contextlib.contextmanager
def farm_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A fresh project with its own host cache; afterwards its farm down, nothing left."""
    monkeypatch.setenv("SPARKBAKE_CACHE", str(tmp_path / "host-cache"))
    project = copy_project(tmp_path / "project")
    try:
        yield project
    finally:
        down_leaving_nothing(project)


def down_leaving_nothing(project: Project) -> None:
    layout = Layout(project.root / "build" / "compile-farm")
    record = read(layout)
    project.sparkbake("compile-farm", "down")
    left = [p for p in record.processes if alive(p, layout)] if record else []
    for process in left:
        os.killpg(process.pid, signal.SIGKILL)
    assert not left, f"compile-farm down left {left}"
    groups = [Path(p.cgroup) for p in record.servers if p.cgroup] if record else []
    assert not [group for group in groups if group.exists()], "a server's cgroup was left"
