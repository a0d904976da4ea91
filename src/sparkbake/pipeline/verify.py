"""verify: what differs between an image and its rebuild, down to the file.

The original is the tag's image in build/oci, or a digest (from the layout, else pulled from
the registry). Two images (each a manifest in an OCI layout) are compared config key by key,
then each layer whose blob differs entry by entry (kind, mode, owner, mtime, size, content
hash); a layer whose tar is the same but whose blob is not differs only in compression.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from sparkbake import records
from sparkbake.bake import runtime_image
from sparkbake.config.settings import Settings
from sparkbake.core.folders import Folders
from sparkbake.errors import ReproducibilityError, UsageError
from sparkbake.files import atomic_write
from sparkbake.oci import image_layout, layers, registry_access
from sparkbake.oci.documents import ConfigDoc
from sparkbake.planning import Plan
from sparkbake.run import Run

__all__ = ["SHOWN", "FileChange", "KeyChange", "LayerChange", "Report", "Side", "compare",
           "conclude", "original", "render", "report_json", "require_intact", "summary"]

SHOWN = 12  # differing files printed per layer; the JSON report has them all
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Side:
    """One image to compare: its manifest in a layout."""

    layout: image_layout.Layout
    image: image_layout.Descriptor


@dataclass(frozen=True)
class KeyChange:
    """A config key whose value differs: the JSON of each side (None: the side lacks it)."""

    key: str
    original: str | None
    rebuilt: str | None


@dataclass(frozen=True)
class FileChange:
    """A path of a layer that differs (None: the side lacks it)."""

    path: str
    original: layers.Entry | None
    rebuilt: layers.Entry | None


@dataclass(frozen=True)
class LayerChange:
    """A layer whose blob differs (None: the side has no such layer). No file differs when
    the note says why the blobs still do."""

    index: int
    made_by: str
    original: image_layout.Descriptor | None
    rebuilt: image_layout.Descriptor | None
    files: tuple[FileChange, ...] = ()
    note: str = field(default="", metadata=records.OMIT_EMPTY)


@dataclass(frozen=True)
class Report:
    """Whether the digests are equal, and what differs where."""

    equal: bool
    original: str  # the manifest digests
    rebuilt: str
    config: tuple[KeyChange, ...]
    layers: tuple[LayerChange, ...]


def report_json(report: Report) -> dict[str, Any]:
    """build/verify/<tag>.json: a blob by its digest and size alone."""
    return records.to_json(report, {image_layout.Descriptor: ("digest", "size")})


def original(run: Run, plan: Plan, against: str | None) -> Side:
    """The image a rebuild is compared with: the tag's in build/oci (of the plan's inputs), or
    the manifest `against`, pulled from the registry if the layout lacks it."""
    settings, console = run.settings, run.console
    layout, tag = image_layout.Layout(run.folders.oci, console), plan.tag.name
    if against is None:
        baked = runtime_image.find(run.folders, plan, console=console)
        if baked is None:
            raise UsageError(f"{tag} has no baked image in {layout.root}",
                             f"build it (`{settings.command('build-image', tag)}`) or pass "
                             "--against DIGEST")
        labels = layout.read_config_doc(baked.config)["config"].get("Labels") or {}
        if labels.get(runtime_image.INPUTS_LABEL) != plan.inputs:
            raise UsageError(f"the image of {tag} in {layout.root} was baked from other inputs "
                             f"than the plan's ({plan.inputs[:12]})",
                             "build it again first, or pass --against DIGEST")
        return Side(layout, baked.image)
    if not DIGEST.fullmatch(against):
        raise UsageError(f"--against {against!r} is not a digest",
                         "write sha256:<64 hex>, e.g. the digest in build/releases/TAG.json")
    if not layout.intact(against):
        session = registry_access.open_session(_repository(run.folders, plan, against),
                                               settings, UsageError, console=console)
        session.pull(against, layout)
    return Side(layout, image_layout.Descriptor(image_layout.MANIFEST_TYPE, against,
                                             layout.blob(against).stat().st_size))


def _repository(folders: Folders, plan: Plan, digest: str) -> str:
    """Where the digest was published (the release record), else the tag's repository."""
    record = folders.release_record(plan.tag.name)
    if record.is_file():
        published = json.loads(record.read_text())
        if published.get("digest") == digest:
            return str(published["repository"])
    return plan.tag.repository


def conclude(run: Run, plan: Plan, report: Report) -> str:
    """Write build/verify/<tag>.json, print the differences; raise if there are any."""
    path = run.folders.verify_report(plan.tag.name)
    atomic_write(path, json.dumps(report_json(report), indent=2) + "\n")
    for line in render(report):
        run.console.detail(line)
    if not report.equal:
        raise ReproducibilityError(
            f"{plan.tag.name} rebuilt as {report.rebuilt}, not {report.original}: "
            f"{summary(report)}",
            f"the report: {path}; make what it names deterministic "
            "(docs/explanation/reproducibility.md)")
    return f"verified {plan.tag.name}: a clean rebuild gives {report.rebuilt}, bit for bit"


