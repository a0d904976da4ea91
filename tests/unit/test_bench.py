"""The bench's decisions without a server: its figures read from `vllm bench serve`'s result
JSON and the head's /metrics as vLLM 0.33.0 wrote them (recorded from the cpu-3.73 image
serving a tiny model with ngram speculation), and the guard against foreign traffic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkbake import records
from sparkbake.nodes import bench, cluster_readout
from sparkbake.nodes.bench import BenchFigures, Load
from sparkbake.nodes.serve_client import parse_metrics

DATA = Path(__file__).resolve().parents[1] / "data" / "bench"
SPEC = Load(prompts=4, input_len=64, output_len=64)  # the recorded runs' load
# the head's counters after the run; before it, the run's own were at these values
AFTER = parse_metrics((DATA / "metrics-after-ngram.txt").read_text())
BEFORE = {**AFTER, cluster_readout.DRAFTS: 0.0, cluster_readout.ACCEPTED: 0.0,
          bench.FINISHED: AFTER[bench.FINISHED] - SPEC.prompts}


def result(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return document


def test_the_figures_of_a_speculating_run_match_vllms_own() -> None:
    recorded = result("result-ngram")
    figures = bench.figures(recorded, BEFORE, AFTER, SPEC, "2026-12-05")
    assert (figures.decode_tok_s, figures.output_tok_s, figures.ttft_median_ms) == (
        round(1000 / recorded["median_tpot_ms"], 1), 1234.05, 17.76)
    # the acceptance read off /metrics over the run is vLLM's own figure for it
    assert figures.speculates
    assert figures.acceptance_length == pytest.approx(
        recorded["spec_decode_acceptance_length"], abs=1e-3)
    assert figures.describe() == (
        "decode 2102.5 tok/s per stream (TPOT median 0.48 ms), output 1234.0 tok/s, TTFT "
        "median 17.8 ms (mean 18.6 ms); acceptance: 3.76 (4 prompts of 64 tokens, 64 out, "
        "1 at a time)")
    assert records.from_json(BenchFigures, records.to_json(figures)) == figures


def test_a_tag_that_does_not_speculate_says_so() -> None:
    plain = {name: value for name, value in AFTER.items() if "spec_decode" not in name}
    figures = bench.figures(result("result-plain"), {**plain, bench.FINISHED: 1.0},
                            {**plain, bench.FINISHED: 5.0}, Load(4, 64, 32), "d")
    assert (figures.speculates, figures.acceptance_length) == (False, None)
    assert "acceptance_length" not in records.to_json(figures)
    assert "acceptance: none (the tag does not speculate here)" in figures.describe()


def test_a_run_whose_requests_failed_gives_no_figures() -> None:
    with pytest.raises(ValueError, match=r"^4 of 4 requests failed, 0 completed$"):
        bench.figures(result("result-failed"), BEFORE, AFTER, SPEC, "d")


def test_the_command_is_vllms_bench_serve_without_warmup_or_ready_check() -> None:
    command = bench.bench_command("http://127.0.0.1:8300", "tiny", "/model", SPEC, "/out")
    assert command[:2] == ["bench", "serve"]
    assert "--num-warmups" not in command and "--ready-check-timeout-sec" not in command
    assert command[command.index("--num-prompts") + 1] == "4"
    assert bench.base_url({"API_PORT": "8300"}) == "http://127.0.0.1:8300"
    assert bench.base_url({"API_HOST": "fd00::11", "API_PORT": "8300"}) == \
        "http://[fd00::11]:8300"


def busy(running: float, waiting: float = 0.0, finished: float = 5.0) -> dict[str, float]:
    return {**AFTER, "vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting,
            bench.FINISHED: finished}


@pytest.mark.parametrize(("before", "during", "after", "why"), [
    (busy(0), [busy(1), busy(0, 1)], busy(0, finished=9), None),
    (busy(1, 1), [], busy(0), "2 request(s) were in flight at the head before the run"),
    (busy(0), [busy(1), busy(2, 1)], busy(0, finished=9),
     "3 requests were in flight at the head during the run, the bench sends 1 at a time"),
    (busy(0), [busy(1)], busy(0, finished=11),
     "2 request(s) the bench did not send finished at the head during the run"),
])
def test_foreign_traffic_is_told_by_the_heads_counters(
        before: dict[str, float], during: list[dict[str, float]], after: dict[str, float],
        why: str | None) -> None:
    assert bench.foreign(before, during, after, SPEC) == why
