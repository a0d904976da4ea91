"""The deploy report (build/deploys/<tag>-<time>.json): a release's deploy, node by node, with
how far each node got. A node's entry has only the steps it reached."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sparkbake import records
from sparkbake.attest.image_identity import Identity
from sparkbake.core import smoke_record
from sparkbake.core.smoke_record import CheckResult, CheckStatus, GpuMode

__all__ = ["DeployReport", "DeployResult", "HostReport", "NodeEngine", "NodeSmoke",
           "NodeTransfer"]

DeployResult = Literal["deployed", "failed"]


@dataclass(frozen=True)
class NodeEngine:
    """The node's Docker engine, as it describes itself."""

    name: str | None
    version: str | None
    arch: str
    gpu_runtime: bool


@dataclass(frozen=True)
class NodeTransfer:
    """How the image got onto the node, and what travelled: `pulled` and `present` layers
    (present, pull) or the bytes `streamed` (stream), each a count. Its keys are among its
    host's."""

    method: Literal["present", "pull", "stream"]
    # stream: why the pull tried first failed
    pull_failed: str | None = field(default=None, kw_only=True, metadata=records.OMIT_NONE)
    moved: dict[str, dict[str, int]] = field(metadata=records.key(inline=True))


def _has_record(smoke: NodeSmoke) -> bool:
    return smoke.record is not None


@dataclass(frozen=True)
class NodeSmoke:
    """The smoke run on the node: its record's verdict and checks; record None: the run left
    no readable record (and the entry has no checks)."""

    passed: bool
    counts: dict[CheckStatus, int] = field(init=False, metadata=records.key(when=_has_record))
    checks: tuple[CheckResult, ...] = field(default=(), metadata=records.key(when=_has_record))
    record: str | None = None

    def __post_init__(self) -> None:
        # the checks' counts: worked out, written for the report's readers
        object.__setattr__(self, "counts", smoke_record.counts(self.checks))


@dataclass(frozen=True)
class HostReport:
    """One node: its result, and each step it reached (None: not reached, not written)."""

    host: str
    result: Literal["deployed", "failed", "not attempted"]
    engine: NodeEngine | None = field(default=None, metadata=records.OMIT_NONE)
    transfer: NodeTransfer | None = field(default=None, metadata=records.key(inline=True))
    image_id: str | None = field(default=None, metadata=records.OMIT_NONE)  # on the node
    # what the node's image was checked by: the signed (or pulled) manifest digest, or, for
    # an image present or streamed, its config digest and layer DiffIDs
    identity: Identity | None = field(default=None, metadata=records.OMIT_NONE)
    # repository@digest the node's engine holds it by (pulls)
    repo_digest: str | None = field(default=None, metadata=records.OMIT_NONE)
    smoke: NodeSmoke | None = field(default=None, metadata=records.OMIT_NONE)
    error: str | None = field(default=None, metadata=records.OMIT_NONE)
    seconds: float | None = field(default=None, metadata=records.OMIT_NONE)


@dataclass(frozen=True)
class DeployReport:
    """A release's deploy to its nodes, in the order they were given."""

    tag: str
    digest: str
    image_id: str
    pinned: str
    stream: bool
    gpu: GpuMode
    result: DeployResult
    started: str
    hosts: tuple[HostReport, ...]
    finished: str
    # where the report was written (not in the file itself)
    report: str | None = field(default=None, metadata=records.OMIT_NONE)
