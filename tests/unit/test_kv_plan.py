"""The host model of vLLM's KV cache planner (images/kv_plan.py): DeepSeek-V4-Flash's plan,
byte for byte as vLLM 0.33.0 and 0.34.0 make it (tests/smoke/test_kv_plan_agrees.py holds it
to their planners), and the inputs it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.smoke.image_modules import image_module

kv_plan = image_module("kv_plan")
FLASH = json.loads((Path(__file__).parents[1] / "data/models/dsv4-flash/config.json")
                   .read_text())
GIB = 1 << 30
REFERENCE_BATCHED = 8192  # the reference deployment's MAX_NUM_BATCHED_TOKENS


def flash_plan(context: int = 163840, **layout: Any) -> Any:
    settings = {"tp_size": 2, "dspark": True, "max_num_batched_tokens": REFERENCE_BATCHED,
                **layout}
    plan = kv_plan.plan(FLASH, kv_plan.Layout(context, **settings))
    assert plan is not None
    return plan


def by_name(plan: Any) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for group in plan.groups:
        groups.setdefault(group.cache.name, []).append(group)
    return groups


def test_every_group_s_block_costs_the_widest_group_s() -> None:
    """The compressed sparse layers' group is widest: 21 compressed 1:4 pages (64 states of
    584 B, padded to 37,440), 21 indexer key pages (64 x 132 B, padded to 8,640) and 20
    compressed 1:128 pages (2 x 584 B, padded to 1,728)."""
    plan = flash_plan()
    widest = by_name(plan)["compressed 1:4"][0]
    assert widest.layers == ((37440, 21), (8640, 21), (1728, 20))
    assert widest.page_bytes == plan.block_bytes == 1_002_240


def test_the_c4_state_group_reserves_4099_blocks_per_request() -> None:
    """A sliding window of 8 tokens in blocks of 4, with two batches of 8,192 in flight:
    cdiv(8 - 1 + 16,384, 4) + 1 blocks."""
    (state,) = by_name(flash_plan())["compressor 1:4 state"]
    assert state.layers == ((32832, 21), (8640, 21))
    assert state.blocks_per_request == 4099


def test_one_request_of_163840_tokens_at_tp_2_with_the_draft() -> None:
    """259 + 259 (sliding window, two groups) + 640 (compressed) + 4,099 (1:4 states) +
    2,065 (1:128 states) blocks: 6.83 GiB. vLLM starts only with one block more, the null
    block its pool holds back: 6.84 GiB."""
    plan = flash_plan()
    assert [group.blocks_per_request for group in plan.groups] == [259, 259, 640, 4099, 2065]
    assert plan.request_bytes == 7_338_401_280
    assert round(plan.request_bytes / GIB, 2) == 6.83
    assert plan.least_available == 7_339_403_520
    assert round(plan.least_available / GIB, 2) == 6.84


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("dspark", [False, True])
@pytest.mark.parametrize(("context", "request_bytes"), [(163840, 7_338_401_280),
                                                  (393216, 8_236_408_320)])
def test_the_request_is_the_same_at_every_tp_with_or_without_the_draft(
        tp: int, dspark: bool, context: int, request_bytes: int) -> None:
    """MLA keeps one latent head, so each rank holds the whole cache; the draft's three
    sliding-window layers join the target's 43 in groups no wider than the widest."""
    plan = flash_plan(context, tp_size=tp, dspark=dspark)
    assert (plan.block_bytes, plan.request_bytes) == (1_002_240, request_bytes)


def test_the_draft_s_layers_join_the_sliding_window_groups() -> None:
    assert [g.layers for g in by_name(flash_plan(dspark=False))["sliding window"]] == \
        [((37440, 22),), ((37440, 21),)]
    assert [g.layers for g in by_name(flash_plan(dspark=True))["sliding window"]] == \
        [((37440, 23),), ((37440, 23),)]


def test_the_sliding_windows_hold_the_tokens_in_flight() -> None:
    """At vLLM's default of 2,048 batched tokens on a GB10 API server, two batches in flight:
    67 + 67 + 640 + 1,027 + 529 blocks."""
    plan = kv_plan.plan(FLASH, kv_plan.Layout(163840))
    assert plan.layout.in_flight == 4096
    assert [group.blocks_per_request for group in plan.groups] == [67, 67, 640, 1027, 529]
    assert plan.request_bytes == 2330 * 1_002_240


def test_a_short_context_holds_no_more_than_itself() -> None:
    plan = flash_plan(1000)
    assert [group.blocks_per_request for group in plan.groups] == [17, 17, 4, 251, 126]


@pytest.mark.parametrize(("context", "available", "blocks", "tokens", "concurrency"), [
    (163840, 7_516_192_768, 7499, 167800, 1.0241737230264956),
    (163840, 65_820_374_588, 65673, 1469525, 8.969270691068013),
    (393216, 22_011_719_737, 21962, 1050840, 2.6724263811146263),
])
def test_the_capacity_vllm_logs(context: int, available: int, blocks: int, tokens: int,
                                concurrency: float) -> None:
    """"GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Cx", as
    vLLM 0.33.0 logged them for these memories (the null block counted among the blocks)."""
    plan = flash_plan(context)
    assert plan.blocks(available) == blocks
    assert plan.concurrency(available) == concurrency
    assert plan.tokens(available) == tokens


