"""`compile-farm up --hosts` for real, as far as this machine goes: no node is reachable from
it, so every node is left out, each in one line, and up ends with exit 6 and nothing left
running (the scheduler it started here ended again). The path on reachable nodes is
unit-tested with a recording runner (tests/unit/test_farm_remote.py)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Project
from tests.farm_down import farm_project

pytestmark = pytest.mark.docker

NODES = ("sbf2-node-1.invalid", "sbf2-node-2.invalid")  # names no resolver answers


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A fresh project whose farm is ended after the test, with nothing left."""
    if shutil.which("ssh") is None:
        pytest.fail("ssh is missing: run scripts/host-setup")
    with farm_project(tmp_path, monkeypatch) as project:
        yield project


def test_nodes_not_reached_are_named_and_up_is_exit_6_with_nothing_running(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("compile-farm", "up", "--hosts", ",".join(NODES)) == 6
    err = capsys.readouterr().err
    for node in NODES:
        assert re.search(rf"^compile farm: {re.escape(node)}: reaching it over ssh failed: "
                         r"ssh: .*; left out$", err, re.MULTILINE), err
    assert "sparkbake: error: compile-farm up: no node's server started (2 tried)" in err
    farm = project.root / "build" / "compile-farm"
    assert sorted(path.name for path in farm.iterdir()) == ["logs"]  # no token left either
    assert project.sparkbake("compile-farm", "status") == 0
    assert capsys.readouterr().err == "compile farm: none is up\n"


def test_a_farm_of_nodes_and_one_here_are_not_asked_for_together(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("compile-farm", "up", "--local", "1", "--hosts", NODES[0]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "sparkbake: error: compile-farm: --local and --hosts name two farms")
