"""The deploy report (build/deploys/<tag>-<time>.json): a release's deploy, node by node, with
how far each node got. A node's entry has only the steps it reached."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Self

from sparkbake.core.smoke_record import CheckResult, GpuMode, counts

__all__ = ["DeployReport", "DeployResult", "HostReport", "NodeEngine", "NodeSmoke",
           "NodeTransfer"]

DeployResult = Literal["deployed", "failed"]
TRANSFER_COUNTS = ("pulled", "present", "streamed")


@dataclass(frozen=True)
class NodeEngine:
    """The node's Docker engine, as it describes itself."""

    name: str | None
    version: str | None
    arch: str
    gpu_runtime: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "arch": self.arch,
                "gpu_runtime": self.gpu_runtime}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(data["name"], data["version"], data["arch"], data["gpu_runtime"])


@dataclass(frozen=True)
class NodeTransfer:
    """How the image got onto the node, and what travelled: `pulled` and `present` layers
    (present, pull) or the bytes `streamed` (stream), each a count."""

    method: Literal["present", "pull", "stream"]
    moved: dict[str, dict[str, int]]
    pull_failed: str | None = None  # stream: why the pull tried first failed

    def to_json(self) -> dict[str, Any]:
        failed = {} if self.pull_failed is None else {"pull_failed": self.pull_failed}
        return {"method": self.method, **failed, **self.moved}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """From a host's entry, where these keys sit among its others."""
        return cls(data["method"], {key: data[key] for key in TRANSFER_COUNTS if key in data},
                   data.get("pull_failed"))


@dataclass(frozen=True)
class NodeSmoke:
    """The smoke run on the node: its record's verdict and checks; record None: the run left
    no readable record."""

    passed: bool
    checks: tuple[CheckResult, ...]
    record: str | None

    def to_json(self) -> dict[str, Any]:
        if self.record is None:
            return {"passed": self.passed, "record": None}
        return {"passed": self.passed, "counts": counts(self.checks),
                "checks": [check.to_json() for check in self.checks], "record": self.record}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(data["passed"], tuple(CheckResult.from_json(c) for c in data.get("checks", [])),
                   data["record"])


@dataclass(frozen=True)
class HostReport:
    """One node: its result, and each step it reached (None: not reached)."""

    host: str
    result: Literal["deployed", "failed", "not attempted"]
    engine: NodeEngine | None = None
    transfer: NodeTransfer | None = None
    image_id: str | None = None  # the image's ID on the node
    smoke: NodeSmoke | None = None
    error: str | None = None
    seconds: float | None = None
    repo_digest: str | None = None  # repository@digest the node's engine holds it by (pulls)

    def to_json(self) -> dict[str, Any]:
        steps = {"engine": self.engine.to_json() if self.engine else None,
                 **(self.transfer.to_json() if self.transfer else {}),
                 "image_id": self.image_id, "repo_digest": self.repo_digest,
                 "smoke": self.smoke.to_json() if self.smoke else None,
                 "error": self.error, "seconds": self.seconds}
        return {"host": self.host, "result": self.result,
                **{key: value for key, value in steps.items() if value is not None}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        engine, smoke = data.get("engine"), data.get("smoke")
        return cls(data["host"], data["result"],
                   NodeEngine.from_json(engine) if engine is not None else None,
                   NodeTransfer.from_json(data) if "method" in data else None,
                   data.get("image_id"), NodeSmoke.from_json(smoke) if smoke is not None else None,
                   data.get("error"), data.get("seconds"), data.get("repo_digest"))


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
    report: str | None = None  # where the report was written (not in the file itself)

    def to_json(self) -> dict[str, Any]:
        written = {} if self.report is None else {"report": self.report}
        return {"tag": self.tag, "digest": self.digest, "image_id": self.image_id,
                "pinned": self.pinned, "stream": self.stream, "gpu": self.gpu,
                "result": self.result, "started": self.started,
                "hosts": [host.to_json() for host in self.hosts], "finished": self.finished,
                **written}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(data["tag"], data["digest"], data["image_id"], data["pinned"],
                   data["stream"], data["gpu"], data["result"], data["started"],
                   tuple(HostReport.from_json(h) for h in data["hosts"]), data["finished"],
                   data.get("report"))
