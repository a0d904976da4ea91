"""A build returns its stage runs with its outcome: what the summary and --json list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.console import display
from sparkbake.core.stages import Stage
from sparkbake.pipeline import build
from tests.conftest import Project, copy_project, settings_of


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return copy_project(tmp_path / "project")


def patch_build(project: Project) -> build.Build:
    loaded = project.config()
    plan = planning.make(loaded, loaded.tag("fixture"))
    return build.Build(loaded, plan, settings_of(HOME=str(project.root)))


def test_the_outcome_carries_the_builds_own_runs_in_order(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    console = display.Console()
    monkeypatch.setattr(display, "current", console)  # one console for both builds
    first = build.run_until(patch_build(project), Stage.PATCH)
    second = build.run_until(patch_build(project), Stage.PATCH)
    assert [(run.name, run.state) for run in first.runs] == [("fetch", "ran"), ("patch", "ran")]
    # the second build's runs only, though the console has seen both builds
    assert [(run.name, run.state) for run in second.runs] == [("fetch", "cached"),
                                                              ("patch", "cached")]
    assert len(console.runs) == 4
    assert [run.key for run in second.runs] == [patch_build(project).plan.fetch_key,
                                                patch_build(project).plan.patch_key]


def test_the_json_lists_the_stages_the_build_returned(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("patch", "fixture", "--json") == 0
    captured = capsys.readouterr()
    found = json.loads(captured.out)
    assert [(stage["name"], stage["state"]) for stage in found["stages"]] == [
        ("fetch", "ran"), ("patch", "ran")]
    summary = captured.err[captured.err.index("stage       state"):].splitlines()
    assert [line.split()[:2] for line in summary[1:3]] == [["fetch", "ran"], ["patch", "ran"]]
