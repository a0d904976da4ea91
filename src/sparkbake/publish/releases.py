"""Releases: the index of what was published (build/releases/index.json) and what changed
between two releases, both read from the release records publish writes
(build/releases/<tag>.json). Pure file work: no Docker, no network.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkbake import records
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.errors import UsageError
from sparkbake.files import atomic_write
from sparkbake.oci import image_layout
from sparkbake.publish import release_bench
from sparkbake.publish.record import (
    Change,
    IndexEntry,
    Release,
    ReleaseDiff,
    ReleaseSeries,
)
from sparkbake.publish.shipped_with import LockJson, VerdictsJson

__all__ = ["INDEX", "add", "describe_upstream", "diff", "entries", "entry", "image_manifest",
           "read_record", "render_diff", "render_table", "write_record"]

INDEX = "index.json"
MANIFEST_MEMBER = "opt/sparkbake/manifest.json"
SECTIONS = ("digest", "upstream", "series", "patches", "env", "wheels", "base", "locks",
            "verdicts", "smoke")
# what an unknown section lacks, as render_diff names it
UNRECORDED = {"wheels": "image manifest", "base": "image manifest", "locks": "locks",
              "verdicts": "backend verdicts"}


def image_manifest(layout: image_layout.Layout,
                   image: image_layout.Descriptor) -> BakedManifest | None:
    """/opt/sparkbake/manifest.json of an image in a layout: the bake writes it into the
    image's last layer. None when that layer has none (an image not baked by sparkbake)."""
    layers = layout.read_manifest_doc(image.digest).get("layers") or []
    if not layers:
        return None
    try:
        with tarfile.open(layout.blob(str(layers[-1]["digest"])), "r:*") as tar:
            member = tar.extractfile(MANIFEST_MEMBER)
            loaded: BakedManifest | None = (json.loads(member.read()) if member is not None
                                            else None)
    except (KeyError, OSError, tarfile.TarError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def describe_upstream(upstream: dict[str, str]) -> str:
    """`key (what pins it)`, short: `vllm-0.33.0 (pypi vllm 0.33.0)`."""
    kind = upstream.get("kind")
    if kind == "pypi":
        pin = f"pypi {upstream.get('name')} {upstream.get('version')}"
    elif kind == "git":
        pin = f"git {upstream.get('url')} @ {str(upstream.get('commit'))[:12]}"
    else:
        pin = f"dir {upstream.get('path')} tree {str(upstream.get('tree'))[:12]}"
    key = upstream.get("key")
    return f"{key} ({pin})" if key else pin


def entry(record: Release) -> IndexEntry:
    """The index's line for a release record."""
    return IndexEntry(
        tag=record.tag, digest=record.digest, image_id=record.image_id,
        repository=record.repository, upstream=describe_upstream(record.upstream),
        series=tuple(s.name for s in record.series), smoke=record.smoke_result,
        published=record.published, record=f"{record.tag}.json")


def add(folder: Path, record: Release) -> Path:
    """Put the record's line into folder/index.json, in place of the tag's earlier one (the
    latest publish comes last). Locked, then written atomically."""
    path = folder / INDEX
    with _locked(folder):
        kept = [e for e in _read_index(path) or [] if e.tag != record.tag]
        listed = [records.to_json(e) for e in [*kept, entry(record)]]
        atomic_write(path, json.dumps({"schema": 1, "releases": listed}, indent=2) + "\n")
    return path


def entries(folder: Path) -> list[IndexEntry]:
    """The index's lines; without an index, those of the release records found."""
    listed = _read_index(folder / INDEX)
    if listed is not None:
        return listed
    records = [_load_release(p) for p in sorted(folder.glob("*.json")) if p.name != INDEX]
    found = [entry(r) for r in records if r is not None]
    return sorted(found, key=lambda e: e.published)


def read_record(folder: Path, name: str, *, settings: Settings) -> Release:
    """build/releases/<name>.json, or UsageError naming the releases there are."""
    record = _load_release(folder / f"{name}.json")
    if record is None:
        known = ", ".join(e.tag for e in entries(folder)) or "none yet"
        raise UsageError(f"no release record of {name} ({folder / f'{name}.json'})",
                         f"publish it first (`{settings.command('publish', name)}`); released: "
                         f"{known}")
    return record


def render_table(listed: list[IndexEntry]) -> list[str]:
    rows = [("TAG", "DIGEST", "UPSTREAM", "SERIES", "SMOKE", "PUBLISHED")]
    rows += [(e.tag, e.digest[:19], e.upstream, ",".join(e.series) or "-", e.smoke,
              e.published) for e in listed]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]])
            .rstrip() for row in rows]


