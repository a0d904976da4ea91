"""What publish records: the release record (build/releases/<tag>.json) of what it pushed,
what the image was made of and the smoke verdict it went out with; its line in the releases
index; and what changed between two releases.

Release records from before smoke gating, image manifests, transfer counts, the tag's env,
its locks and backend verdicts lack those keys; they load with None in their place."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Self, TypedDict

from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.oci.referrers import Listing
from sparkbake.oci.transfer import TransferRecord
from sparkbake.publish.shipped_with import LockJson, VerdictsJson

__all__ = ["AttachedJson", "Change", "ChangeJson", "IndexEntry", "IndexEntryJson", "Release",
           "ReleaseDiff", "ReleaseDiffJson", "ReleaseJson", "ReleaseSeries", "ReleaseSmoke",
           "SmokeFound"]

# what the smoke record said of the image to publish (smoke_gate.read_smoke)
SmokeFound = Literal["passed", "failed", "missing", "unreadable", "other image"]


class ReleaseSmokeJson(TypedDict):
    result: Literal["passed", "skipped"]
    override: NotRequired[str]  # skipped: --skip-smoke, and what the record said
    found: NotRequired[SmokeFound | None]
    image_id: NotRequired[str | None]  # passed
    time: NotRequired[str | None]
    checks: NotRequired[dict[str, int] | None]


class ReleaseSeriesJson(TypedDict):
    name: str
    sha256: str
    patches: list[list[str]]  # [file, sha256]


class AttachedJson(TypedDict):
    """What publish attached to the digest (publish.attach.Attached.to_json)."""

    sbom: str
    provenance: str
    smoke: str | None
    listed_by: Listing
    signature: str | None


class ReleaseJson(TypedDict):
    """build/releases/<tag>.json; the keys that records of earlier versions lack are
    NotRequired."""

    tag: str
    repository: str
    images: list[str]
    digest: str
    pinned: str
    smoke: NotRequired[ReleaseSmokeJson | None]
    manifest: NotRequired[BakedManifest | None]
    transfer: NotRequired[TransferRecord | None]
    image_id: str
    build: NotRequired[dict[str, Any] | None]  # as push's _build_record gives it
    inputs: str
    upstream: dict[str, str]
    series: list[ReleaseSeriesJson]
    env: NotRequired[dict[str, str] | None]
    labels: dict[str, str]
    published: str
    platforms: NotRequired[list[ReleaseJson]]
    attestations: NotRequired[AttachedJson | None]
    locks: NotRequired[dict[str, LockJson] | None]
    verdicts: NotRequired[VerdictsJson | None]


class IndexEntryJson(TypedDict):
    tag: str
    digest: str
    image_id: str | None
    repository: str | None
    upstream: str
    series: list[str]
    smoke: str
    published: str
    record: str


class ChangeJson(TypedDict):
    op: Literal["+", "-", "~"]
    what: str
    a: str | None
    b: str | None


class ReleaseDiffJson(TypedDict):
    a: str
    b: str
    sections: dict[str, list[ChangeJson] | None]
    no_manifest: list[str]
    unrecorded: NotRequired[dict[str, list[str]]]


@dataclass(frozen=True)
class ReleaseSmoke:
    """The release's `smoke`: the passing smoke record's summary, or, when --skip-smoke
    overrode the gate, what the record said (found)."""

    result: Literal["passed", "skipped"]
    image_id: str | None = None  # passed: the smoked image, its time and its counts
    time: str | None = None
    checks: dict[str, int] | None = None  # passed and skipped checks
    found: SmokeFound | None = None  # skipped

    def to_json(self) -> ReleaseSmokeJson:
        if self.result == "skipped":
            return {"result": "skipped", "override": "--skip-smoke", "found": self.found}
        return {"result": "passed", "image_id": self.image_id, "time": self.time,
                "checks": self.checks}

    @classmethod
    def from_json(cls, data: ReleaseSmokeJson) -> Self:
        if data["result"] == "skipped":
            return cls("skipped", found=data.get("found"))
        return cls("passed", data.get("image_id"), data.get("time"), data.get("checks"))


@dataclass(frozen=True)
class ReleaseSeries:
    """A patch series as released: its hash and each patch file with its sha256, in order."""

    name: str
    sha256: str
    patches: tuple[tuple[str, str], ...]

    def to_json(self) -> ReleaseSeriesJson:
        return {"name": self.name, "sha256": self.sha256,
                "patches": [list(patch) for patch in self.patches]}

    @classmethod
    def from_json(cls, data: ReleaseSeriesJson) -> Self:
        return cls(data["name"], data["sha256"],
                   tuple((name, sha) for name, sha in data.get("patches") or []))


@dataclass(frozen=True)
class Release:
    """One published image: its names and digest, its smoke verdict, and what it was made of."""

    tag: str
    repository: str
    images: tuple[str, ...]  # repository:name for each name pushed
    digest: str
    pinned: str  # repository@digest
    smoke: ReleaseSmoke | None
    manifest: BakedManifest | None  # the image's /opt/sparkbake/manifest.json, as baked
    transfer: TransferRecord | None  # the blobs publish sent and found (transfer.Sent.record)
    image_id: str
    build: dict[str, Any] | None  # how the wheels were built, from wheels.json
    inputs: str
    upstream: dict[str, str]  # its key and its pin (plan.upstream_pin)
    series: tuple[ReleaseSeries, ...]
    env: dict[str, str] | None
    labels: dict[str, str]
    published: str
    # a multi-platform release (an OCI index): each platform's own record, in index order
    platforms: tuple[Release, ...] = ()
    # what publish attached to the digest (attest.attach.Attached.to_json); None: before that
    attestations: AttachedJson | None = None
    # the locks it was made from and vLLM's verdicts on its backends (publish.shipped_with);
    # None: a record from before them, or a multi-platform release's (each platform has its)
    locks: dict[str, LockJson] | None = None
    verdicts: VerdictsJson | None = None

    @property
    def smoke_result(self) -> str:
        """passed or skipped; unknown for a record from before publish was gated on smoke."""
        return self.smoke.result if self.smoke is not None else "unknown"

    def to_json(self) -> ReleaseJson:
        doc: ReleaseJson = {
            "tag": self.tag, "repository": self.repository, "images": list(self.images),
            "digest": self.digest, "pinned": self.pinned,
            "smoke": self.smoke.to_json() if self.smoke is not None else None,
            "manifest": self.manifest, "transfer": self.transfer, "image_id": self.image_id,
            "build": self.build, "inputs": self.inputs, "upstream": self.upstream,
            "series": [series.to_json() for series in self.series], "env": self.env,
            "labels": self.labels, "published": self.published,
        }
        if self.platforms:
            doc["platforms"] = [p.to_json() for p in self.platforms]
        if self.attestations:
            doc["attestations"] = self.attestations
        if self.locks is not None:
            doc["locks"] = self.locks
        if self.verdicts is not None:
            doc["verdicts"] = self.verdicts
        return doc

    @classmethod
    def from_json(cls, data: ReleaseJson) -> Self:
        smoke = data.get("smoke")
        return cls(
            tag=data["tag"], repository=data["repository"], images=tuple(data["images"]),
            digest=data["digest"], pinned=data["pinned"],
            smoke=ReleaseSmoke.from_json(smoke) if smoke is not None else None,
            manifest=data.get("manifest"), transfer=data.get("transfer"),
            image_id=data["image_id"], build=data.get("build"), inputs=data["inputs"],
            upstream=data["upstream"],
            series=tuple(ReleaseSeries.from_json(s) for s in data["series"]),
            env=data.get("env"), labels=data["labels"], published=data["published"],
            platforms=tuple(cls.from_json(p) for p in data.get("platforms") or ()),
            attestations=data.get("attestations"), locks=data.get("locks"),
            verdicts=data.get("verdicts"))


@dataclass(frozen=True)
class IndexEntry:
    """A release's line in the index."""

    tag: str
    digest: str
    image_id: str | None
    repository: str | None
    upstream: str  # describe_upstream
    series: tuple[str, ...]
    smoke: str  # passed | skipped | unknown
    published: str
    record: str  # the release record's file name

    def to_json(self) -> IndexEntryJson:
        return {"tag": self.tag, "digest": self.digest, "image_id": self.image_id,
                "repository": self.repository, "upstream": self.upstream,
                "series": list(self.series), "smoke": self.smoke,
                "published": self.published, "record": self.record}

    @classmethod
    def from_json(cls, data: IndexEntryJson) -> Self:
        return cls(data["tag"], data["digest"], data["image_id"], data["repository"],
                   data["upstream"], tuple(data["series"]), data["smoke"], data["published"],
                   data["record"])


