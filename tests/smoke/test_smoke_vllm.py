"""The vllm-serve-args check against the real vLLM 0.33.0: the patched tree of
production-3.73-vision (pure Python, nothing compiled) in the venv of its patch-tests lock,
under a fake image root whose site-packages records vllm 0.33.0+cu130, as a built image does.
The tree and the venv are the cached ones of `sparkbake patch-tests 3.73-vision`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkbake.config import versions
from sparkbake.pipeline import commands
from sparkbake.pipeline import plan as plan_mod
from sparkbake.pipeline.stages import Stage
from sparkbake.series import patchtests
from sparkbake.smoke import sample_envs
from tests.nodeenv import reference_command

REPO = Path(__file__).parents[2]
CHECKER = REPO / "images" / "smoke_check.py"
SITE = Path("opt/venv/lib/python3.11/site-packages")


@pytest.fixture(scope="module")
def real_vllm() -> tuple[Path, Path]:
    """The patch-tests venv's python and the patched tree (made here if not cached)."""
    loaded = versions.load(REPO / "versions.yaml")
    tag = loaded.tag("3.73-vision")
    assert commands.run_until(loaded, tag, Stage.PATCH) == 0
    tree = loaded.build_dir / "patched" / plan_mod.make(loaded, tag).patch_key / "tree"
    venv = patchtests.environment(patchtests.require_lock(loaded, tag, tree),
                                  loaded.build_dir / "venvs")
    return venv / "bin" / "python", tree


def suite_expected() -> dict[str, Any]:
    loaded = versions.load(REPO / "versions.yaml")
    suite = sample_envs.load(loaded, loaded.tag("3.73-vision"))
    return {"entrypoint": sample_envs.expected(suite, ["/opt/venv/bin/python", "entrypoint.py"])}


def fake_root(root: Path, rules: dict[str, Any] | None = None) -> Path:
    """/opt/sparkbake/preflight.json and a vllm 0.33.0+cu130 dist-info in site-packages."""
    (root / "opt/sparkbake").mkdir(parents=True)
    rules = rules or json.loads((REPO / "images" / "preflight.json").read_text())
    (root / "opt/sparkbake/preflight.json").write_text(json.dumps(rules))
    info = root / SITE / "vllm-0.33.0+cu130.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0+cu130\n")
    return root


def serve_args(root: Path, expected: dict[str, Any], python: Path | str,
               pythonpath: str = "") -> dict[str, Any]:
    """The vllm-serve-args check of smoke_check.py run with this Python."""
    (root / "expected.json").write_text(json.dumps(expected))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([str(python), "-B", str(CHECKER), "--root", str(root),
                           str(root / "expected.json")], capture_output=True, text=True,
                          env=env, check=False, timeout=300)
    checks = {c["name"]: c for c in json.loads(done.stdout.strip().splitlines()[-1])["checks"]}
    check: dict[str, Any] = checks["vllm-serve-args"]
    return check


def test_the_suites_commands_parse_in_the_pinned_vllm(
        real_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    python, tree = real_vllm
    check = serve_args(fake_root(tmp_path), suite_expected(), python, str(tree))
    assert (check["status"], check["detail"]) == ("passed", (
        "vLLM 0.33.0 parses the command of 2 sample(s) of suite dsv4-4node, and resolves "
        "their backends: accept/head.env, accept/worker.env"))


def test_the_reference_command_an_unknown_flag_and_stale_data_fail(
        real_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    python, tree = real_vllm
    expected = suite_expected()
    head = expected["entrypoint"]["accept"][0]
    expected["entrypoint"]["accept"] = [
        {**head, "name": "reference.env", "command": shlex.join(reference_command(0))},
        {**head, "name": "flag.env", "command": head["command"] + " --no-such-flag"}]
    rules = json.loads((REPO / "images" / "preflight.json").read_text())
    rules["backends"]["vllm"]["0.33.0"]["attention"].append("B12X_MLA_SPARSE")
    check = serve_args(fake_root(tmp_path, rules), expected, python, str(tree))
    assert check["status"] == "failed"
    problems = check["detail"].split("; ")
    assert problems[0] == ("opt/sparkbake/preflight.json attention backends of vLLM 0.33.0: "
                           "not in vLLM ['B12X_MLA_SPARSE'], not listed []")
    assert problems[1].startswith("reference.env: attention backend 'B12X_MLA_SPARSE': "
                                  "ValueError: Unknown attention backend: 'B12X_MLA_SPARSE'")
    assert problems[2:4] == [
        "reference.env: moe backend 'b12x' needs the module b12x, which is not there",
        "reference.env: linear backend 'b12x' needs the module b12x, which is not there"]
    assert problems[-1] == "flag.env: vllm: error: unrecognized arguments: --no-such-flag"


def test_without_vllm_the_check_is_skipped_saying_so(tmp_path: Path) -> None:
    (tmp_path / "opt/sparkbake").mkdir(parents=True)
    check = serve_args(tmp_path, suite_expected(), sys.executable)
    assert (check["status"], check["detail"]) == \
        ("skipped", "no vLLM in this image: nothing parses its commands")
