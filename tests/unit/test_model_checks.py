"""The model checks (images/model_checks.py): the mounted model's shapes against the b12x
kernels and its weights against the GPU memory, on the reference deployment's .env files."""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sparkbake.nodes import preflight
from tests.nodeenv import write_sysctls

from .test_preflight import IMAGE_373, SERIES_373, servable
from .test_preflight import node as reference_node


def node(name: str = "worker", **changes: str) -> dict[str, str]:
    """The reference's node with the linear backend the Spark tags bake (its own b12x cannot
    serve DeepSeek-V4's attn.wo_a: test_the_reference_linear_backend_...), taking text only:
    DSV4 is the text checkpoint (images-on-text-checkpoint has tests of its own)."""
    return reference_node(name, **{"LINEAR_BACKEND": "deep_gemm", **TEXT_ONLY, **changes})

checks = preflight.entrypoint().checks
model_checks = checks.model_checks
DSV4 = Path(__file__).parents[1] / "data" / "models" / "dsv4-flash"
INDEX = "model.safetensors.index.json"
SPARK = int(121.7 * 2**30)  # a GB10's total as vLLM reads it (cudaMemGetInfo)
TEXT_ONLY = {"LIMIT_MM_IMAGES": "0"}
ONE_SPARK = {"NNODES": "1", "NODE_RANK": "0", "TP_SIZE": "1"}
EIGHT_NODES = {"NNODES": "8", "TP_SIZE": "8"}
# the reference pair: two Sparks at TP 2, 163840 tokens, 24 sequences, DSpark on (the
# CUDA graphs sized to the batch, so the capture-size warning stays out of the way)
TWO_NODES = {"NNODES": "2", "TP_SIZE": "2", "MAX_MODEL_LEN": "163840", "MAX_NUM_SEQS": "24",
             "MAX_CUDAGRAPH_CAPTURE_SIZE": "168", "CUDAGRAPH_CAPTURE_SIZES": "1,2,4,8,56,168"}
NOT_JSON = '{\n  "hidden_size": 4096,\n}\n'


@pytest.fixture
def sysctls(tmp_path: Path) -> Path:
    return write_sysctls(tmp_path / "sys")


def model(folder: Path, files: dict[str, str | None] | None = None, **config: Any) -> Path:
    """A copy of the DeepSeek-V4-Flash folder with some config values changed; `files`:
    files written over (None: removed)."""
    folder.mkdir()
    values = {**json.loads((DSV4 / "config.json").read_text()), **config}
    (folder / "config.json").write_text(json.dumps(values))
    shutil.copy(DSV4 / INDEX, folder)
    for name, text in (files or {}).items():
        if text is None:
            (folder / name).unlink()
        else:
            (folder / name).write_text(text)
    return folder


def findings(env: dict[str, str], host_root: Path, folder: Path | None = DSV4,
             gpu: int | None = SPARK, image: Any = None) -> list[Any]:
    return list(checks.check(env, series=SERIES_373, host_root=host_root, image=image,
                             model_dir=folder, gpu_memory=lambda: gpu))


def fired(*args: Any, **kwargs: Any) -> dict[str, str]:
    return {f.rule: f.level for f in findings(*args, **kwargs)}


def only(rule: str, *args: Any, **kwargs: Any) -> Any:
    """The one finding of RULE, which must be the only finding."""
    [finding] = findings(*args, **kwargs)
    assert finding.rule == rule
    return finding