@dataclass(frozen=True)
class Change:
    """One difference: + added, - removed, ~ changed (a: before, b: after)."""

    op: Literal["+", "-", "~"]
    what: str
    a: str | None
    b: str | None

    def to_json(self) -> ChangeJson:
        return {"op": self.op, "what": self.what, "a": self.a, "b": self.b}

    @classmethod
    def from_json(cls, data: ChangeJson) -> Self:
        return cls(data["op"], data["what"], data["a"], data["b"])


@dataclass(frozen=True)
class ReleaseDiff:
    """What changed from release a to release b, by section (in SECTIONS' order); a section is
    None when unknown: wheels and base come from image manifests that no_manifest lack, locks
    and verdicts from release records that unrecorded names (a record from before them)."""

    a: str
    b: str
    sections: dict[str, tuple[Change, ...] | None]
    no_manifest: tuple[str, ...]
    unrecorded: dict[str, tuple[str, ...]] = field(default_factory=dict)  # section -> tags

    def to_json(self) -> ReleaseDiffJson:
        sections = {name: None if changes is None else [c.to_json() for c in changes]
                    for name, changes in self.sections.items()}
        return {"a": self.a, "b": self.b, "sections": sections,
                "no_manifest": list(self.no_manifest),
                "unrecorded": {name: list(tags) for name, tags in self.unrecorded.items()}}

    @classmethod
    def from_json(cls, data: ReleaseDiffJson) -> Self:
        sections = {name: None if changes is None else tuple(Change.from_json(c) for c in changes)
                    for name, changes in data["sections"].items()}
        unrecorded = {name: tuple(tags) for name, tags in (data.get("unrecorded") or {}).items()}
        return cls(data["a"], data["b"], sections, tuple(data["no_manifest"]), unrecorded)
