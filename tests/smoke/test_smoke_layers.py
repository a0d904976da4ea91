"""layer-weights (images/smoke_layers.py): the layer kinds, the cut config, the head command
it builds from, where a processing stopped or failed, each kind's minimum of checked weights,
DeepGEMM's scale layout (its stand-in and what the forward reads, also through the real vLLM
0.33.0's own processing), the DSpark config it refuses, and the line and failure it reports.
The whole build runs in the image (tests/integration/test_production_arm64.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
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


def record(problems: list[str], stopped: str = "") -> dict[str, Any]:
    kind = {"kind": "attn.wo_a", "count": 4, "method": "Fp8LinearMethod",
            "kernel": "DeepGemmFp8BlockScaledMMKernel", "reached": [], "stood_in": [],
            "stopped": stopped, "checked": 4, "minimum": 4, "unchecked": [],
            "problems": problems}
    experts = {**kind, "kind": "ffn.experts.routed_experts (score-routed)", "count": 1,
               "checked": 1, "minimum": 1, "problems": [], "expert_bytes": 855640064,
               "kept_source_bytes": 0}
    vision = {**kind, "kind": "vision.blocks.attn.wqkv", "checked": 0, "minimum": 0,
              "problems": [], "stopped": "vllm.model_executor.layers.x.f (line 9): why"}
    return {"layers": 4, "builds": [
        {"tp": tp, "architecture": "DeepseekV4ForCausalLM", "expert_bytes": 855640064,
         "kept_source_bytes": 0,
         "kinds": [{**kind, "checked": 4 if tp == 4 else 3}, experts, vision]}
        for tp in (4, 1)]}


def test_the_line_gives_the_checked_count_per_kind_and_the_experts_memory(
        layers: Any) -> None:
    problems, line = layers.summary(record([]))
    assert problems == []
    assert line == (
        "DeepseekV4ForCausalLM, first 4 layers and the draft, at TP 4, 1: 9 weights as their "
        "forward reads them (attn.wo_a 4/3, ffn.experts.routed_experts (score-routed) 1); "
        "routed experts per layer 0.80 GiB at TP 4, 0.80 GiB at TP 1, of which the "
        "checkpoint's weights kept: none; needs the GPU: vllm.model_executor.layers.x.f "
        "(line 9) stops vision.blocks.attn.wqkv")


def test_each_problem_is_reported_with_its_tp(layers: Any) -> None:
    problems, _ = layers.summary(record(["language_model.model.layers.0.attn.wo_a (B12x): 2-D"]))
    assert problems == ["TP 4: language_model.model.layers.0.attn.wo_a (B12x): 2-D",
                        "TP 1: language_model.model.layers.0.attn.wo_a (B12x): 2-D"]


# --- where a processing ends, and each kind's minimum --------------------------------------


def raiser(module: str, call: str, exc: Exception) -> Any:
    """A function `call` of a module named `module` (vLLM's or a kernel package's, as a
    traceback tells it) that raises exc."""
    namespace: dict[str, Any] = {"__name__": module, "exc": exc}
    exec(f"def {call}(*args, **kwargs):\n    raise exc\n", namespace)
    return namespace[call]


def routed_experts(layers: Any, built: Any, count: int,
                   process: Any) -> list[tuple[str, Any]]:
    """count routed-expert layers, score-routed after the 3 hash-routed ones, each processed
    by `process` as vLLM's loader calls it."""
    modules = []
    for number in range(3, 3 + count):
        name = f"language_model.model.layers.{number}.ffn.experts.routed_experts"
        module = SimpleNamespace(local_num_experts=64, quant_method=object())
        layers.recorded(built, name, module, process)()
        modules.append((name, module))
    return modules


@pytest.fixture
def built(layers: Any) -> Any:
    return layers.Layers(3, draft=False)


SCORE_ROUTED = "ffn.experts.routed_experts (score-routed)"


def test_a_raise_from_a_call_not_listed_fails_naming_the_call_and_the_layer(
        layers: Any, built: Any) -> None:
    """Before, any error that spoke of a meta tensor or CUDA counted as needing the GPU."""
    meta = RuntimeError("Cannot copy out of meta tensor; no data!")
    routed_experts(layers, built, 1, raiser("b12x.moe.fused_moe._impl", "prepare", meta))
    kind = built.kinds[SCORE_ROUTED]
    assert kind.stopped == ""
    assert kind.problems == [
        "language_model.model.layers.3.ffn.experts.routed_experts: b12x.moe.fused_moe._impl."
        "prepare (line 2) raised RuntimeError: Cannot copy out of meta tensor; no data!"]


