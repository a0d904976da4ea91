"""A local farm server's memory limit on this machine's real cgroup hierarchy: where it is
cgroup v2 with the memory controller and writable (root), each server runs in its own group
with memory.max at its share; elsewhere `up` and `status` say that there is no limit and
why. This project's machine mounts cgroup v1 (the v2 hierarchy without the memory
controller), so here the second branch runs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.wheels import farm_cgroup
from sparkbake.wheels.farm_state import Layout, read
from tests.conftest import Project
from tests.farm_down import farm_project

pytestmark = pytest.mark.docker


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A fresh project whose farm is ended after the test, with nothing left."""
    with farm_project(tmp_path, monkeypatch) as project:
        yield project


def test_each_local_server_runs_under_its_memory_limit_or_status_says_why_not(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("compile-farm", "up", "--local", "1") == 0
    up = capsys.readouterr().err
    assert project.sparkbake("compile-farm", "status") == 0
    shown = capsys.readouterr()
    status = shown.out + shown.err
    record = read(Layout(project.root / "build" / "compile-farm"))
    assert record is not None
    server, = record.servers
    reason = farm_cgroup.unavailable()
    if reason is None:
        group = Path(server.cgroup)
        share = int(server.memory_gib * 2**30)
        assert (group / "memory.max").read_text().strip() == str(share)
        assert f"0::/{group.relative_to(farm_cgroup.ROOT)}" in \
            Path(f"/proc/{server.pid}/cgroup").read_text().splitlines()
        assert re.search(rf"^local-1 .*, memory\.max [\d.]+ GiB \({group}\)$", status,
                         re.MULTILINE), status
    else:
        assert not server.cgroup
        assert f"compile farm: local-1 runs without a memory limit ({reason})" in up
        assert re.search(rf"^local-1 .*, no memory limit \({re.escape(reason)}\)$",
                         status, re.MULTILINE), status