# (rule, level, changes to the worker's .env, to the model's config, files written over)
MODEL_FIRING: list[tuple[str, str, dict[str, str], dict[str, Any], dict[str, str | None]]] = [
    ("moe-backend-shape", "error", {}, {"moe_intermediate_size": 2000}, {}),
    ("moe-backend-shape", "error", {"SERVE_EXTRA_ARGS": "--enable-expert-parallel"}, {}, {}),
    ("moe-backend-shape", "error", {"SERVE_EXTRA_ARGS": "--seed 1 -ep"}, {}, {}),
    ("moe-backend-bf16-activations", "warning", {}, {"hidden_size": 4224}, {}),
    ("linear-backend-shape", "error", {"LINEAR_BACKEND": "b12x"}, {}, {}),  # attn.wo_a
    ("linear-backend-shape", "error", {"LINEAR_BACKEND": "b12x"}, {"index_head_dim": 65}, {}),
    ("linear-backend-shape", "error", {"LINEAR_BACKEND": "b12x"}, {"o_lora_rank": 1000}, {}),
    ("linear-backend-shape", "error", {"LINEAR_BACKEND": "b12x"}, {"quantization_config": {
        "quant_method": "fp8", "weight_block_size": [64, 64]}}, {}),
    ("memory-budget", "error", ONE_SPARK, {}, {}),
    ("memory-budget", "error", {**TWO_NODES, "GPU_MEMORY_UTILIZATION": "0.75"}, {}, {}),
    ("host-memory-margin", "warning", {**EIGHT_NODES, "GPU_MEMORY_UTILIZATION": "0.8"}, {}, {}),
    ("model-index-missing", "warning", {}, {}, {INDEX: None}),
    ("model-index-missing", "warning", {}, {}, {INDEX: '{"weight_map": {}}'}),
    ("model-unreadable", "error", {}, {}, {"config.json": NOT_JSON}),
    ("model-unreadable", "error", {}, {}, {INDEX: "[]"}),
    ("model-unreadable", "error", {}, {}, {INDEX: '{"metadata": {"total_size": 1}}'}),
    ("model-unreadable", "error", {}, {"compress_ratios": [0, 4, 128]}, {}),  # too few
    ("model-unreadable", "error", {}, {"compress_ratios": [8] * 44}, {}),
    ("model-unreadable", "error", {}, {"compress_ratios": "0, 4, 128"}, {}),
    ("images-on-text-checkpoint", "warning", {"LIMIT_MM_IMAGES": "4"}, {}, {}),
    ("images-on-text-checkpoint", "warning", {"LIMIT_MM_IMAGES": ""}, {}, {}),  # vLLM's limit
    ("dspark-target-layers-missing", "error", {}, {"dspark_target_layer_ids": []}, {}),
    ("dspark-target-layers-missing", "error", {}, {"dspark_target_layer_ids": "1, 21, 41"}, {}),
    ("max-model-len-above-model", "error", {}, {"max_position_embeddings": 131072}, {}),
    ("max-model-len-above-model-allowed", "warning", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
     {"max_position_embeddings": 131072}, {}),
]

# (rule, changes to the worker's .env and to the model's config that come close to firing it)
MODEL_QUIET: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("moe-backend-shape", {"MOE_BACKEND": "auto"}, {"moe_intermediate_size": 2000}),
    ("moe-backend-shape", {**ONE_SPARK, "SERVE_EXTRA_ARGS": "-ep"}, {}),  # no EP on one rank
    ("moe-backend-shape", {"SERVE_EXTRA_ARGS": "-ep --no-enable-expert-parallel"}, {}),
    ("moe-backend-shape", {}, {"expert_dtype": "fp8", "moe_intermediate_size": 2000}),
    ("moe-backend-shape", {}, {"model_type": "deepseek_v41", "moe_intermediate_size": 2000}),
    ("moe-backend-shape", {**EIGHT_NODES, "MOE_BACKEND": "B12X"}, {}),  # 2048 / 8 = 256
    ("moe-backend-bf16-activations", {"MOE_BACKEND": "marlin"}, {"hidden_size": 4224}),
    ("linear-backend-shape", {"LINEAR_BACKEND": "auto"}, {"index_head_dim": 65}),
    ("linear-backend-shape", {"TP_SIZE": "8", "NNODES": "8"}, {}),
    ("linear-backend-shape", {}, {"quantization_config": {"quant_method": "fp8"}}),
    ("memory-budget", {**TWO_NODES, "GPU_MEMORY_UTILIZATION": "0.85"}, {}),
    ("memory-budget", {"MAX_NUM_SEQS": "256", "MAX_CUDAGRAPH_CAPTURE_SIZE": "1792",
                       "CUDAGRAPH_CAPTURE_SIZES": "1,1792"}, {}),  # how many at once, not whether
    ("host-memory-margin", {**EIGHT_NODES, "GPU_MEMORY_UTILIZATION": "0.79"}, {}),
    ("images-on-text-checkpoint", {"LIMIT_MM_IMAGES": "4"}, {"vision_n_layers": 24}),
    ("images-on-text-checkpoint", {"LIMIT_MM_IMAGES": "4"},
     {"architectures": ["DeepseekV4ForConditionalGeneration"]}),
    ("images-on-text-checkpoint", {"LIMIT_MM_IMAGES": "4"}, {"model_type": "deepseek_v41"}),
    ("dspark-target-layers-missing", {"VLLM_ENABLE_DSPARK": "0"}, {"dspark_target_layer_ids": []}),
    ("dspark-target-layers-missing", {}, {"model_type": "deepseek_v41",
                                          "dspark_target_layer_ids": []}),
    ("max-model-len-above-model", {}, {"max_position_embeddings": 393216}),
    ("max-model-len-above-model", {}, {"max_position_embeddings": 65536,
                                       "rope_scaling": {"type": "linear", "factor": 8}}),
    ("max-model-len-above-model-allowed", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "yes"},
     {"max_position_embeddings": 393216}),
]


