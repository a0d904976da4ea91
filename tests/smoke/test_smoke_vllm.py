"""The vllm-serve-args check against the real vLLM 0.33.0: the patched tree of
production-3.73-vision (pure Python, nothing compiled) in the venv of its patch-tests lock,
under a fake image root whose site-packages records vllm 0.33.0+cu130, as a built image does.
The tree and the venv are the cached ones of `sparkbake patch-tests 3.73-vision`."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tests.nodeenv import reference_command
from tests.smoke.realvllm import REPO, fake_root, run_check, suite_expected


def serve_args(root: Path, expected: dict[str, Any], python: Path | str,
               pythonpath: str = "") -> dict[str, Any]:
    """The vllm-serve-args check of smoke_check.py run with this Python."""
    return run_check("vllm-serve-args", root, expected, python, pythonpath)


def test_the_suites_commands_parse_in_the_pinned_vllm(
        real_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    python, tree = real_vllm
    # the Spark tags' MoE and linear backend is b12x, whose module the image installs (vLLM's
    # b12x extra) and the patch-tests venv does not: an empty package of that name here
    extra = tmp_path / "extra"
    (extra / "b12x").mkdir(parents=True)
    (extra / "b12x" / "__init__.py").write_text("")
    check = serve_args(fake_root(tmp_path / "root"), suite_expected(), python,
                       f"{tree}:{extra}")
    assert (check["status"], check["detail"]) == ("passed", (
        "vLLM 0.33.0 parses the command of 4 sample(s) of suite dsv4-4node, and resolves "
        "their backends: accept/head.env, accept/worker-1.env, accept/worker-2.env, "
        "accept/worker-3.env"))


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