def diff(a: Release, b: Release) -> ReleaseDiff:
    """What changed from release a to release b, section by section (empty: the same; None:
    unknown, as a release has no image manifest recorded, which wheels and base come from, or
    its record is from before locks and verdicts were kept)."""
    ma, mb = a.manifest or {}, b.manifest or {}
    sections: dict[str, tuple[Change, ...] | None] = {
        "digest": _scalar("digest", a.digest, b.digest),
        "upstream": _scalar("upstream", describe_upstream(a.upstream),
                            describe_upstream(b.upstream)),
        "series": _series(a.series, b.series),
        "patches": _patches(a.series, b.series),
        "env": _mapping(_env(a), _env(b)),
        "wheels": _mapping(_wheels(ma), _wheels(mb)),
        "base": _scalar("base", _base(ma), _base(mb)),
        "locks": None if a.locks is None or b.locks is None else _locks(a.locks, b.locks),
        "verdicts": None if a.verdicts is None or b.verdicts is None
        else _verdicts(a.verdicts, b.verdicts),
        "smoke": _scalar("smoke", a.smoke_result, b.smoke_result),
    }
    unknown = tuple(tag for tag, m in ((a.tag, ma), (b.tag, mb)) if not m)
    if unknown:
        sections["wheels"] = sections["base"] = None
    lacking = {"locks": tuple(r.tag for r in (a, b) if r.locks is None),
               "verdicts": tuple(r.tag for r in (a, b) if r.verdicts is None)}
    unrecorded = {name: tags for name, tags in lacking.items() if tags}
    return ReleaseDiff(a.tag, b.tag, sections, unknown, unrecorded)


def render_diff(report: ReleaseDiff) -> list[str]:
    lines = [f"diff {report.a} -> {report.b}"]
    for name in SECTIONS:
        changes = report.sections[name]
        if changes is None:
            tags = report.unrecorded.get(name) or report.no_manifest
            lines.append(f"{name}: unknown (no {UNRECORDED[name]} recorded for "
                         f"{', '.join(tags)})")
            continue
        lines.append(f"{name}: {'changed' if changes else 'same'}")
        lines += [f"  {_change_text(c)}" for c in changes]
    if report.bench is not None:
        lines += release_bench.render(report.bench, (report.a, report.b))
    return lines


def _change_text(change: Change) -> str:
    a, b = _short(change.a), _short(change.b)
    if change.op == "+":
        return f"+ {change.what}: {b}"
    if change.op == "-":
        return f"- {change.what}: {a}"
    return f"~ {change.what}: {a} -> {b}"


def _short(value: str | None) -> str | None:
    """A whole sha256 digest as its first 12 hex digits (the JSON keeps it whole)."""
    if value is not None and value.startswith("sha256:") and len(value) == 71:
        return value[:19]
    return value


def _scalar(what: str, a: str | None, b: str | None) -> tuple[Change, ...]:
    return () if a == b else (Change("~", what, a, b),)


def _mapping(a: dict[str, str], b: dict[str, str]) -> tuple[Change, ...]:
    """Added, removed and changed keys of two flat mappings, in key order."""
    changes: list[Change] = []
    for key in sorted(a.keys() | b.keys()):
        if key not in a:
            changes.append(Change("+", key, None, b[key]))
        elif key not in b:
            changes.append(Change("-", key, a[key], None))
        elif a[key] != b[key]:
            changes.append(Change("~", key, a[key], b[key]))
    return tuple(changes)


def _series(a: tuple[ReleaseSeries, ...], b: tuple[ReleaseSeries, ...]) -> tuple[Change, ...]:
    names_a, names_b = [s.name for s in a], [s.name for s in b]
    counts = {s.name: _patch_count(len(s.patches)) for s in [*a, *b]}
    changes = _mapping({n: counts[n] for n in names_a}, {n: counts[n] for n in names_b})
    changes = tuple(c for c in changes if c.op != "~")  # a series' own changes: see patches
    if names_a != names_b:
        changes += (Change("~", "order", ", ".join(names_a) or "-", ", ".join(names_b) or "-"),)
    return changes


