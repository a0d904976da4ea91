"""sparkbake memory budget: will vLLM start on a rank, and what KV cache will it get.

Standard library only, Python >= 3.10. Loaded by model_checks.py from beside it (in the
image, /opt/sparkbake/). vLLM 0.33.0 and 0.34.0 on each rank (docs/reference/preflight.md,
"The memory budget"):

- it requests ceil(total x GPU_MEMORY_UTILIZATION), the total as cudaMemGetInfo reads it
  (vllm/v1/worker/utils.py request_memory);
- on unified memory it charges the KV budget with the whole drop of available memory since
  its worker's snapshot, plus the profiler's transient peak and the CUDA graphs' estimate
  (vllm/utils/mem_utils.py memory_profiling, vllm/v1/worker/gpu_worker.py
  determine_available_memory): the non-KV share, modelled here and fitted to the reference
  deployments' figures (preflight.json `memory`);
- the rest is the KV room; vLLM refuses to start only when one request of max_model_len
  does not fit it (vllm/v1/core/kv_cache_planning.py _check_enough_kv_cache_memory), and
  every rank gets the smallest block count of them all (the head carries the API server);
- a pinned KV_CACHE_MEMORY_BYTES is the room itself: no profiling decides it, so nothing
  but the host's memory floor stops it from taking more than the node has.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

GIB = 1 << 30
Role = Literal["head", "worker"]
# why a plan may be unknown: kv_plan.py models DeepSeek-V4 (which vLLM refuses at DCP > 1) and
# models of full attention only
UNPLANNED = "the KV cache is modelled for DeepSeek-V4 and full-attention models at DCP 1"


class KvPlan(Protocol):
    """vLLM's KV cache planner for one layout (kv_plan.py): bytes one request needs, the
    pool's blocks, the tokens its log line gives and the requests that fit at once."""

    @property
    def request_bytes(self) -> int: ...

    @property
    def least_available(self) -> int: ...

    def refused(self, available: int) -> bool: ...

    def blocks(self, available: int) -> int: ...

    def tokens(self, available: int) -> int: ...

    def concurrency(self, available: int) -> float: ...


@dataclass(frozen=True)
class Calibration:
    """The non-KV constants of preflight.json `memory`, fitted to the reference figures."""

    runtime: float  # per rank: CUDA context, NCCL, compile and JIT heaps vLLM counts
    api_server: float  # on the head only: the API server's growth after the snapshot
    cuda_graphs: float  # the target's and the draft's graphs
    floor: float  # fraction of the total the host must keep free (earlyoom)
    min_free: float  # bytes the kernel keeps free (vm.min_free_kbytes of the floor rule)

    @classmethod
    def of(cls, memory: Mapping[str, Any]) -> Calibration:
        return cls(runtime=memory["runtime_gib"] * GIB, api_server=memory["api_server_gib"] * GIB,
                   cuda_graphs=memory["cuda_graphs_gib"] * GIB,
                   floor=memory["earlyoom_free_percent"] / 100,
                   min_free=memory["min_free_kbytes"] * 1024)


@dataclass(frozen=True)
class Share:
    """What a rank spends outside its KV cache, in bytes; `measured`: where a measured
    figure replaced the model ("measured by up on DATE"), else empty."""

    weights: float
    activations: float
    cuda_graphs: float
    runtime: float
    api_server: float
    measured: str = ""
    measured_total: float | None = None
    weighed: bool = True  # False: the weights' size is not known (no index), 0 here

    @property
    def total(self) -> float:
        if self.measured_total is not None:
            return self.measured_total
        return self.weights + self.activations + self.cuda_graphs + self.runtime + \
            self.api_server

    def parts(self) -> str:
        if self.measured:
            return self.measured
        named = [("weights", self.weights), ("activations", self.activations),
                 ("graphs", self.cuda_graphs), ("runtime", self.runtime),
                 ("API server", self.api_server)]
        parts = [f"{name} {gib(size)}" for name, size in named if size]
        return ", ".join(parts if self.weighed else ["weights not known", *parts])