def test_the_reference_layout_with_its_model_passes_with_no_finding(sysctls: Path) -> None:
    """Four nodes, TP 4, 0.75, b12x MoE and linear kernels, DSpark, DeepSeek-V4-Flash."""
    for name in ("head", "worker"):
        assert findings(node(name), sysctls) == []


def test_the_servable_sample_on_the_tags_declared_memory_passes(sysctls: Path) -> None:
    image = checks.Image(vllm=IMAGE_373.vllm, modules=IMAGE_373.modules,
                         capabilities={**IMAGE_373.capabilities, "device_memory_gb": 128})
    env = servable(MOE_BACKEND="b12x", LINEAR_BACKEND="deep_gemm", **TEXT_ONLY)
    assert findings(env, sysctls, gpu=None, image=image) == []


def test_the_reference_linear_backend_cannot_serve_the_batched_output_projection(
        sysctls: Path) -> None:
    """b12x, as the reference deployment runs it, on every node at TP 4: the load succeeds
    and the first forward aborts; the preflight names wo_a, the shapes and the fix."""
    for name in ("head", "worker"):
        finding = only("linear-backend-shape", reference_node(name, **TEXT_ONLY), sysctls)
        assert finding.message == (
            "LINEAR_BACKEND=b12x cannot run attn.wo_a (a batched matmul, N = o_groups x "
            "o_lora_rank, K = num_attention_heads x head_dim / o_groups) at TP_SIZE=4: the "
            "output projection reads its weight with fp8_einsum('bhr,hdr->bhd') as 3-D groups, "
            "which b12x's processing does not make, but b12x keeps it 2-D (2048, 4096) where "
            "the forward reads (2, 1024, 4096)")
        assert "layout.hpp 't.dim() == N'" in finding.reason
        assert finding.reason.endswith("LINEAR_BACKEND=deep_gemm (or auto) takes DeepGEMM, "
                                       "whose processing makes the groups")


@pytest.mark.parametrize(("rule", "level", "changes", "config", "files"), MODEL_FIRING,
                         ids=[f"{r}-{i}" for i, (r, *_) in enumerate(MODEL_FIRING)])
def test_each_model_rule_fires_alone(rule: str, level: str, changes: dict[str, str],
                                     config: dict[str, Any], files: dict[str, str | None],
                                     sysctls: Path, tmp_path: Path) -> None:
    found = findings(node(**changes), sysctls, model(tmp_path / "model", files, **config))
    assert {f.rule: f.level for f in found} == {rule: level}
    assert all("?" not in f.message + f.reason for f in found)  # every field filled in


@pytest.mark.parametrize(("rule", "changes", "config"), MODEL_QUIET,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(MODEL_QUIET)])
def test_model_near_misses_do_not_fire(rule: str, changes: dict[str, str],
                                       config: dict[str, Any], sysctls: Path,
                                       tmp_path: Path) -> None:
    assert rule not in fired(node(**changes), sysctls, model(tmp_path / "model", **config))