def _patch_count(count: int) -> str:
    return f"{count} patch" if count == 1 else f"{count} patches"


def _patches(a: tuple[ReleaseSeries, ...], b: tuple[ReleaseSeries, ...]) -> tuple[Change, ...]:
    """Every patch file, as series/file -> sha256, compared."""
    def files(series: tuple[ReleaseSeries, ...]) -> dict[str, str]:
        return {f"{s.name}/{name}": f"sha256:{sha[:12]}" for s in series
                for name, sha in s.patches}
    return _mapping(files(a), files(b))


def _env(record: Release) -> dict[str, str]:
    """The release's env; a record from before it was kept: the image manifest's."""
    env = record.env
    if env is None:
        env = (record.manifest or {}).get("env") or {}
    return {str(k): repr(str(v)) for k, v in env.items()}


def _wheels(manifest: BakedManifest) -> dict[str, str]:
    return {str(w.get("name")): f"{w.get('file')} sha256:{str(w.get('sha256'))[:12]}"
            for w in manifest.get("wheels") or []}


def _base(manifest: BakedManifest) -> str | None:
    base = manifest.get("base") or {}
    return f"{base.get('image')} {str(base.get('digest'))[:19]}" if base else None


def _locks(a: dict[str, LockJson], b: dict[str, LockJson]) -> tuple[Change, ...]:
    """Each lock by path and sha256; then the packages that moved between the runtime locks,
    where both records list them."""
    def identity(locks: dict[str, LockJson]) -> dict[str, str]:
        return {role: f"{lock['path']} sha256:{lock['sha256'][:12]}"
                for role, lock in locks.items()}

    def packages(locks: dict[str, LockJson]) -> dict[str, str] | None:
        return locks["runtime"].get("packages") if "runtime" in locks else None

    moved: tuple[Change, ...] = ()
    if (pa := packages(a)) is not None and (pb := packages(b)) is not None:
        moved = tuple(Change(c.op, f"runtime {c.what}", c.a, c.b) for c in _mapping(pa, pb))
    return _mapping(identity(a), identity(b)) + moved


def _verdicts(a: VerdictsJson, b: VerdictsJson) -> tuple[Change, ...]:
    """Where the verdicts come from (vLLM version, arch, model; none listed), then vLLM's
    verdict on each backend the env selects, as `kind name`."""
    def table(verdicts: VerdictsJson) -> str:
        listed = "" if verdicts["listed"] else " (none in images/backend-verdicts.json)"
        return (f"vLLM {verdicts['vllm'] or 'unknown'} on {verdicts['cuda_arch']} for "
                f"{verdicts['model'] or 'no declared model'}{listed}")

    def said(verdicts: VerdictsJson) -> dict[str, str]:
        unknown = f"not a backend of vLLM {verdicts['vllm']}" if verdicts["listed"] \
            else "no verdict"
        return {f"{kind} {name}": unknown if why is None else why or "runs"
                for kind, names in verdicts["backends"].items() for name, why in names.items()}

    return _scalar("table", table(a), table(b)) + _mapping(said(a), said(b))


def _load(path: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _load_release(path: Path) -> Release | None:
    """The release record at path; None when there is none, or the file is not one."""
    loaded = _load(path)
    try:
        return records.from_json(Release, loaded) if loaded is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def _read_index(path: Path) -> list[IndexEntry] | None:
    """The index's lines (those that are whole); None without a readable index."""
    loaded = _load(path)
    listed = loaded.get("releases") if loaded is not None else None
    if not isinstance(listed, list):
        return None
    return [line for line in map(_index_line, listed) if line is not None]


def _index_line(line: Any) -> IndexEntry | None:
    try:
        return records.from_json(IndexEntry, line)
    except records.RecordError:  # a line that is not whole
        return None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One publish at a time updates the index (read, change, write)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f".{INDEX}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def write_record(folder: Path, release: Release, *, console: Console) -> None:
    """build/releases/<tag>.json, then its line in the releases index."""
    path = folder / f"{release.tag}.json"
    atomic_write(path, json.dumps(records.to_json(release), indent=2, sort_keys=True) + "\n")
    console.detail(f"release record: {path} (index: {add(folder, release)})")