@dataclass(frozen=True)
class Rank:
    """One rank's budget: what vLLM requests (or the pin), its non-KV share and the plan."""

    role: Role
    total: int  # bytes, as vLLM reads them
    utilization: float
    pin: int | None
    share: Share
    plan: KvPlan | None

    @property
    def requested(self) -> int:
        return math.ceil(self.total * self.utilization)

    @property
    def room(self) -> float:
        """The KV room: the pin, else what the non-KV share leaves of the request."""
        return float(self.pin) if self.pin is not None else self.requested - self.share.total

    @property
    def starts(self) -> bool:
        """vLLM's rule: there is room, and one request of max_model_len fits it."""
        if self.room <= 0:
            return False
        return self.plan is None or not self.plan.refused(int(self.room))

    @property
    def footprint(self) -> float:
        """What vLLM holds on the node: its request (or pin plus the non-KV share)."""
        return self.room + self.share.total if self.pin is not None else self.requested


def gib(size: float) -> str:
    return f"{size / GIB:.1f}"


def ranks(roles: list[Role], total: int, utilization: float, pin: int | None,
          shares: Mapping[Role, Share], plan: KvPlan | None) -> list[Rank]:
    return [Rank(role, total, utilization, pin, shares[role], plan) for role in roles]


def least_room(budget: list[Rank]) -> Rank:
    """The rank that decides: vLLM checks each, then gives all the smallest block count."""
    return min(budget, key=lambda rank: rank.room)


def needed_utilization(rank: Rank) -> float | None:
    """The least GPU_MEMORY_UTILIZATION, in hundredths, at which this rank starts; None:
    none does (the non-KV share and one request exceed the total)."""
    need = rank.share.total + (rank.plan.least_available if rank.plan else 1)
    least = math.ceil(need / rank.total * 100) / 100
    return least if least <= 1 else None


def figures(rank: Rank, context: int, source: str, pool: float,
            sequences: int | None) -> dict[str, Any]:
    """A rank's numbers, as check-env prints them and --json gives them. `pool`: the least
    room of the layout's ranks, whose blocks every rank gets (vLLM logs one pool);
    `sequences`: MAX_NUM_SEQS, which caps the requests at once, not whether vLLM starts."""
    plan, blocks = rank.plan, max(0, int(pool))
    return {"role": rank.role, "total": rank.total, "total_source": source,
            "utilization": rank.utilization, "pin": rank.pin,
            "requested": rank.requested if rank.pin is None else None,
            "non_kv": int(rank.share.total), "non_kv_parts": rank.share.parts(),
            "measured": rank.share.measured or None, "kv_room": int(rank.room),
            "needed_kv_room": plan.least_available if plan else None,  # a request + null block
            "kv_tokens": plan.tokens(blocks) if plan else None,
            "concurrency": round(plan.concurrency(blocks), 2) if plan else None,
            "max_model_len": context, "max_num_seqs": sequences, "starts": rank.starts}


def line(numbers: Mapping[str, Any]) -> str:
    """One rank's figures in one line."""
    asked = f"pinned {gib(numbers['pin'])} GiB" if numbers["pin"] is not None else \
        f"x {numbers['utilization']:g} = {gib(numbers['requested'])} GiB"
    if numbers["kv_room"] <= 0:
        kv = "no room: vLLM will not start"
    elif numbers["kv_tokens"] is None:
        kv = f"KV cache size not known ({UNPLANNED})"
    else:
        kv = (f"KV cache size {numbers['kv_tokens']:,} tokens, "
              f"{numbers['concurrency']:.2f}x requests of {numbers['max_model_len']:,} at once"
              + (f" (MAX_NUM_SEQS={numbers['max_num_seqs']})" if numbers["max_num_seqs"] else ""))
    total = f"{gib(numbers['total'])} GiB ({numbers['total_source']})" if numbers["total"] \
        else f"total {numbers['total_source']},"
    return (f"{numbers['role']}: {total} {asked}; non-KV {gib(numbers['non_kv'])} GiB "
            f"({numbers['non_kv_parts']}); KV room {gib(numbers['kv_room'])} GiB: {kv}")
