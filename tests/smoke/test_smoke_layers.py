"""layer-weights' pure parts (images/smoke_layers.py): the layer kinds, the cut config, the
head command it builds from, where a processing stopped, and the line and failure it reports.
The build itself runs in the image (tests/integration/test_production_arm64.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.smoke.image_modules import IMAGES, image_module
from tests.smoke.realvllm import suite_expected

CONFIG = json.loads((IMAGES / "smoke/dsv4-4node/model/config.json").read_text())


@pytest.fixture(scope="module")
def layers() -> Any:
    return image_module("smoke_layers")


@pytest.mark.parametrize(("name", "draft", "kind"), [
    ("language_model.model.layers.0.ffn.experts", False, "ffn.experts (hash-routed)"),
    ("language_model.model.layers.3.ffn.experts", False, "ffn.experts (score-routed)"),
    ("language_model.model.layers.3.ffn.shared_experts.w2", False,
     "ffn.shared_experts.w2 (score-routed)"),
    ("language_model.model.layers.7.attn.wo_a", False, "attn.wo_a"),
    ("model.layers.0.attn.wo_a", True, "draft attn.wo_a"),
    ("vision_model.blocks.2.attn.qkv", False, "vision_model.blocks.attn.qkv"),
])
def test_layers_are_grouped_by_kind(layers: Any, name: str, draft: bool, kind: str) -> None:
    assert layers.kind_name(name, 3, draft) == kind


def test_the_config_is_cut_to_its_first_layers(layers: Any, tmp_path: Path) -> None:
    config = json.loads(json.dumps(CONFIG))
    fields = config.get("text_config", config) if "num_hidden_layers" not in config else config
    total = fields["num_hidden_layers"]
    mtp = int(fields.get("num_nextn_predict_layers") or 0)
    fields["per_layer"] = list(range(total))
    fields["with_mtp"] = list(range(total + mtp))
    fields["dspark_target_layer_ids"] = [1, 20, 40]
    layers.cut_config(config, 4, tmp_path)
    cut = json.loads((tmp_path / "config.json").read_text())
    cut = cut.get("text_config", cut) if "num_hidden_layers" not in cut else cut
    assert cut["num_hidden_layers"] == 4
    assert cut["per_layer"] == [0, 1, 2, 3]
    assert cut["with_mtp"] == [0, 1, 2, 3, *range(total, total + mtp)]
    assert cut["dspark_target_layer_ids"] == [1, 2, 3]  # the draft reads the last kept


def test_a_config_without_layers_is_refused(layers: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no num_hidden_layers"):
        layers.cut_config({"text_config": {"hidden_size": 8}}, 4, tmp_path)


def test_the_head_command_is_the_suites_first_serving_node(layers: Any) -> None:
    command = layers.head_command(suite_expected())
    assert command.startswith("vllm serve ") and "--headless" not in command
    assert "--node-rank 0" in command
    assert layers.tp_of(command) == 4
    assert layers.tp_of("vllm serve /model -tp 2") == 2
    assert layers.tp_of("vllm serve /model") == 1


def test_a_suite_of_workers_only_is_skipped(layers: Any) -> None:
    expected = suite_expected()
    expected["entrypoint"]["accept"] = [
        sample for sample in expected["entrypoint"]["accept"]
        if "--headless" in str(sample.get("command"))]
    common = image_module("smoke_common")
    with pytest.raises(common.CheckSkipped, match="no accept sample of a head node"):
        layers.head_command(expected)


def test_a_stop_is_named_only_when_it_is_for_want_of_a_gpu(layers: Any) -> None:
    def raised(exc: BaseException) -> BaseException:
        try:
            raise exc
        except BaseException as caught:
            return caught
    stopped = layers.gpu_call(raised(RuntimeError("Cannot copy out of meta tensor; no data!")))
    assert stopped.endswith("RuntimeError: Cannot copy out of meta tensor; no data!")
    assert layers.gpu_call(raised(NotImplementedError("the GPU's kernel"))) != ""
    assert layers.gpu_call(raised(ValueError("weight shape mismatch"))) == ""  # a real failure


def record(problems: list[str], stopped: str = "") -> dict[str, Any]:
    kind = {"kind": "attn.wo_a", "count": 4, "method": "Fp8LinearMethod",
            "kernel": "DeepGemmFp8BlockScaledMMKernel", "reached": [], "stood_in": [],
            "stopped": stopped, "checked": 4, "unchecked": [], "problems": problems}
    experts = {**kind, "kind": "ffn.experts (score-routed)", "checked": 0, "problems": [],
               "stopped": "b12x.moe.fused_moe._impl._require_unit_weight_alphas (line 9): x"}
    return {"layers": 4, "builds": [{"tp": tp, "architecture": "DeepseekV4ForCausalLM",
                                     "kinds": [kind, experts]} for tp in (1, 4)]}


def test_the_line_says_what_was_built_checked_and_where_the_gpu_was_needed(
        layers: Any) -> None:
    problems, line = layers.summary(record([]))
    assert problems == []
    assert line == (
        "DeepseekV4ForCausalLM, first 4 layers and the draft, at TP 1, 4: 8 weights as their "
        "forward reads them; needs the GPU: b12x.moe.fused_moe._impl."
        "_require_unit_weight_alphas (line 9) stops ffn.experts (score-routed)")


def test_each_problem_is_reported_with_its_tp(layers: Any) -> None:
    problems, _ = layers.summary(record(["language_model.model.layers.0.attn.wo_a (B12x): 2-D"]))
    assert problems == ["TP 1: language_model.model.layers.0.attn.wo_a (B12x): 2-D",
                        "TP 4: language_model.model.layers.0.attn.wo_a (B12x): 2-D"]


def test_tags_of_other_models_and_suites_without_a_config_are_skipped(
        layers: Any, tmp_path: Path) -> None:
    common = image_module("smoke_common")
    manifest = tmp_path / common.MANIFEST
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"capabilities": {"model": "llama"}}))
    with pytest.raises(common.CheckSkipped, match="model family is llama"):
        layers.check_layer_weights(common.Image(tmp_path), {})
    manifest.write_text(json.dumps({"capabilities": {"model": "deepseek_v4"}}))
    with pytest.raises(common.CheckSkipped, match="give --model"):
        layers.check_layer_weights(common.Image(tmp_path), {
            "layer_model": {"none": "no config.json in x: give --model"}})
