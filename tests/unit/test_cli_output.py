"""What `sparkbake patch` shows by default, with -v, -q and --json (git runs; no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from tests.conftest import one_patch_project

TAG = "production-1.0-demo"
PATCH = """\
Subject: [PATCH] demo: say hello

diff --git a/demo.py b/demo.py
--- a/demo.py
+++ b/demo.py
@@ -1 +1,2 @@
 print('demo')
+print('hello')
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return one_patch_project(tmp_path, PATCH, f"  {TAG}:\n    upstream: tree\n    series: [demo]\n")


def patch(config_file: Path, *options: str) -> int:
    return main(["--config", str(config_file), "patch", TAG, *options])


def test_a_stage_command_shows_a_line_per_stage_then_the_table_and_result(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert patch(config_file) == 0
    shown = capsys.readouterr()
    lines = shown.err.splitlines()
    assert [line.split()[:2] for line in lines[:2]] == [["fetch", "ran"], ["patch", "ran"]]
    assert lines[2].split() == ["stage", "state", "time", "key"]
    assert lines[5].startswith("patched tree: ") and len(lines) == 6
    assert shown.out == ""  # stdout is for --json
    logs = config_file.parent / "build" / "logs" / TAG
    assert "+ git" in (logs / "patch.log").read_text()
    assert "patch: demo/0001-demo.patch" in (logs / "patch.log").read_text()
    assert patch(config_file) == 0  # again: both cached
    assert [line.split()[:2] for line in capsys.readouterr().err.splitlines()[:2]] == [
        ["fetch", "cached"], ["patch", "cached"]]


def test_verbose_streams_the_commands(config_file: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert patch(config_file, "-v") == 0
    err = capsys.readouterr().err
    assert "+ git apply" in err and "patch: demo/0001-demo.patch" in err


def test_quiet_shows_only_the_result(config_file: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-q", "--config", str(config_file), "patch", TAG]) == 0
    assert capsys.readouterr().err.splitlines()[0].startswith("patched tree: ")


def test_json_puts_the_result_on_stdout(config_file: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert patch(config_file, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tag"] == TAG
    assert [(s["name"], s["state"]) for s in result["stages"]] == [("fetch", "ran"),
                                                                     ("patch", "ran")]
    patched = Path(result["tree"])
    assert (patched / "demo.py").read_text() == "print('demo')\nprint('hello')\n"
    assert result["stages"][1]["log"].endswith(f"build/logs/{TAG}/patch.log")
    assert len(result["tree_hash"]) == 64


def test_a_failed_stage_names_its_log(config_file: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    (config_file.parent / "upstream" / "demo.py").write_text("print('changed')\n")
    assert patch(config_file) == 3
    err = capsys.readouterr().err.splitlines()
    log = config_file.parent / "build" / "logs" / TAG / "patch.log"
    assert err[1].split()[:2] == ["patch", "failed"] and err[1].endswith(f"log: {log}")
    assert err[2].startswith("sparkbake: error: tag production-1.0-demo: patch "
                             "demo/0001-demo.patch does not apply")
    assert "patch: CONFLICT" in log.read_text()  # the whole report is in the log


def test_verbose_and_quiet_together_are_a_usage_error(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert patch(config_file, "-v", "-q") == 2
    assert "-v and -q say opposite things" in capsys.readouterr().err
