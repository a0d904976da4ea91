"""The memory model against every figure the reference documents measured that vLLM 0.33.0
and 0.34.0 can express (tests/data/reference-memory.json: each figure, its document, its
layout and what it implies). The non-KV constants of images/preflight.json were fitted to
these; a change to the model or to a constant that moves any of them fails here, naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.nodeenv import write_sysctls

from .test_memory_budget import figures, memory_findings
from .test_preflight import servable

FIGURES = json.loads((Path(__file__).parents[1] / "data" / "reference-memory.json").read_text())
BY_ID = {figure["id"]: figure for figure in FIGURES["figures"]}
EXPRESSIBLE = [figure for figure in FIGURES["figures"] if figure["expressible"]]
GIB = 1 << 30


def outcome(numbers: dict[str, Any]) -> str:
    if numbers["kv_room"] <= 0:
        return "no-room"
    return "starts" if numbers["starts"] else "short"


def lands(figure: dict[str, Any], host_root: Path) -> dict[str, dict[str, Any]]:
    return figures(servable(**figure["layout"]), host_root)


@pytest.mark.parametrize("figure", [f for f in EXPRESSIBLE if "expect" in f],
                         ids=lambda figure: figure["id"])
def test_each_start_or_refusal_comes_out_as_measured(figure: dict[str, Any],
                                                     tmp_path: Path) -> None:
    numbers = lands(figure, write_sysctls(tmp_path))
    for role, expected in figure["expect"].items():
        assert outcome(numbers[role]) == expected, (figure["figure"], role, numbers[role])


def test_the_four_node_pool_is_the_tokens_vllm_logged(tmp_path: Path) -> None:
    figure = BY_ID["four-dcp1-pool"]
    predicted = lands(figure, write_sysctls(tmp_path))["head"]["kv_tokens"]
    assert abs(predicted - figure["tokens"]) <= figure["rounding"], predicted


def test_the_launcher_s_pin_caps_the_pool_below_what_0_75_gives(tmp_path: Path) -> None:
    host_root = write_sysctls(tmp_path)
    figure = BY_ID["four-pin-26gb"]
    pinned = lands(figure, host_root)["head"]
    unpinned = lands(BY_ID[figure["below"]], host_root)["head"]
    assert pinned["kv_room"] == 26 * 10**9 < unpinned["kv_room"]
    assert pinned["kv_tokens"] < unpinned["kv_tokens"]
    assert "kv-cache-pin-too-large" not in memory_findings(servable(**figure["layout"]),
                                                           host_root)


def test_the_host_margin_warns_where_a_worker_was_killed(tmp_path: Path) -> None:
    host_root = write_sysctls(tmp_path)
    for utilization, expected in BY_ID["four-host-free"]["host_margin"].items():
        found = memory_findings(servable(GPU_MEMORY_UTILIZATION=utilization), host_root)
        assert ("host-memory-margin" in found) is (expected == "warns"), utilization


def test_the_pair_figures_bound_the_api_server_share_and_the_fit_sits_inside(
        tmp_path: Path) -> None:
    """0.82 left the worker room and the head none; 0.75 left no rank room: the API
    server's share lies between what those allow, and the fitted 2 GiB within it."""
    host_root = write_sysctls(tmp_path)
    at = {u: lands(BY_ID[f"pair-{u}"], host_root) for u in ("0.75", "0.82")}
    head, worker = at["0.82"]["head"], at["0.82"]["worker"]
    least = head["needed_kv_room"] - head["kv_room"]  # the head's room is short by this
    most = -at["0.75"]["worker"]["kv_room"] + (head["non_kv"] - worker["non_kv"])
    assert least <= head["non_kv"] - worker["non_kv"] <= most
    assert (round(least / GIB, 1), round(most / GIB, 1)) == (1.2, 2.8)


def test_figures_no_layout_of_ours_expresses_say_why() -> None:
    for figure in FIGURES["figures"]:
        assert figure["expressible"] or figure["why"], figure["id"]
        assert figure["document"] and figure["implies" if figure["expressible"] else "why"]