def test_vllm_refuses_one_byte_short_of_a_request_and_its_null_block() -> None:
    plan = flash_plan()
    assert plan.refused(plan.least_available - 1)
    assert not plan.refused(plan.least_available)
    assert plan.refused(0) and plan.refused(-1)


@pytest.mark.parametrize(("context", "available", "longest"), [
    (163840, 7_301_444_403, 154112), (393216, 7_516_192_768, 208896),
    (163840, 1_002_240, 0), (163840, 65_820_374_588, 163840)])
def test_the_longest_context_vllm_s_refusal_names(context: int, available: int,
                                                  longest: int) -> None:
    """"Based on the available memory, the estimated maximum model length is N", as vLLM
    0.33.0 wrote it for these memories."""
    assert flash_plan(context).longest(available) == longest


@pytest.mark.parametrize(("change", "why"), [
    ({"max_model_len": 0}, "max_model_len must be a positive integer"),
    ({"tp_size": 0}, "tp_size must be"), ({"max_num_batched_tokens": -5}, "must be"),
    ({"dcp_size": 2}, "asserts on DeepSeek-V4's sliding-window caches under DCP"),
])
def test_layouts_vllm_would_not_plan_are_refused(change: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        kv_plan.Layout(**{"max_model_len": 163840, **change})


@pytest.mark.parametrize(("change", "why"), [
    ({"block_size": 128}, "only the entrypoint's 256"),
    ({"kv_cache_dtype": "bfloat16"}, "takes only fp8")])
def test_layouts_deepseek_v4_does_not_take_are_refused(change: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        kv_plan.plan(FLASH, kv_plan.Layout(**{"max_model_len": 163840, **change}))


# the CPU suite's tiny Llama (tests/tiny_model.py): 2 layers, 1 KV head of 64, bfloat16
TINY = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "hidden_size": 128, "head_dim": 64, "torch_dtype": "bfloat16"}


def test_a_full_attention_model_has_one_group_of_its_layers() -> None:
    """FullAttentionSpec: block x KV heads per rank x (K + V) x head_dim x dtype a page, one
    group of every layer; at TP 2 the one KV head is replicated, not split."""
    layout = kv_plan.Layout(8192, tp_size=2, block_size=128, kv_cache_dtype="auto")
    plan = kv_plan.plan(TINY, layout)
    assert plan is not None
    assert plan.block_bytes == 2 * 128 * 1 * 2 * 64 * 2  # 65,536 B: both layers' pages
    assert plan.request_blocks == 64  # 8192 / 128
    assert plan.tokens(1 << 30) == 2_097_152 and plan.concurrency(1 << 30) == 256.0
    fp8 = kv_plan.plan(TINY, kv_plan.Layout(8192, block_size=128, kv_cache_dtype="fp8"))
    assert fp8 is not None and fp8.block_bytes == plan.block_bytes // 2


@pytest.mark.parametrize("change", [{"sliding_window": 4096}, {"layer_types": ["full"]},
                                    {"torch_dtype": "int4"}, {"hidden_size": None}])
def test_a_model_with_other_specs_has_no_full_attention_plan(change: dict[str, Any]) -> None:
    layout = kv_plan.Layout(8192, block_size=128, kv_cache_dtype="auto")
    assert kv_plan.plan({**TINY, **change}, layout) is None


@pytest.mark.parametrize("config", [
    {**FLASH, "model_type": "llama"}, {key: value for key, value in FLASH.items()
                                       if key != "model_type"},
    {**FLASH, "head_dim": None}, {**FLASH, "sliding_window": 0},
    {**FLASH, "compress_ratios": [8] * 44}, {**FLASH, "compress_ratios": [4] * 10},
    {**FLASH, "num_hidden_layers": "43"}, {**FLASH, "layer_types": "sliding_attention"},
])
def test_a_model_it_does_not_know_has_no_plan(config: dict[str, Any]) -> None:
    assert kv_plan.plan(config, kv_plan.Layout(163840)) is None


def test_layer_types_come_before_the_legacy_compress_ratios() -> None:
    config = {"num_hidden_layers": 3, "compress_ratios": [4, 4, 4],
              "layer_types": ["sliding_attention", "heavily_compressed_attention",
                              "compressed_sparse_attention"]}
    assert kv_plan.compress_ratios(config) == [1, 128, 4]
    assert kv_plan.compress_ratios({**config, "layer_types": None}) == [4, 4, 4]


def test_without_either_the_ratios_are_transformers_default() -> None:
    assert kv_plan.compress_ratios({"num_hidden_layers": 5}) == [128, 128, 128, 4, 128]


def test_the_legacy_rates_fold_into_compress_rates() -> None:
    config = {"num_hidden_layers": 2, "compress_ratios": [4, 128], "compress_rate_hca": 4}
    assert kv_plan.compress_ratios(config) == [4, 4]
    assert kv_plan.compress_ratios({**config, "compress_rate_hca": 16}) is None


def test_a_nested_text_config_is_read() -> None:
    nested = {"model_type": "deepseek_v4", "text_config": FLASH}
    plan = kv_plan.plan(nested, kv_plan.Layout(163840))
    assert plan is not None and plan.block_bytes == 1_002_240


def test_the_draft_has_n_mtp_layers_when_the_config_says() -> None:
    plan = kv_plan.plan({**FLASH, "n_mtp_layers": 1},
                        kv_plan.Layout(163840, dspark=True))
    assert [g.layers for g in by_name(plan)["sliding window"]] == \
        [((37440, 22),), ((37440, 22),)]