def test_model_naming_a_hugging_face_cache_folder_is_refused_with_its_snapshot(
        sysctls: Path, tmp_path: Path) -> None:
    cache = tmp_path / "models--deepseek-ai--DeepSeek-V4-Flash"
    (cache / "snapshots").mkdir(parents=True)
    snapshot = model(cache / "snapshots" / "0123abcd")
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("0123abcd\n")
    finding = only("model-is-cache-folder", node(MODEL="/model/"), sysctls, cache)
    assert (finding.level, finding.at) == ("error", "MODEL")
    assert finding.message == (f"MODEL=/model/ is a Hugging Face cache folder ({cache}: "
                               "snapshots/ and no config.json), not a model's folder")
    assert finding.reason.startswith("vllm reads config.json where MODEL points and stops at "
                                     "start without one; set MODEL=/model/snapshots/0123abcd "
                                     "(the revision refs/main names)")
    assert findings(node(MODEL="/model/snapshots/0123abcd"), sysctls, snapshot) == []
    (cache / "refs" / "main").unlink()
    assert "(its only snapshot)" in only("model-is-cache-folder", node(), sysctls, cache).reason


def test_a_per_rank_intermediate_size_b12x_cannot_take_is_refused(
        sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", moe_intermediate_size=2000)
    finding = only("moe-backend-shape", node(), sysctls, folder)
    assert (finding.level, finding.at) == ("error", "MOE_BACKEND")
    assert finding.message == (
        "MOE_BACKEND=b12x cannot run the routed experts (MXFP4) at TP_SIZE=4: the intermediate "
        "size per rank must be a multiple of 32, but moe_intermediate_size 2000 / 4 = 500")
    assert finding.reason == (
        "vLLM 0.33.0 asks B12xExperts.is_supported_config and _supports_parallel_config "
        "(vllm/model_executor/layers/fused_moe/b12x.py) for both b12x MXFP4 variants when it "
        "builds the layer, and the load stops when neither fits; MOE_BACKEND=auto lets vLLM "
        "pick an MXFP4 kernel that pads it")


def test_an_intermediate_size_tp_does_not_split_evenly_asks_for_another_tp(
        sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", moe_intermediate_size=2000)
    env = node(TP_SIZE="3", NNODES="3", LINEAR_BACKEND="auto")
    finding = only("moe-backend-shape", env, sysctls, folder)
    assert finding.message.endswith("but moe_intermediate_size 2000 / 3 = 666.7")
    assert finding.reason.endswith("no backend takes it (vLLM's FusedMoEConfig asserts an even "
                                   "split): pick a TP_SIZE that divides 2000")


def test_expert_parallelism_under_b12x_is_refused_with_what_to_drop(sysctls: Path) -> None:
    finding = only("moe-backend-shape", node(SERVE_EXTRA_ARGS="-ep"), sysctls)
    assert finding.message == ("MOE_BACKEND=b12x cannot run the routed experts (MXFP4) at "
                               "TP_SIZE=4: they run without expert parallelism, but "
                               "SERVE_EXTRA_ARGS switches it on over TP_SIZE=4")
    assert finding.reason.endswith("drop --enable-expert-parallel (-ep) from SERVE_EXTRA_ARGS, "
                                   "or set MOE_BACKEND=auto")


def test_a_hidden_size_off_256_warns_of_the_bf16_variant(sysctls: Path, tmp_path: Path) -> None:
    finding = only("moe-backend-bf16-activations", node(), sysctls,
                   model(tmp_path / "model", hidden_size=4224))
    assert finding.message == ("MOE_BACKEND=b12x runs the routed experts with BF16 "
                               "activations: hidden_size 4224 is not a multiple of 256")


def test_a_replicated_layer_off_128_names_the_layer_and_auto(sysctls: Path,
                                                             tmp_path: Path) -> None:
    found = findings(node(LINEAR_BACKEND="b12x"), sysctls,
                     model(tmp_path / "model", index_head_dim=65))
    assert [f.message.split(" (")[0] for f in found] == [
        "LINEAR_BACKEND=b12x cannot run attn.wo_a", "LINEAR_BACKEND=b12x cannot run "
        "attn.indexer.wq_b"]
    finding = found[1]
    assert finding.at == "LINEAR_BACKEND"
    assert finding.message == (
        "LINEAR_BACKEND=b12x cannot run attn.indexer.wq_b (replicated; N = index_n_heads x "
        "index_head_dim, K = q_lora_rank) at TP_SIZE=4: N and K per rank must be multiples of "
        "128, but N = 4160, K = 1024")
    assert "B12xFp8BlockScaledMMKernel.can_implement (vllm/model_executor/kernels/linear/" \
           "scaled_mm/b12x.py)" in finding.reason
    assert finding.reason.endswith("LINEAR_BACKEND=auto lets vLLM pick another block-FP8 "
                                   "kernel for it")


def test_a_split_off_128_asks_for_another_tp(sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", o_lora_rank=1000)
    found = findings(node(LINEAR_BACKEND="b12x"), sysctls, folder)
    assert [f.message.split(" at ")[0] for f in found] == [
        "LINEAR_BACKEND=b12x cannot run attn.wo_a (column-parallel; N = o_groups x o_lora_rank, "
        "K = num_attention_heads x head_dim / o_groups)",
        "LINEAR_BACKEND=b12x cannot run attn.wo_b (row-parallel; N = hidden_size, K = o_groups x "
        "o_lora_rank)"]
    assert [f.message.split("but ")[1] for f in found] == [
        "N = 8000 / 4 = 2000, K = 4096", "N = 4096, K = 8000 / 4 = 2000"]
    assert found[0].reason.endswith(
        "no backend takes this split (vLLM's validate_fp8_block_shape wants whole 128-blocks per "
        "rank): pick a TP_SIZE that splits N into multiples of 128")
    assert found[1].reason.endswith("pick a TP_SIZE that splits K into multiples of 128")


def test_weight_blocks_other_than_128_are_one_finding(sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", quantization_config={
        "quant_method": "fp8", "weight_block_size": [64, 64]})
    finding = only("linear-backend-shape", node(LINEAR_BACKEND="b12x"), sysctls, folder)
    assert finding.message == (
        "LINEAR_BACKEND=b12x cannot run every block-FP8 linear layer at TP_SIZE=4: weights in "
        "128 x 128 blocks, but quantization_config.weight_block_size is [64, 64]")


def test_deepseek_v4_linear_layers_per_rank_at_tp_4() -> None:
    """N and K per rank of each block-FP8 layer, as vLLM 0.33.0 builds DeepSeek-V4-Flash."""
    config = json.loads((DSV4 / "config.json").read_text())
    layers = {layer.name: (layer.split, layer.shares(4))
              for layer in model_checks.linear_layers(config, 4, True)}
    assert layers == {
        "attn.fused_wqa_wkv": ("replicated", (1536, 4096)),
        "attn.wq_b": ("column", (8192, 1024)),
        "attn.wo_a": ("column", (2048, 4096)),
        "attn.wo_b": ("row", (4096, 2048)),
        "attn.indexer.wq_b": ("replicated", (8192, 1024)),
        "ffn.shared_experts.gate_up_proj": ("column", (1024, 4096)),
        "ffn.shared_experts.down_proj": ("row", (4096, 512)),
        "dspark context_wkv_proj": ("replicated", (1536, 4096)),
        "dspark main_proj": ("replicated", (4096, 12288)),
    }
    assert "dspark main_proj" not in {layer.name for layer in
                                      model_checks.linear_layers(config, 4, False)}


def test_shared_experts_are_padded_to_whole_blocks_per_rank_as_vllm_does() -> None:
    config = {**json.loads((DSV4 / "config.json").read_text()), "moe_intermediate_size": 1280}
    layers = {layer.name: layer.shares(4) for layer in
              model_checks.linear_layers(config, 4, False)}
    assert layers["ffn.shared_experts.down_proj"] == (4096, 384)  # 10 blocks -> 3 per rank


@pytest.mark.parametrize("changes", [
    {"MAX_MODEL_LEN": "163840.5"}, {"MAX_NUM_SEQS": "0"}, {"MAX_NUM_BATCHED_TOKENS": "8k"},
    {"GPU_MEMORY_UTILIZATION": "1.5"}])
def test_an_unreadable_size_is_bad_value_not_a_budget(changes: dict[str, str],
                                                      sysctls: Path) -> None:
    assert fired(node(**changes), sysctls) == {"bad-value": "error"}


def test_free_memory_below_the_budget_stops_vllm(sysctls: Path) -> None:
    env = node(**TWO_NODES, GPU_MEMORY_UTILIZATION="0.85")
    low = model_checks.Device(80 * 2**30, "MemAvailable, the memory is the host's")
    found = {f.rule: f for f in checks.check(env, series=SERIES_373, host_root=sysctls,
                                             model_dir=DSV4, gpu_memory=lambda: SPARK,
                                             free_memory=lambda: low)}
    assert found["free-memory-below-budget"].message == (
        "the GPU has 80.0 GiB free (MemAvailable, the memory is the host's), less than the "
        "budget of 103.4 GiB (121.7 GiB x GPU_MEMORY_UTILIZATION=0.85)")
    assert found["free-memory-below-budget"].reason.endswith(
        "set GPU_MEMORY_UTILIZATION=0.65 or less")
    plenty = model_checks.Device(110 * 2**30, "NVML")
    assert "free-memory-below-budget" not in {
        f.rule for f in checks.check(env, series=SERIES_373, host_root=sysctls, model_dir=DSV4,
                                     gpu_memory=lambda: SPARK, free_memory=lambda: plenty)}


def test_the_free_memory_is_what_vllm_reads(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       125000000 kB\nMemAvailable:   100000000 kB\n")
    assert model_checks.available_memory(meminfo) == 100_000_000 * 1024
    assert model_checks.available_memory(tmp_path / "none") is None
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeNvml(1, memory_status=3))  # GB10
    monkeypatch.setattr(model_checks, "available_memory", lambda: 7 * 2**30)
    assert model_checks.gpu_free_memory() == model_checks.Device(
        7 * 2**30, "MemAvailable, the memory is the host's")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeNvml(9 * 2**30, free=5 * 2**30))
    assert model_checks.gpu_free_memory() == model_checks.Device(5 * 2**30, "NVML")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeNvml(1, init_status=9))  # no driver
    assert model_checks.gpu_free_memory() is None


