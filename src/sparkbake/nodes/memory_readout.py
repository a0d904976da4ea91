"""The KV cache a cluster really got, beside what check-env predicted for it.

After `up`, each rank's engine log says how much memory its worker found for the KV cache
(a GPU worker's "Available KV cache memory: X GiB", a CPU worker's "(X/Y) GiB for KV cache")
and the head's how many tokens the pool holds ("KV cache size: N tokens"). `up` sets them
beside the prediction for the rank's file (images/memory_budget.py), warns where one is
more than 10 % away, and records both per layout in build/clusters/TAG.json and, per layout, in
build/clusters/TAG.memory.json, which `down` keeps: check-env then takes the non-KV share
measured there for a layout this cluster has run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbake.files import atomic_write, read_json

__all__ = ["TOLERANCE", "RankMemory", "describe", "measured_shares", "memory_record", "parse",
           "remember", "warnings"]

GIB = 1 << 30
TOLERANCE = 0.10  # a readout further than this from its prediction is a warning
ROOM = re.compile(r"Available KV cache memory: ([0-9.]+) GiB|\(([0-9.]+)/[0-9.]+\) GiB for KV "
                  r"cache")
TOKENS = re.compile(r"KV cache size: ([0-9,]+) tokens")


@dataclass(frozen=True)
class RankMemory:
    """One rank's KV cache: measured (from its log) and predicted (check-env's figures)."""

    rank: int
    role: str  # head | worker
    room: int | None  # bytes vLLM found for the KV cache
    tokens: int | None  # the pool's tokens, as the head logs them
    predicted: Mapping[str, Any] | None  # memory_budget.figures of the rank's file

    def non_kv(self) -> int | None:
        """The non-KV share this rank spent: what vLLM requested less what it found."""
        asked = (self.predicted or {}).get("requested")
        return None if asked is None or self.room is None else int(asked) - self.room

    def to_json(self) -> dict[str, Any]:
        predicted = self.predicted or {}
        return {"rank": self.rank, "role": self.role, "kv_room": self.room,
                "kv_tokens": self.tokens, "predicted_kv_room": predicted.get("kv_room"),
                "predicted_kv_tokens": predicted.get("kv_tokens"), "non_kv": self.non_kv(),
                "predicted_non_kv": predicted.get("non_kv")}


def parse(lines: tuple[str, ...]) -> tuple[int | None, int | None]:
    """The KV room (bytes, to vLLM's two decimals of GiB) and the pool's tokens in a rank's
    KV-cache lines (cluster_readout.kv_cache_lines); None for what is not there."""
    room = tokens = None
    for line in lines:
        if (found := ROOM.search(line)) is not None:
            room = round(float(found.group(1) or found.group(2)) * GIB)
        if (count := TOKENS.search(line)) is not None:
            tokens = int(count.group(1).replace(",", ""))
    return room, tokens


def describe(rank: RankMemory) -> str:
    """The rank's readout beside its prediction, in one line."""
    predicted = rank.predicted or {}
    if not predicted:
        return (f"KV room {_gib(rank.room)}, KV cache size {_tokens(rank.tokens)}; no "
                f"prediction (its model is not on this host, or its size is not known)")
    return (f"KV room {_gib(rank.room)} (predicted {_gib(predicted.get('kv_room'))}), KV cache "
            f"size {_tokens(rank.tokens)} (predicted {_tokens(predicted.get('kv_tokens'))})")


def _away(measured: int | None, predicted: Any) -> float | None:
    if measured is None or not isinstance(predicted, int) or predicted <= 0:
        return None
    return abs(measured - predicted) / predicted


def warnings(ranks: list[RankMemory]) -> list[str]:
    """A line for each figure more than TOLERANCE away from its prediction."""
    found = []
    for rank in ranks:
        predicted = rank.predicted or {}
        for what, measured, key, shown in (
                ("KV room", rank.room, "kv_room", _gib), ("KV cache size", rank.tokens,
                                                          "kv_tokens", _tokens)):
            away = _away(measured, predicted.get(key))
            if away is not None and away > TOLERANCE:
                found.append(f"rank {rank.rank}: {what} {shown(measured)} is {away:.0%} away "
                             f"from the predicted {shown(predicted[key])}: the memory model "
                             f"is off for this layout; check-env now takes the measured "
                             f"non-KV share for it")
    return found


def _gib(size: int | None) -> str:
    return "not logged" if size is None else f"{size / GIB:.2f} GiB"


def _tokens(count: int | None) -> str:
    """A pool's tokens, or "not logged": vLLM logs them on the head, not on every worker, and
    0 would read as a rank without room."""
    return "not logged" if count is None else f"{count:,} tokens"


def memory_record(ranks: list[RankMemory], date: str) -> dict[str, Any]:
    """The record's `memory` entry for one layout: each rank, and the non-KV share measured
    per rank kind (the largest of a kind's ranks)."""
    layouts = {str(r.predicted["layout"]) for r in ranks if r.predicted}
    shares: dict[str, int] = {}
    for rank in ranks:
        if (spent := rank.non_kv()) is not None:
            shares[rank.role] = max(spent, shares.get(rank.role, spent))
    return {"layout": min(layouts) if len(layouts) == 1 else None, "date": date,
            "non_kv": shares, "ranks": [rank.to_json() for rank in ranks]}


def remember(path: Path, entry: Mapping[str, Any]) -> None:
    """Keep a layout's entry in the tag's measurements (one per layout, the latest), which
    outlive the cluster record that `down` removes."""
    if entry.get("layout") is None:
        return
    kept = read_json(path) if path.is_file() else {}
    atomic_write(path, json.dumps({**kept, entry["layout"]: entry}, indent=2) + "\n")


def measured_shares(path: Path) -> Callable[[str, str], tuple[float, str] | None]:
    """What check-env asks: the non-KV share `up` measured for a rank kind of a layout,
    and when; None where it measured none."""
    kept: dict[str, Any] = read_json(path) if path.is_file() else {}

    def share(role: str, layout: str) -> tuple[float, str] | None:
        entry = kept.get(layout) or {}
        spent = (entry.get("non_kv") or {}).get(role)
        return None if spent is None else (float(spent), f"measured by up on {entry['date']}")
    return share
