"""What an operator reads off a cluster before trusting it: each rank's KV-cache lines from
its engine log, the acceptance length from the head's /metrics where the tag speculates,
and a one-line verdict. Pure functions of the logs and counters, tested without an engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkbake.nodes import serve_log
from sparkbake.nodes.serve_stream import Ready

__all__ = ["ACCEPTED", "DRAFTS", "KNOWN_FAILURES", "NodeReadout", "acceptance_length",
           "kv_cache_lines", "last_lines", "verdict", "why_stopped"]

# vLLM's lines of the KV cache: the memory each worker found for it (a GPU worker's
# "Available KV cache memory", a CPU worker's "... GiB for KV cache on node N"), and the pool
# the engine made of it ("GPU KV cache size: N tokens", "CPU ..." on the CPU backend)
KV_CACHE = re.compile(r"Available KV cache memory|GiB for KV cache|KV cache size")
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# how vLLM fails a node, by a line of its log: what it means for the operator
KNOWN_FAILURES = {
    "collective_rpc should not be called on follower node":
        "a worker started without --headless (vLLM 0.33.0 runs an API server and an engine "
        "there, whose executor only follows the head; give the node no command, so that the "
        "entrypoint adds --headless)",
}


@dataclass(frozen=True)
class NodeReadout:
    rank: int
    kv_cache: tuple[str, ...]  # the log's KV-cache lines, from their message on

    def describe(self) -> str:
        return f"rank {self.rank}: " + ("; ".join(self.kv_cache) if self.kv_cache
                                        else "no KV cache line in its log")


def kv_cache_lines(log: str) -> tuple[str, ...]:
    """The KV-cache lines of an engine log, each from its message on (no time stamp)."""
    found = []
    for line in ANSI.sub("", log).splitlines():
        if KV_CACHE.search(line):
            found.append(line.rsplit("] ", 1)[-1].strip())  # after vLLM's [file.py:line]
    return tuple(dict.fromkeys(found))


def acceptance_length(metrics: dict[str, float]) -> float | None:
    """1 + accepted tokens / drafts (vLLM's mean acceptance length), or None before a draft."""
    drafts = metrics.get(DRAFTS, 0.0)
    return 1.0 + metrics.get(ACCEPTED, 0.0) / drafts if drafts else None


def why_stopped(log: str) -> str:
    """What a stopped node's log says: a known failure's meaning with vLLM's own line, else
    the last error line it wrote (serve_log.error_line), else its last lines."""
    lines = ANSI.sub("", log).splitlines()
    for needle, meaning in KNOWN_FAILURES.items():
        said = next((line.strip() for line in lines if needle in line), None)
        if said is not None:
            return f"{meaning}; vLLM: {said[-160:]}"
    return serve_log.error_line(log) or last_lines(log)


def last_lines(log: str, count: int = 3) -> str:
    """A log's last non-empty lines, joined on one line."""
    lines = [line.strip() for line in ANSI.sub("", log).splitlines() if line.strip()]
    return " | ".join(lines[-count:]) or "no output"


def verdict(tag: str, nodes: list[NodeReadout], ready: Ready, checks_passed: int,
            checks: int, acceptance: str) -> str:
    """The one line `up` ends with: ready is the first streamed token, after /health."""
    state = "up" if checks_passed == checks else "up, but serving fails"
    kv = "all ranks" if all(n.kv_cache for n in nodes) else \
        "missing on rank " + ", ".join(str(n.rank) for n in nodes if not n.kv_cache)
    return (f"{tag}: {state} on {len(nodes)} node(s), ready {ready.first_token_s:.0f} s after "
            f"the head started (/health {ready.health_s:.0f} s, first token "
            f"{ready.first_token_s:.0f} s); serve checks {checks_passed}/{checks} passed; "
            f"KV cache lines: {kv}; acceptance: {acceptance}")
