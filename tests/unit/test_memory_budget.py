"""The memory budget (images/memory_budget.py, model_checks.py's memory section): vLLM's own
rule on the rank with the least room, the non-KV share as a GB10 spends it, a pinned pool as
vLLM takes it, and the figures of a file that passes. The layouts are production-3.73-vision's
servable worker (images/smoke/dsv4-4node/accept) with DeepSeek-V4-Flash's real shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.nodeenv import write_sysctls

from .test_model_checks import DSV4, SPARK, model_checks
from .test_preflight import IMAGE_373, SERIES_373, checks, servable

GIB = 1 << 30
PAIR = {"NNODES": "2", "TP_SIZE": "2", "MAX_MODEL_LEN": "163840"}  # the reference pair


@pytest.fixture
def sysctls(tmp_path: Path) -> Path:
    return write_sysctls(tmp_path / "sys")


def memory_findings(env: dict[str, str], host_root: Path, gpu: int | None = SPARK,
                    image: Any = IMAGE_373, **kwargs: Any) -> dict[str, Any]:
    """The findings of the memory rules, by rule."""
    found = checks.check(env, series=SERIES_373, host_root=host_root, image=image, model_dir=DSV4,
                         gpu_memory=lambda: gpu, **kwargs)
    return {f.rule: f for f in found if f.rule in (
        "memory-budget", "kv-cache-pin-too-large", "host-memory-margin",
        "free-memory-below-budget")}


def figures(env: dict[str, str], host_root: Path, gpu: int | None = SPARK,
            **kwargs: Any) -> dict[str, dict[str, Any]]:
    ctx = checks.context(env, checks.load_rules(), SERIES_373, host_root, IMAGE_373,
                         model_dir=DSV4, gpu_memory=lambda: gpu, **kwargs)
    return {numbers["role"]: numbers for numbers in checks.memory(ctx)}


@pytest.mark.parametrize("sequences", ["1", "7", "24", "256"])
def test_the_pair_is_refused_at_0_75_and_0_82_and_starts_at_0_85_whatever_max_num_seqs(
        sequences: str, sysctls: Path) -> None:
    """The reference pair's three figures come from the budget, not from a rule for the
    layout: MAX_NUM_SEQS decides how many requests the pool holds at once, not whether vLLM
    starts, so no value of it changes the verdict."""
    sizes = {**PAIR, "MAX_NUM_SEQS": sequences, "MAX_CUDAGRAPH_CAPTURE_SIZE": "",
             "CUDAGRAPH_CAPTURE_SIZES": ""}
    for utilization, refused in (("0.75", True), ("0.82", True), ("0.85", False)):
        found = memory_findings(servable(**sizes, GPU_MEMORY_UTILIZATION=utilization), sysctls)
        assert ("memory-budget" in found) is refused, (utilization, sequences)


def test_a_refusal_keeps_its_numbers_and_says_what_to_set(sysctls: Path) -> None:
    finding = memory_findings(servable(**PAIR, GPU_MEMORY_UTILIZATION="0.82"),
                              sysctls)["memory-budget"]
    assert finding.message == (
        "vLLM will not start: the head has 5.7 GiB of KV room for one request of 163840 "
        "tokens, which needs 6.8 GiB (121.7 GiB, NVML, x GPU_MEMORY_UTILIZATION=0.82 = 99.8 "
        "GiB, less a non-KV share of ~94.1 GiB: weights 74.0, activations 2.9, graphs 2.0, "
        "runtime 13.2, API server 2.0)")
    assert finding.reason.endswith(
        "set GPU_MEMORY_UTILIZATION=0.83 or more (above the host margin's 0.79: see "
        "host-memory-margin); or set MAX_NUM_BATCHED_TOKENS=6656 or less (the sliding-window "
        "caches hold two batches in flight for each request); or set MAX_MODEL_LEN=14592 or "
        "less; or spread the weights over more nodes, TP_SIZE=3 or more")
    for source in ("request_memory", "memory_profiling", "determine_available_memory",
                   "_check_enough_kv_cache_memory", "the head, with the API server"):
        assert source in finding.reason


def test_each_suggested_setting_is_one_the_budget_then_accepts(sysctls: Path) -> None:
    base = {**PAIR, "GPU_MEMORY_UTILIZATION": "0.82"}
    for change in ({"GPU_MEMORY_UTILIZATION": "0.83"}, {"MAX_NUM_BATCHED_TOKENS": "6656"},
                   {"MAX_MODEL_LEN": "14592"}):
        assert "memory-budget" not in memory_findings(servable(**{**base, **change}), sysctls)


def test_a_passing_file_gets_its_figures_per_rank_kind(sysctls: Path) -> None:
    """The four-node reference: the pool vLLM logs is the head's, the least room."""
    numbers = figures(servable(), sysctls)
    line = model_checks.memory_budget.line
    assert line(numbers["head"]) == (
        "head: 121.7 GiB (NVML) x 0.75 = 91.3 GiB; non-KV 56.7 GiB (weights 37.0, activations "
        "2.5, graphs 2.0, runtime 13.2, API server 2.0); KV room 34.5 GiB: KV cache size "
        "1,770,189 tokens, 4.50x requests of 393,216 at once (MAX_NUM_SEQS=8)")
    assert numbers["worker"]["kv_room"] - numbers["head"]["kv_room"] == 2 * GIB
    assert numbers["worker"]["kv_tokens"] == numbers["head"]["kv_tokens"]
    assert numbers["head"]["starts"] and numbers["head"]["total_source"] == "NVML"


