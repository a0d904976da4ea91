"""What publish records: the release record (build/releases/<tag>.json) of what it pushed,
what the image was made of and the smoke verdict it went out with; its line in the releases
index; and what changed between two releases.

Release records from before smoke gating, image manifests, transfer counts, the tag's env,
its locks and backend verdicts lack those keys; they load with None in their place."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from sparkbake import records
from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.nodes.bench_store import Measured
from sparkbake.oci.referrers import Listing
from sparkbake.oci.transfer import TransferRecord
from sparkbake.publish.shipped_with import LockJson, VerdictsJson

__all__ = ["Attached", "Change", "IndexEntry", "Release", "ReleaseBench", "ReleaseDiff",
           "ReleaseSeries", "ReleaseSmoke", "SmokeFound"]

# what the smoke record said of the image to publish (smoke_gate.read_smoke)
SmokeFound = Literal["passed", "failed", "missing", "unreadable", "other image"]
BEFORE = records.key(absent=None)  # a key that records from before it lack


def _passed(smoke: ReleaseSmoke) -> bool:
    return smoke.result == "passed"


def _skipped(smoke: ReleaseSmoke) -> bool:
    return smoke.result == "skipped"


@dataclass(frozen=True)
class ReleaseSmoke:
    """The release's `smoke`: the passing smoke record's summary, or, when --skip-smoke
    overrode the gate, what the record said (found). Each result has its own keys."""

    result: Literal["passed", "skipped"]
    _: KW_ONLY
    # passed: the smoked image, its time and its counts (passed and skipped checks)
    image_id: str | None = field(default=None, metadata=records.key(when=_passed))
    time: str | None = field(default=None, metadata=records.key(when=_passed))
    checks: dict[str, int] | None = field(default=None, metadata=records.key(when=_passed))
    # skipped: what overrode the gate, and what the smoke record said of the image
    override: str = field(default="--skip-smoke", metadata=records.key(when=_skipped))
    found: SmokeFound | None = field(default=None, metadata=records.key(when=_skipped))


@dataclass(frozen=True)
class ReleaseSeries:
    """A patch series as released: its hash and each patch file with its sha256, in order."""

    name: str
    sha256: str
    patches: tuple[tuple[str, str], ...] = ()  # [file, sha256] each


@dataclass(frozen=True)
class Attached:
    """What publish attached to one digest: each artifact's manifest digest."""

    sbom: str
    provenance: str
    smoke: str | None  # None: published with --skip-smoke and no record of this image
    listing: Listing = field(metadata=records.key("listed_by"))
    signature: str | None  # the `.sig` manifest; None: unsigned


@dataclass(frozen=True)
class Release:
    """One published image: its names and digest, its smoke verdict, and what it was made of."""

    tag: str
    repository: str
    images: tuple[str, ...]  # repository:name for each name pushed
    digest: str
    pinned: str  # repository@digest
    smoke: ReleaseSmoke | None = field(metadata=BEFORE)
    # the image's /opt/sparkbake/manifest.json, as baked
    manifest: BakedManifest | None = field(metadata=BEFORE)
    # the blobs publish sent and found (transfer.Sent.record)
    transfer: TransferRecord | None = field(metadata=BEFORE)
    image_id: str
    build: dict[str, Any] | None = field(metadata=BEFORE)  # how the wheels were built
    inputs: str
    upstream: dict[str, str]  # its key and its pin (plan.upstream_pin)
    series: tuple[ReleaseSeries, ...]
    env: dict[str, str] | None = field(metadata=BEFORE)
    labels: dict[str, str]
    published: str
    # a multi-platform release (an OCI index): each platform's own record, in index order
    platforms: tuple[Release, ...] = field(default=(), metadata=records.OMIT_EMPTY)
    # what publish attached to the digest; None: before that
    attestations: Attached | None = field(default=None, metadata=records.OMIT_NONE)
    # the locks it was made from and vLLM's verdicts on its backends (publish.shipped_with);
    # None: a record from before them, or a multi-platform release's (each platform has its)
    locks: dict[str, LockJson] | None = field(default=None, metadata=records.OMIT_NONE)
    verdicts: VerdictsJson | None = field(default=None, metadata=records.OMIT_NONE)

    @property
    def smoke_result(self) -> str:
        """passed or skipped; unknown for a record from before publish was gated on smoke."""
        return self.smoke.result if self.smoke is not None else "unknown"


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


@dataclass(frozen=True)
class Change:
    """One difference: + added, - removed, ~ changed (a: before, b: after)."""

    op: Literal["+", "-", "~"]
    what: str
    a: str | None
    b: str | None


@dataclass(frozen=True)
class ReleaseBench:
    """Each release's bench, as measured on a cluster that ran its image (None: not
    measured), and how its figures changed from a to b."""

    a: Measured | None
    b: Measured | None
    changes: tuple[Change, ...]


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
    # the benches of the releases' images (diff_releases looks them up); None: not asked
    bench: ReleaseBench | None = field(default=None, metadata=records.OMIT_NONE)