def test_a_call_listed_as_needing_the_gpu_stops_its_layer_with_the_reason(
        layers: Any, built: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(layers.NEEDS_GPU, "b12x.moe.fused_moe._impl.prepare",
                        "it packs the weights by their values")
    routed_experts(layers, built, 1, raiser("b12x.moe.fused_moe._impl", "prepare",
                                            ValueError("x")))
    kind = built.kinds[SCORE_ROUTED]
    assert kind.problems == []
    assert kind.stopped == ("b12x.moe.fused_moe._impl.prepare (line 2): it packs the "
                            "weights by their values")


def test_a_kind_whose_whole_processing_is_stood_in_fails_below_its_minimum(
        layers: Any, built: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A list that swallows the processing of every routed-expert layer: none of them is
    held to its contract, so the kind is below its minimum and the check fails. Before,
    such layers went to `unchecked` and the check passed on the rest."""
    module = "vllm.model_executor.layers.fused_moe.b12x"
    monkeypatch.setitem(layers.NEEDS_GPU, f"{module}.process_weights_after_loading",
                        "stood in whole")
    modules = routed_experts(layers, built, 2, raiser(module, "process_weights_after_loading",
                                                      RuntimeError("no GPU")))
    layers.check_contracts(built, SimpleNamespace(named_modules=lambda: modules))
    [kind] = layers.held_to_minimum(built, {})
    assert (kind.checked, kind.minimum, len(kind.unchecked)) == (0, 2, 2)
    assert kind.problems == [
        f"{SCORE_ROUTED}: 0 of 2 layers held to what their forward reads: "
        "language_model.model.layers.3.ffn.experts.routed_experts, language_model.model."
        "layers.4.ffn.experts.routed_experts stopped at vllm.model_executor.layers.fused_moe."
        "b12x.process_weights_after_loading (line 2): stood in whole"]
    problems, _ = layers.summary({"layers": 4, "builds": [
        {"tp": 1, "architecture": "DeepseekV4ForCausalLM", "kinds": [kind.record()]}]})
    assert problems == [f"TP 1: {kind.problems[0]}"]


def test_a_kind_the_model_lacks_is_below_its_floor(layers: Any, built: Any) -> None:
    """Every target layer has a wo_a: a build that checked none fails, even one without any."""
    [kind] = layers.held_to_minimum(built, {"attn.wo_a": 4})
    assert kind.problems == ["attn.wo_a: 0 of 4 layers held to what their forward reads"]


# --- DeepGEMM's scale layout ---------------------------------------------------------------

WO_A = (2, 1024, 4096)  # attn.wo_a at TP 4: groups, o_lora_rank rows, K


def test_the_stand_in_packs_block_scales_as_deepgemm_does_on_sm12x(layers: Any) -> None:
    """FP32 128 x 128 block scales (vLLM upcasts the checkpoint's UE8M0 to them) become UE8M0
    for each row, 4 to an int32 along K, MN-major, each column on a 16-byte boundary."""
    layout = layers.ScaleLayout
    blocks = layout((2, 8, 32), (256, 32, 1), "float32")
    packed = layers.transformed_layout(blocks, 1024, 4096, (1, 128, 128), 2, False, False, 12)
    assert packed == layout((2, 1024, 8), (8 * 1024, 1, 1024), "int32")
    # 101 rows: each column padded to 104 scales, the next 16 bytes
    odd = layers.transformed_layout(layout((1, 1, 7), (7, 7, 1), "float32"), 101, 896,
                                    (1, 128, 128), 1, False, False, 12)
    assert odd == layout((1, 101, 2), (104 * 2, 1, 104), "int32")
    # SM90, or vLLM keeping FP32 (no UE8M0): block scales read as they are
    for arch, keep in ((9, False), (12, True)):
        assert layers.transformed_layout(blocks, 1024, 4096, (1, 128, 128), 2, False, keep,
                                         arch) == blocks
    with pytest.raises(ValueError, match=r"wants \(2, 16, 32\)"):
        layers.transformed_layout(blocks, 2048, 4096, (1, 128, 128), 2, False, False, 12)


def test_the_forward_reads_packed_mn_major_tma_aligned_scales(layers: Any) -> None:
    layout = layers.ScaleLayout
    assert layers.scale_read_problem(WO_A, layout((2, 1024, 8), (8192, 1, 1024), "int32"),
                                     12) == ""
    assert layers.scale_read_problem((1536, 4096), layout((1536, 8), (1, 1536), "int32"),
                                     12) == ""
    assert layers.scale_read_problem(WO_A, layout((2, 8, 32), (256, 32, 1), "float32"),
                                     9) == ""


@pytest.mark.parametrize(("scales", "wrong"), [
    # what the old stand-in left: FP32 blocks, unpacked
    (((2, 8, 32), (256, 32, 1), "float32"), "reads them as int32 (2, 1024, 8)"),
    # packed along MN instead of K
    (((2, 256, 32), (8192, 1, 256), "int32"), "reads them as int32 (2, 1024, 8)"),
    # packed along K, but K-major
    (((2, 1024, 8), (8192, 8, 1), "int32"), "not MN-major"),
    # columns not on 16-byte boundaries
    (((2, 1024, 8), (8 * 1026, 1, 1026), "int32"), "a multiple of 4 apart"),
    # the groups apart from one another
    (((2, 1024, 8), (36000, 1, 1024), "int32"), "groups are 36000 apart, not 8192"),
])
def test_a_wrong_packing_fails_the_scale_contract(
        layers: Any, scales: tuple[Any, ...], wrong: str) -> None:
    assert wrong in layers.scale_read_problem(WO_A, layers.ScaleLayout(*scales), 12)


LAYOUT_IN_VLLM = """
import json, sys
sys.path.insert(0, sys.argv[1])
from vllm import platforms
if platforms.current_platform.is_unspecified():
    from vllm.platforms.cpu import CpuPlatform
    platforms.current_platform = CpuPlatform()
import torch
import smoke_layers
from vllm.model_executor.layers.quantization.utils import fp8_utils
from vllm.utils import deep_gemm
smoke_layers.gpu_arch = lambda: 12  # a GB10, where vLLM has DeepGEMM cast scales to UE8M0
deep_gemm.is_deep_gemm_e8m0_used = lambda: True
deep_gemm._transform_sf_into_required_layout_impl = smoke_layers.deep_gemm_layout
found = []
for rows, groups, scale_dtype in ((2048, 2, torch.float8_e8m0fnu), (1536, 0, torch.float32)):
    with torch.device("meta"):
        weight = torch.empty(rows, 4096, dtype=torch.float8_e4m3fn)
        scales = torch.empty(rows // 128, 32, dtype=scale_dtype)
    weight, scales = fp8_utils.deepgemm_post_process_fp8_weight_block(
        weight, scales, (128, 128), True, bool(groups), groups)
    layout = smoke_layers.ScaleLayout.of(scales)
    found.append([list(layout.shape), list(layout.strides), layout.dtype,
                  smoke_layers.scale_read_problem(tuple(weight.shape), layout, 12)])
print(json.dumps(found))
"""


def test_vllms_own_deepgemm_processing_through_the_stand_in_gives_what_the_forward_reads(
        real_vllm: tuple[Path, Path]) -> None:
    """wo_a (a batched matmul of 2 groups, UE8M0 checkpoint scales) and a plain linear
    layer (FP32 scales), processed by the real vLLM 0.33.0's
    deepgemm_post_process_fp8_weight_block with DeepGEMM's transform stood in."""
    python, tree = real_vllm
    done = subprocess.run([str(python), "-B", "-c", LAYOUT_IN_VLLM, str(IMAGES)],
                          capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [
        [[2, 1024, 8], [8192, 1, 1024], "int32", ""],
        [[1536, 8], [1, 1536], "int32", ""]]


# --- DSpark --------------------------------------------------------------------------------


def without_dspark_layers() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(json.dumps(CONFIG))
    fields = config.get("text_config", config) if "num_hidden_layers" not in config else config
    del fields["dspark_target_layer_ids"]
    return config


def test_a_dspark_command_on_a_config_without_its_target_layers_is_refused(
        layers: Any, tmp_path: Path) -> None:
    """vLLM's DSpark draft reads dspark_target_layer_ids as it is built (the preflight
    refuses the same: tests/unit/test_model_checks.py)."""
    common = image_module("smoke_common")
    manifest = tmp_path / common.MANIFEST
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"capabilities": {"model": "deepseek_v4"}}))
    expected = {**suite_expected(), "cuda_arch": "12.1a",
                "layer_model": {"path": "model/config.json", "config": without_dspark_layers()}}
    with pytest.raises(common.CheckFailed, match="has no dspark_target_layer_ids") as failed:
        layers.check_layer_weights(common.Image(tmp_path), expected)
    assert failed.value.record["key"] == "dspark_target_layer_ids"
    command = layers.head_command(expected)
    assert layers.dspark_problem(CONFIG, command) == ""
    ngram = command.replace('"method":"dspark"', '"method":"ngram"')
    assert ngram != command
    assert layers.dspark_problem(without_dspark_layers(), ngram) == ""


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