def test_one_node_has_only_a_head(sysctls: Path) -> None:
    env = servable(NNODES="1", NODE_RANK="0", TP_SIZE="1")
    assert set(figures(env, sysctls)) == {"head"}
    finding = memory_findings(env, sysctls)["memory-budget"]
    assert finding.message.startswith("vLLM will not start: the head has nothing (77.5 GiB "
                                      "short) of KV room")
    assert finding.reason.endswith("spread the weights over more nodes, TP_SIZE=3 or more")


def test_the_device_total_is_what_cudamemgetinfo_reports_on_a_gb10(sysctls: Path) -> None:
    """A GB10's NVML gives no memory figures: the tag's device_memory_gib counts, 121.7."""
    assert IMAGE_373.capabilities["device_memory_gib"] == 121.7
    numbers = figures(servable(), sysctls, gpu=None)["head"]
    assert numbers["total"] == int(121.7 * GIB)
    assert numbers["total_source"] == ("the tag's device_memory_gib: 121.7, what cudaMemGetInfo "
                                       "reports")
    assert figures(servable(), sysctls, gpu=100 * GIB)["head"]["total"] == 100 * GIB


def test_the_reference_pin_at_tp_2_leaves_the_host_no_floor(sysctls: Path) -> None:
    """vLLM takes a pinned pool whatever the utilization: at TP 2 the reference's ~26 GB and
    the head's non-KV share leave less than earlyoom's floor."""
    env = servable(**PAIR, GPU_MEMORY_UTILIZATION="0.85", KV_CACHE_MEMORY_BYTES="26000000000")
    found = memory_findings(env, sysctls)
    assert set(found) == {"kv-cache-pin-too-large"}
    assert found["kv-cache-pin-too-large"].message == (
        "KV_CACHE_MEMORY_BYTES=26000000000 (24.2 GiB) and the head's non-KV share of ~94.1 GiB "
        "hold 118.3 GiB of the 121.7 GiB (NVML), leaving less than the host's floor of 3.4 GiB")
    assert found["kv-cache-pin-too-large"].reason.endswith(
        "set KV_CACHE_MEMORY_BYTES=25928541404 or less, or leave it empty to size the pool by "
        "GPU_MEMORY_UTILIZATION")
    fits = servable(**PAIR, GPU_MEMORY_UTILIZATION="0.85", KV_CACHE_MEMORY_BYTES="25928541404")
    assert memory_findings(fits, sysctls) == {}


def test_a_pin_below_one_request_is_refused_as_vllm_s_planner_refuses_it(
        sysctls: Path) -> None:
    found = memory_findings(servable(KV_CACHE_MEMORY_BYTES="2000000000"), sysctls)
    assert found["kv-cache-pin-too-large"].message == (
        "KV_CACHE_MEMORY_BYTES=2000000000 (1.9 GiB) cannot hold one request of 393216 tokens, "
        "which needs 7.7 GiB")
    pinned = figures(servable(KV_CACHE_MEMORY_BYTES="26000000000"), sysctls)["head"]
    assert (pinned["pin"], pinned["kv_room"], pinned["requested"]) == (26 * 10**9, 26 * 10**9,
                                                                        None)


def test_a_measured_share_replaces_the_model_and_says_so(sysctls: Path) -> None:
    asked: list[tuple[str, str]] = []

    def measured(role: str, layout: str) -> tuple[float, str] | None:
        asked.append((role, layout))
        return (60 * GIB, "measured by up on 2026-12-05") if role == "head" else None
    numbers = figures(servable(), sysctls, measured=measured)
    assert asked[0] == ("head", "TP 4 on 4 node(s), DCP 1, DSpark, 393216 tokens, 8192 batched")
    assert numbers["head"]["non_kv"] == 60 * GIB
    assert numbers["head"]["non_kv_parts"] == "measured by up on 2026-12-05"
    assert numbers["worker"]["non_kv_parts"].startswith("weights 37.0")


def test_unset_sizes_are_vllm_s_defaults(sysctls: Path) -> None:
    env = servable(NNODES="2", TP_SIZE="2", MAX_MODEL_LEN="", MAX_NUM_BATCHED_TOKENS="",
                   GPU_MEMORY_UTILIZATION="0.85")
    numbers = figures(env, sysctls)["head"]
    assert numbers["max_model_len"] == 1048576  # DeepseekV4Config's max_position_embeddings
    assert numbers["layout"].endswith("1048576 tokens, 2048 batched")
