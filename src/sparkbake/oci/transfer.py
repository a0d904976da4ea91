"""What travelled: the blobs a publish sent to a registry and the layers a node pulled,
counted in bytes, with the one line each prints and the part each records.

Publish counts the image's blobs (config and layers) it uploaded and those the registry had;
deploy counts the layers a node's pull fetched and those its engine had, from the pull's
progress messages (a layer the engine has is reported "Already exists"). Pure logic: no
Docker, no network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from sparkbake.oci import image_layout

__all__ = ["Pulled", "Sent", "TransferRecord", "human_bytes", "progress_ids",
           "pulled_from_progress"]

UNITS = ("B", "kB", "MB", "GB", "TB")  # decimal, as the Docker CLI prints sizes
PRESENT_STATUS = "Already exists"
FETCHED_STATUSES = ("Downloading", "Download complete", "Verifying Checksum", "Extracting",
                    "Pull complete")


class BlobCount(TypedDict):
    blobs: int
    bytes: int


class SentBlob(TypedDict):
    digest: str
    size: int
    sent: bool  # False: the registry had it


class TransferRecord(TypedDict):
    """Sent.record: the release record's `transfer`."""

    sent: BlobCount
    present: BlobCount
    blobs: list[SentBlob]


def human_bytes(count: int) -> str:
    """1234567 -> '1.2 MB' (powers of 1000; bytes as a whole number)."""
    if count < 1000:
        return f"{count} B"
    value, unit = float(count), 0
    while value >= 1000 and unit < len(UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:.1f} {UNITS[unit]}"


def _total(blobs: Iterable[image_layout.Descriptor]) -> int:
    return sum(blob.size for blob in blobs)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


@dataclass(frozen=True)
class Sent:
    """A publish's blobs: those uploaded and those the registry already had."""

    sent: tuple[image_layout.Descriptor, ...]
    present: tuple[image_layout.Descriptor, ...]

    @property
    def sent_bytes(self) -> int:
        return _total(self.sent)

    @property
    def present_bytes(self) -> int:
        return _total(self.present)

    def line(self, digest: str) -> str:
        """What the publish printed: counts and sizes, or that nothing had to go."""
        count = len(self.sent) + len(self.present)
        if not self.sent:
            return (f"publish: nothing to send: the registry has every blob of {digest} "
                    f"({_plural(count, 'blob')}, {human_bytes(self.present_bytes)})")
        return (f"publish: {len(self.sent)} of {_plural(count, 'blob')} sent "
                f"({human_bytes(self.sent_bytes)}), {len(self.present)} already in the "
                f"registry ({human_bytes(self.present_bytes)})")

    def record(self) -> TransferRecord:
        """The release record's `transfer`: totals and each blob, whether it was sent."""
        sent = {blob.digest for blob in self.sent}
        blobs = sorted([*self.sent, *self.present], key=lambda blob: blob.digest)
        return {
            "sent": {"blobs": len(self.sent), "bytes": self.sent_bytes},
            "present": {"blobs": len(self.present), "bytes": self.present_bytes},
            "blobs": [{"digest": b.digest, "size": b.size, "sent": b.digest in sent}
                      for b in blobs],
        }


@dataclass(frozen=True)
class Pulled:
    """A node's pull: the layers it fetched and those its engine had, with their sizes
    (None where neither the release nor the progress said)."""

    fetched: tuple[tuple[str, int | None], ...]  # (progress id, size)
    present: tuple[tuple[str, int | None], ...]

    @property
    def fetched_bytes(self) -> int:
        return sum(size or 0 for _, size in self.fetched)

    @property
    def present_bytes(self) -> int:
        return sum(size or 0 for _, size in self.present)

    def line(self, node: str, image: str | None = None) -> str:
        """What the deploy printed of the node; image: the node had that image already."""
        count = len(self.fetched) + len(self.present)
        had = f"({_plural(count, 'layer')}, {human_bytes(self.present_bytes)}); nothing pulled"
        if image is not None:
            return f"deploy: {node}: {image[:19]} already present {had}"
        if not self.fetched:
            return f"deploy: {node}: every layer was already present {had}"
        return (f"deploy: {node}: pulled {len(self.fetched)} of {_plural(count, 'layer')} "
                f"({human_bytes(self.fetched_bytes)}), {len(self.present)} already present "
                f"({human_bytes(self.present_bytes)})")

    def record(self) -> dict[str, dict[str, int]]:
        """The deploy report's `pulled` and `present` of a node."""
        return {"pulled": {"layers": len(self.fetched), "bytes": self.fetched_bytes},
                "present": {"layers": len(self.present), "bytes": self.present_bytes}}


def pulled_from_progress(messages: Iterable[Mapping[str, Any]],
                         sizes: Mapping[str, int]) -> Pulled:
    """The layers of a pull from its progress messages. Each layer's messages carry its id
    (the blob digest's first 12 hex digits); sizes maps such ids to blob sizes (from the
    release record); a layer it lacks takes the largest total its progress reported."""
    states: dict[str, str] = {}
    totals: dict[str, int] = {}
    for message in messages:
        layer, status = str(message.get("id") or ""), str(message.get("status") or "")
        if status == PRESENT_STATUS:
            states[layer] = "present"
        elif status in FETCHED_STATUSES:
            states.setdefault(layer, "fetched")
            total = (message.get("progressDetail") or {}).get("total")
            if isinstance(total, int):
                totals[layer] = max(total, totals.get(layer, 0))
    sized = {layer: sizes.get(layer, totals.get(layer)) for layer in states}
    return Pulled(tuple((k, sized[k]) for k, v in states.items() if v == "fetched"),
                  tuple((k, sized[k]) for k, v in states.items() if v == "present"))


def progress_ids(blobs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """A release record's blobs as pull progress ids -> sizes."""
    return {str(b["digest"]).split(":", 1)[-1][:12]: int(b["size"]) for b in blobs}