def test_without_a_known_device_memory_the_memory_rules_do_not_apply(sysctls: Path) -> None:
    assert findings(node(**ONE_SPARK), sysctls, gpu=None) == []
    assert findings(node(**EIGHT_NODES, GPU_MEMORY_UTILIZATION="0.95"), sysctls, gpu=None) == []


def test_a_model_without_an_index_is_warned_not_refused(sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", {INDEX: None})
    finding = only("model-index-missing", node(**ONE_SPARK), sysctls, folder)
    assert (finding.level, finding.at) == ("warning", "MODEL_HOST_PATH")
    assert finding.message == (f"the model in {folder} has no {INDEX}: whether its weights fit "
                               "in GPU memory is not checked")


def test_a_config_that_is_not_json_is_one_finding_naming_the_file(
        sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", {"config.json": NOT_JSON})
    finding = only("model-unreadable", node(**ONE_SPARK, MOE_BACKEND="b12x"), sysctls, folder)
    assert finding.message == (f"{folder / 'config.json'} cannot be read: it is not JSON "
                               "(Expecting property name enclosed in double quotes: line 3 "
                               "column 1 (char 25))")
    assert finding.reason.startswith("vllm reads it at start and stops on it too")


def test_an_index_without_a_weight_map_is_unreadable(sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", {INDEX: '{"metadata": {"total_size": 1}}'})
    finding = only("model-unreadable", node(), sysctls, folder)
    assert finding.message == f"{folder / INDEX} cannot be read: its weight_map is not a JSON " \
                              "object"


@pytest.mark.parametrize("where", ["nowhere", "empty"])
def test_without_a_model_folder_the_model_checks_do_not_apply(
        where: str, sysctls: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert findings(node(**ONE_SPARK), sysctls, tmp_path / where) == []


def test_another_models_shapes_are_not_checked_but_its_size_is(
        sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", model_type="llama", moe_intermediate_size=2000)
    assert fired(node(), sysctls, folder) == {}
    assert fired(node(**ONE_SPARK), sysctls, folder) == {"memory-budget": "error"}


def test_a_malformed_layout_leaves_the_model_checks_to_bad_value(
        sysctls: Path, tmp_path: Path) -> None:
    folder = model(tmp_path / "model", moe_intermediate_size=2000)
    assert fired(node(TP_SIZE="four"), sysctls, folder) == {"bad-value": "error"}
    assert fired(node(TP_SIZE="0"), sysctls, folder) == {"bad-value": "error"}  # not >= 1


@pytest.mark.parametrize(("args", "on"), [
    (["--enable-expert-parallel"], True), (["-ep", "--seed", "1"], True),
    (["-ep", "--no-enable-expert-parallel"], False), (["--seed", "1"], False), ([], False)])
def test_expert_parallelism_is_read_from_the_extra_arguments(args: list[str], on: bool) -> None:
    assert model_checks.expert_parallel(args) is on


class FakeNvml:
    """NVML's C functions as ctypes calls them: status codes, results through pointers."""

    def __init__(self, total: int, memory_status: int = 0, init_status: int = 0,
                 free: int = 0) -> None:
        self.total, self.memory_status, self.init_status = total, memory_status, init_status
        self.free = free
        self.shut = False

    def nvmlInit_v2(self) -> int:
        return self.init_status

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, handle: Any) -> int:
        return 0 if index == 0 else 1

    def nvmlDeviceGetMemoryInfo(self, handle: Any, memory: Any) -> int:
        memory._obj.total, memory._obj.free = self.total, self.free
        return self.memory_status

    def nvmlShutdown(self) -> int:
        self.shut = True
        return 0


def test_nvml_gives_the_first_gpus_total_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(143_771 * 2**20)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: nvml)
    assert model_checks.nvml_total_memory() == 143_771 * 2**20
    assert nvml.shut


@pytest.mark.parametrize("nvml", [FakeNvml(1, memory_status=3),  # NOT_SUPPORTED, as on GB10
                                  FakeNvml(1, init_status=9)])  # no driver
def test_nvml_without_an_answer_gives_none(nvml: FakeNvml,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctypes, "CDLL", lambda name: nvml)
    assert model_checks.nvml_total_memory() is None


def test_without_nvmls_library_there_is_no_gpu_memory() -> None:
    assert model_checks.nvml_total_memory("libnvidia-ml-not-here.so.1") is None


def test_images_on_the_text_checkpoint_name_both_flags_and_the_two_ways_out(
        sysctls: Path) -> None:
    finding = only("images-on-text-checkpoint", node(LIMIT_MM_IMAGES="4"), sysctls)
    assert (finding.level, finding.at) == ("warning", "LIMIT_MM_IMAGES")
    assert finding.message == (
        f"LIMIT_MM_IMAGES=4 allows images, but the model in {DSV4} is a text checkpoint "
        "(DeepseekV4ForCausalLM, no vision_n_layers in its config.json)")
    assert "--limit-mm-per-prompt and the entrypoint's --disable-chunked-mm-input are then " \
           "read by nothing" in finding.reason
    assert finding.reason.endswith("serve the vision checkpoint with this tag, or set "
                                   "LIMIT_MM_IMAGES=0 for a node that takes text only")
    vision = Path(__file__).parents[1] / "data" / "models" / "dsv4-flash-vision"
    assert "images-on-text-checkpoint" not in fired(node(LIMIT_MM_IMAGES="4"), sysctls, vision)


def test_dspark_on_a_config_without_its_target_layers_is_refused_naming_key_and_file(
        sysctls: Path, tmp_path: Path) -> None:
    """vLLM's DSpark draft reads dspark_target_layer_ids as it is built: a checkpoint whose
    config.json lacks it stops the load on every node (the smoke's layer-weights refuses the
    same, tests/smoke/test_smoke_layers.py)."""
    folder = model(tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    del config["dspark_target_layer_ids"]
    (folder / "config.json").write_text(json.dumps(config))
    finding = only("dspark-target-layers-missing", node(), sysctls, folder)
    assert (finding.level, finding.at) == ("error", "VLLM_ENABLE_DSPARK")
    assert finding.message == (
        f"VLLM_ENABLE_DSPARK=1 runs the DSpark draft, but {folder / 'config.json'} has no "
        "dspark_target_layer_ids, the target layers the draft reads")
    assert "DSparkDeepseekV4Model.__init__" in finding.reason
    assert finding.reason.endswith("add them to its config.json, or set VLLM_ENABLE_DSPARK=0")
    assert "dspark-target-layers-missing" not in fired(node(VLLM_ENABLE_DSPARK="0"), sysctls,
                                                        folder)
