"""compile-farm's usage faults: each one line and its exit code, before anything starts."""

from __future__ import annotations

import os

import pytest

from tests.conftest import Project, missing


def test_up_without_local_is_refused_in_one_line(project: Project,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("compile-farm", "up") == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "sparkbake: error: compile-farm up needs --local N (servers on this machine), --hosts "
        "or --nodes-file (a server on each node)")
    assert not (project.root / "build" / "compile-farm").exists()


@pytest.mark.parametrize("count", ["0", "65", "two"])
def test_a_server_count_out_of_range_is_a_usage_error(
        project: Project, count: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("compile-farm", "up", "--local", count) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"sparkbake: error: argument --local: {count!r} is not a count of servers (1 to 64)")


def test_status_and_down_without_a_farm(project: Project,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("compile-farm", "status") == 0
    assert project.sparkbake("compile-farm", "down") == 0
    assert capsys.readouterr().err == "compile farm: none is up\ncompile farm: none is up\n"


def test_up_without_bubblewrap_is_refused_before_anything_starts(
        project: Project, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() != 0:
        missing("root (up refuses a user first)")
    monkeypatch.setenv("PATH", str(project.root))  # a PATH without bwrap
    assert project.sparkbake("compile-farm", "up", "--local", "1") == 8
    assert capsys.readouterr().err.splitlines()[:2] == [
        "sparkbake: error: compile-farm up: bubblewrap (bwrap) is not installed",
        "  -> install it: apt-get install -y bubblewrap"]
    assert not (project.root / "build" / "compile-farm").exists()
