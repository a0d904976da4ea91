"""The KV cache a cluster got, beside check-env's prediction (nodes/memory_readout.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkbake.nodes import cluster_readout, memory_readout
from sparkbake.nodes.memory_readout import RankMemory

GIB = 1 << 30
# a GPU worker's and a CPU worker's lines, as vLLM 0.33.0 logs them
GPU_LOG = ("(EngineCore pid=71) INFO 12-05 10:01:02 [gpu_worker.py:773] Available KV cache "
           "memory: 8.33 GiB\n(EngineCore pid=71) INFO 12-05 10:01:03 [kv_cache_utils.py:1149] "
           "GPU KV cache size: 199,424 tokens, Maximum concurrency for 163,840 tokens per "
           "request: 1.22x\n")
CPU_LOG = ("INFO 12-05 10:01:02 [cpu_worker.py:261] Explicitly set (1.00/15.52) GiB for KV "
           "cache on node 0.\nINFO 12-05 10:01:03 [kv_cache_utils.py:1149] CPU KV cache size: "
           "43,690 tokens, Maximum concurrency for 8,192 tokens per request: 5.33x\n")
HEAD: dict[str, Any] = {"role": "head", "requested": int(103.45 * GIB), "kv_room": int(8.4 * GIB),
        "kv_tokens": 200_000, "non_kv": int(95.05 * GIB), "layout": "TP 2 on 2 node(s)"}


def test_the_logs_figures_are_read_from_a_gpu_and_a_cpu_worker() -> None:
    assert memory_readout.parse(cluster_readout.kv_cache_lines(GPU_LOG)) == (
        round(8.33 * GIB), 199_424)
    assert memory_readout.parse(cluster_readout.kv_cache_lines(CPU_LOG)) == (GIB, 43_690)
    assert memory_readout.parse(()) == (None, None)


def test_a_readout_within_ten_percent_is_quiet_and_one_beyond_is_named() -> None:
    near = RankMemory(0, "head", round(8.33 * GIB), 199_424, HEAD)
    assert memory_readout.warnings([near]) == []
    far = RankMemory(0, "head", round(6.0 * GIB), 140_000, HEAD)
    assert memory_readout.warnings([far]) == [
        "rank 0: KV room 6.00 GiB is 29% away from the predicted 8.40 GiB: the memory model "
        "is off for this layout; check-env now takes the measured non-KV share for it",
        "rank 0: KV cache size 140,000 tokens is 30% away from the predicted 200,000 tokens: "
        "the memory model is off for this layout; check-env now takes the measured non-KV "
        "share for it"]


def test_the_measured_non_kv_share_is_kept_per_layout_and_outlives_the_record(
        tmp_path: Path) -> None:
    worker = {**HEAD, "role": "worker", "requested": HEAD["requested"]}
    ranks = [RankMemory(0, "head", round(8.33 * GIB), 199_424, HEAD),
             RankMemory(1, "worker", round(10.5 * GIB), None, worker)]
    entry = memory_readout.memory_record(ranks, "2026-12-05")
    assert entry["layout"] == "TP 2 on 2 node(s)"
    assert entry["non_kv"] == {"head": HEAD["requested"] - round(8.33 * GIB),
                               "worker": HEAD["requested"] - round(10.5 * GIB)}
    kept = tmp_path / "tag.memory.json"
    memory_readout.remember(kept, entry)
    share = memory_readout.measured_shares(kept)
    assert share("head", "TP 2 on 2 node(s)") == (
        float(HEAD["requested"] - round(8.33 * GIB)), "measured by up on 2026-12-05")
    assert share("head", "TP 4 on 4 node(s)") is None
    assert memory_readout.measured_shares(tmp_path / "none.json")("head", "x") is None


def test_a_rank_without_a_prediction_says_why() -> None:
    assert memory_readout.describe(RankMemory(1, "worker", GIB, None, None)) == (
        "KV room 1.00 GiB, KV cache size not logged; no prediction (its model is not on this "
        "host, or its size is not known)")


def test_a_worker_that_logs_no_pool_says_so_beside_its_prediction() -> None:
    predicted = {"kv_room": 2 * GIB, "kv_tokens": 2_097_152}
    assert memory_readout.describe(RankMemory(1, "worker", None, None, predicted)) == (
        "KV room not logged (predicted 2.00 GiB), KV cache size not logged (predicted "
        "2,097,152 tokens)")