def require_intact(side: Side, tag: str, *, settings: Settings) -> None:
    """Hash every blob of the side: the digests compared must be those of its bytes (a
    damaged blob is removed)."""
    bad = side.layout.damaged(side.image, full=True)
    if bad:
        raise ReproducibilityError(
            f"{side.layout.root}: {len(bad)} blob(s) of {tag} are not the bytes of their "
            f"digest ({bad[0][:19]}...); removed",
            f"rebuild it: `{settings.command('build-image', tag)}` "
            f"(`{settings.command('gc', '--check')}` "
            "checks every cache entry), then verify again")


def compare(original: Side, rebuilt: Side) -> Report:
    """The report: whether the digests are equal, and what differs where (each side's
    bytes hashed first: require_intact)."""
    manifests = [side.layout.read_manifest(side.image.digest) for side in (original, rebuilt)]
    configs = [side.layout.read_config_doc(manifest.config.digest)
               for side, manifest in zip((original, rebuilt), manifests, strict=True)]
    equal = original.image.digest == rebuilt.image.digest
    changes: tuple[LayerChange, ...] = ()
    if not equal:
        count = max(len(manifest.layers) for manifest in manifests)
        changes = tuple(change for index in range(count) if (
            change := _layer_change(index, original, rebuilt, manifests, configs)))
    return Report(equal, original.image.digest, rebuilt.image.digest,
                  _config_changes(*configs), changes)


def _flat(value: Any, prefix: str = "") -> dict[str, str]:
    """A document as `a.b[2]` -> JSON value, so that two can be compared key by key."""
    if isinstance(value, dict):
        return {k: v for key in sorted(value) for k, v in _flat(value[key], f"{prefix}.{key}"
                                                                 if prefix else key).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _flat(item,
                                                                       f"{prefix}[{i}]").items()}
    return {prefix: json.dumps(value)}


def _config_changes(old: ConfigDoc, new: ConfigDoc) -> tuple[KeyChange, ...]:
    before, after = _flat(old), _flat(new)
    return tuple(KeyChange(key, before.get(key), after.get(key))
                 for key in sorted(set(before) | set(after))
                 if before.get(key) != after.get(key) and not key.startswith("rootfs."))


def _layer_change(index: int, original: Side, rebuilt: Side,
                  manifests: list[image_layout.Manifest],
                  configs: list[ConfigDoc]) -> LayerChange | None:
    old, new = (m.layers[index] if index < len(m.layers) else None for m in manifests)
    if old and new and old.digest == new.digest:
        return None
    made_by = image_layout.made_by(configs[1] if new else configs[0], index)
    if not (old and new):
        return LayerChange(index, made_by, old, new)
    files = _file_changes(layers.entries(original.layout.blob(old.digest)),
                          layers.entries(rebuilt.layout.blob(new.digest)))
    return LayerChange(index, made_by, old, new, files,
                       "" if files else _same_files_note(configs, index))


def _file_changes(old: dict[str, layers.Entry],
                  new: dict[str, layers.Entry]) -> tuple[FileChange, ...]:
    return tuple(FileChange(path, old.get(path), new.get(path))
                 for path in sorted(set(old) | set(new)) if old.get(path) != new.get(path))


def _same_files_note(configs: list[ConfigDoc], index: int) -> str:
    diff_ids = [c["rootfs"]["diff_ids"][index] if index < len(c["rootfs"]["diff_ids"]) else ""
                for c in configs]
    if diff_ids[0] == diff_ids[1]:
        return "the same tar, compressed otherwise (another zlib?)"
    return "the same files, in another order or with other tar headers"


def summary(report: Report) -> str:
    """One line: which layers and files, or which config keys, differ."""
    parts = []
    for change in report.layers:
        files = [f.path for f in change.files]
        shown = ", ".join(files[:3]) + (f" (+{len(files) - 3} more)" if len(files) > 3 else "")
        parts.append(f"layer {change.index} ({change.made_by}): "
                     f"{shown or change.note or 'added or removed'}")
    if report.config:
        keys = [c.key for c in report.config]
        parts.append("config: " + ", ".join(keys[:3]) + (" ..." if len(keys) > 3 else ""))
    return "; ".join(parts) or "the manifests differ"


def render(report: Report) -> list[str]:
    """The report as lines for a terminal."""
    lines = [f"verify: original {report.original}", f"verify: rebuilt  {report.rebuilt}"]
    for item in report.config:
        lines.append(f"  config {item.key}: {item.original} -> {item.rebuilt}")
    for change in report.layers:
        sizes = " -> ".join(f"{side.digest[:19]} ({side.size} bytes)" if side else "none"
                            for side in (change.original, change.rebuilt))
        lines.append(f"  layer {change.index} ({change.made_by}): {sizes}")
        lines.extend(f"    {f.path}: {_entry(f.original)} -> {_entry(f.rebuilt)}"
                     for f in change.files[:SHOWN])
        if len(change.files) > SHOWN:
            lines.append(f"    ... {len(change.files) - SHOWN} more in the JSON report")
        if change.note:
            lines.append(f"    {change.note}")
    return lines


def _entry(entry: layers.Entry | None) -> str:
    return entry.describe() if entry else "absent"
