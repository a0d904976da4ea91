"""The host model of vLLM's KV cache planner (images/kv_plan.py) against vLLM 0.33.0's and
0.34.0's own planners on DeepSeek-V4-Flash (images/smoke_kv.py). The kv-plan check runs once
per version, with the patch-tests venv and patched tree of the tag that pins it, on a fake
image root where kv_plan.py is baked: TP 1, 2 and 4, with and without the DSpark draft, at
163,840 and 393,216 tokens, each with memory where vLLM refuses by one byte, where it just
starts, with room for more and with ranks that differ. Every figure must agree to the byte."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.smoke.image_modules import IMAGES, image_module

DATA = Path(__file__).parents[1] / "data"
SUITE_CONFIG = json.loads((IMAGES / "smoke/dsv4-4node/model/config.json").read_text())
# DeepSeek-V4-Flash's shapes; vLLM makes the DSpark draft's head only with the head's rank,
# which the Flash config lacks and no cache reads: the suite's model gives it
FLASH = {**json.loads((DATA / "models/dsv4-flash/config.json").read_text()),
         "dspark_markov_rank": SUITE_CONFIG["dspark_markov_rank"]}
VERSIONS = {"0.33.0": "real_vllm", "0.34.0": "real_vllm_034"}
RUNNER = """
import json, sys
from pathlib import Path
import smoke_kv
from smoke_common import CheckFailed, Image
expected = json.loads(Path(sys.argv[2]).read_text())
try:
    line, record = smoke_kv.check_kv_plan(Image(Path(sys.argv[1])), expected)
    print(json.dumps({"status": "passed", "detail": line, "record": record}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "detail": str(exc), "record": exc.record}))
"""
LONGEST = re.compile(r"the estimated maximum model length is (\d+)")

kv_plan = image_module("kv_plan")
smoke_kv = image_module("smoke_kv")


def image_root(root: Path) -> Path:
    """A DeepSeek-V4 tag's image root, as far as kv-plan reads it: the manifest's model family
    and kv_plan.py baked in /opt/sparkbake."""
    (root / "opt/sparkbake").mkdir(parents=True)
    manifest = {"tag": "kv-plan", "capabilities": {"model": "deepseek_v4"}}
    (root / "opt/sparkbake/manifest.json").write_text(json.dumps(manifest))
    (root / "opt/sparkbake/kv_plan.py").write_bytes((IMAGES / "kv_plan.py").read_bytes())
    return root


def kv_plan_check(python: Path, tree: Path, folder: Path) -> dict[str, Any]:
    """smoke_kv.check_kv_plan with this vLLM, its outcome and record."""
    expected = folder / "expected.json"
    expected.write_text(json.dumps({"layer_model": {"config": FLASH, "path": "dsv4-flash"}}))
    env = {**os.environ, "PYTHONPATH": f"{tree}:{IMAGES}"}
    done = subprocess.run([str(python), "-B", "-c", RUNNER, str(image_root(folder / "root")),
                           str(expected)], capture_output=True, text=True, env=env,
                          check=False, timeout=1200)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    outcome: dict[str, Any] = json.loads(lines[-1])
    return outcome


class Outcomes:
    """The kv-plan check's outcome with each vLLM release, run once when first asked."""

    def __init__(self, request: pytest.FixtureRequest, folders: pytest.TempPathFactory) -> None:
        self.request, self.folders = request, folders
        self.found: dict[str, dict[str, Any]] = {}

    def __getitem__(self, version: str) -> dict[str, Any]:
        if version not in self.found:
            python, tree = self.request.getfixturevalue(VERSIONS[version])
            outcome = kv_plan_check(python, tree, self.folders.mktemp("kv-plan"))
            self.found[version] = {**outcome, "version": version}
        return self.found[version]


@pytest.fixture(scope="session")
def outcomes(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    return Outcomes(request, tmp_path_factory)


@pytest.fixture(params=list(VERSIONS))
def checked(request: pytest.FixtureRequest, outcomes: Outcomes) -> dict[str, Any]:
    return outcomes[request.param]


def test_the_check_passes(checked: dict[str, Any]) -> None:
    assert checked["status"] == "passed", checked["detail"]
    assert checked["record"]["vllm"] == checked["version"]
    assert checked["detail"] == (
        f"vLLM {checked['version']} and kv_plan.py agree on 12 layouts (TP 1, 2, 4, with and "
        "without DSpark): a block 1,002,240 B, one request of 163,840 tokens 7,338,401,280 B")


def test_every_figure_agrees_to_the_byte(checked: dict[str, Any]) -> None:
    record = checked["record"]
    assert smoke_kv.disagreements(kv_plan, FLASH, record) == []
    plans = record["plans"]
    assert {plan["block_bytes"] for plan in plans} == {1_002_240}
    assert {(plan["layout"]["max_model_len"], plan["request_bytes"]) for plan in plans} == \
        {(163840, 7_338_401_280), (393216, 8_236_408_320)}
    assert {plan["in_flight_tokens"] for plan in plans} == {16384}
    for plan in plans:
        assert [trial["refused"] is not None for trial in plan["trials"]] == \
            [True, False, False, False]


def test_a_wrong_host_model_disagrees(checked: dict[str, Any],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison sees a page padded to another alignment than fp8_ds_mla's."""
    monkeypatch.setattr(kv_plan, "PAGE_ALIGN", 512)
    problems = smoke_kv.disagreements(kv_plan, FLASH, checked["record"])
    assert len(problems) >= 12
    assert "TP 1, 163840 tokens: block bytes: host model 998400, vLLM 1002240" in problems


def test_the_refusal_is_vllm_s_own_and_names_the_host_model_s_longest_context(
        checked: dict[str, Any]) -> None:
    for planned in checked["record"]["plans"]:
        layout, refusal = planned["layout"], planned["trials"][0]
        assert refusal["refused"].startswith(
            f"To serve at least one request with the model's max seq len "
            f"({layout['max_model_len']}), ")
        mine = kv_plan.plan(FLASH, kv_plan.Layout(layout["max_model_len"],
                                                  max_num_batched_tokens=8192))
        longest = LONGEST.search(refusal["refused"])
        assert longest is not None
        assert int(longest.group(1)) == mine.longest(refusal["available"][0])


def test_the_two_releases_plan_alike(outcomes: Outcomes) -> None:
    """Only the advice in vLLM's refusal differs between 0.33.0 and 0.34.0."""
    first, second = ([{**plan, "trials": [{**trial, "refused": trial["refused"] is not None}
                                          for trial in plan["trials"]]}
                      for plan in outcomes[version]["record"]["plans"]]
                     for version in VERSIONS)
    assert first == second


@pytest.mark.parametrize(("model", "baked", "config", "why"), [
    ("qwen3", True, FLASH, "the tag's model family is qwen3"),
    ("deepseek_v4", True, None, "no model config.json"),
    ("deepseek_v4", False, FLASH, "/opt/sparkbake/kv_plan.py is not baked"),
])
def test_the_check_is_skipped_where_it_does_not_apply(
        tmp_path: Path, model: str, baked: bool, config: dict[str, Any] | None,
        why: str) -> None:
    common = image_module("smoke_common")
    root = image_root(tmp_path)
    (root / "opt/sparkbake/manifest.json").write_text(
        json.dumps({"capabilities": {"model": model}}))
    if not baked:
        (root / "opt/sparkbake/kv_plan.py").unlink()
    with pytest.raises(common.CheckSkipped, match=why):
        smoke_kv.check_kv_plan(common.Image(root), {"layer_model": {"config": config}})
