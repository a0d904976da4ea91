"""A build returns its stage runs with its outcome (what the summary and --json list), and
fetches each remote patch once."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.config.settings import Settings
from sparkbake.console import display
from sparkbake.core.stages import Stage
from sparkbake.fetch import remote_patches
from sparkbake.fetch.remote_patches import RemotePatch
from sparkbake.pipeline import build, stage_commands
from sparkbake.run import Run
from tests.conftest import Project, copy_project, plain_console, settings_of


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return copy_project(tmp_path / "project")


def patch_build(project: Project, console: display.Console | None = None) -> build.Build:
    loaded = project.config()
    plan = planning.make(loaded, loaded.tag("fixture"))
    return build.Build(Run.of(loaded, settings_of(HOME=str(project.root)),
                              console or plain_console()), plan)


def test_the_outcome_carries_the_builds_own_runs_in_order(project: Project) -> None:
    console = plain_console()  # one console for both builds
    first = build.run_stages(patch_build(project, console), Stage.PATCH)
    second = build.run_stages(patch_build(project, console), Stage.PATCH)
    assert [(run.name, run.state) for run in first.runs] == [("fetch", "ran"), ("patch", "ran")]
    # the second build's runs only, though the console has seen both builds
    assert [(run.name, run.state) for run in second.runs] == [("fetch", "cached"),
                                                              ("patch", "cached")]
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


REMOTE_PATCH = """\
Subject: [PATCH] tinykern: say which pull request this came from

diff --git a/tinykern/upstream_pr.py b/tinykern/upstream_pr.py
new file mode 100644
--- /dev/null
+++ b/tinykern/upstream_pr.py
@@ -0,0 +1 @@
+PULL_REQUEST = 4242
"""
URL = "http://127.0.0.1:9/pr/4242.patch"  # never reached: the download is a fake


def test_a_build_fetches_each_remote_patch_once(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    listing = project.root / "patches" / "tinykern" / "series"
    pin = hashlib.sha256(REMOTE_PATCH.encode()).hexdigest()
    listing.write_text(listing.read_text() + f"{URL} sha256={pin}\n")
    downloads: list[str] = []
    fetches: list[int] = []
    fetch = remote_patches.fetch

    def download(url: str, dest: Path, *_: object, **__: object) -> None:
        downloads.append(url)
        dest.write_text(REMOTE_PATCH)

    def counted(remote: tuple[RemotePatch, ...], settings: Settings,
                console: display.Console) -> int:
        fetches.append(len(remote))
        return fetch(remote, settings, console)

    monkeypatch.setattr(remote_patches, "download", download)
    monkeypatch.setattr(remote_patches, "fetch", counted)
    loaded, settings = project.config(), settings_of(HOME=str(project.root))
    unfetched = planning.make(loaded, loaded.tag("fixture"))
    assert stage_commands.run_until(Run.of(loaded, settings, plain_console()),
                                    loaded.tag("fixture"), Stage.PATCH) == 0
    assert (downloads, fetches) == ([URL], [1])
    # the plan was made again once fetched: the patch touches Python only
    assert project.plan().kernel_key != unfetched.kernel_key
    patched = project.root / "build" / "patched" / project.plan().patch_key / "tree"
    assert (patched / "tinykern" / "upstream_pr.py").is_file()
    assert stage_commands.run_until(Run.of(loaded, settings, plain_console()),
                                    loaded.tag("fixture"), Stage.PATCH) == 0
    assert (downloads, fetches) == ([URL], [1, 1])  # cached: checked once, not downloaded
