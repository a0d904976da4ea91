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

from sparkbake.console.invocation import command
from sparkbake.errors import UsageError
from sparkbake.files import atomic_write
from sparkbake.oci import ocilayout

__all__ = ["INDEX", "add", "describe_upstream", "diff", "entries", "entry", "image_manifest",
           "read_record", "render_diff", "render_table"]

INDEX = "index.json"
MANIFEST_MEMBER = "opt/sparkbake/manifest.json"
SECTIONS = ("digest", "upstream", "series", "patches", "env", "wheels", "base", "smoke")
Change = dict[str, Any]  # {"op": "+" | "-" | "~", "what": str, "a": str | None, "b": ...}


def image_manifest(layout: ocilayout.Layout, image: ocilayout.Descriptor) -> dict[str, Any] | None:
    """/opt/sparkbake/manifest.json of an image in a layout: the bake writes it into the
    image's last layer. None when that layer has none (an image not baked by sparkbake)."""
    layers = layout.read_json(image.digest).get("layers") or []
    if not layers:
        return None
    try:
        with tarfile.open(layout.blob(str(layers[-1]["digest"])), "r:*") as tar:
            member = tar.extractfile(MANIFEST_MEMBER)
            loaded = json.loads(member.read()) if member is not None else None
    except (KeyError, OSError, tarfile.TarError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def describe_upstream(upstream: dict[str, Any]) -> str:
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


def entry(record: dict[str, Any]) -> dict[str, Any]:
    """The index's line for a release record."""
    return {
        "tag": record["tag"], "digest": record["digest"], "image_id": record.get("image_id"),
        "repository": record.get("repository"),
        "upstream": describe_upstream(record.get("upstream") or {}),
        "series": [s["name"] for s in record.get("series") or []],
        "smoke": (record.get("smoke") or {}).get("result", "unknown"),
        "published": record.get("published", ""), "record": f"{record['tag']}.json",
    }


def add(folder: Path, record: dict[str, Any]) -> Path:
    """Put the record's line into folder/index.json, in place of the tag's earlier one (the
    latest publish comes last). Locked, then written atomically."""
    path = folder / INDEX
    with _locked(folder):
        kept = [e for e in _read_index(path) or [] if e.get("tag") != record["tag"]]
        atomic_write(path, json.dumps({"schema": 1, "releases": [*kept, entry(record)]},
                                      indent=2) + "\n")
    return path


def entries(folder: Path) -> list[dict[str, Any]]:
    """The index's lines; without an index, those of the release records found."""
    listed = _read_index(folder / INDEX)
    if listed is not None:
        return listed
    records = [_load(p) for p in sorted(folder.glob("*.json")) if p.name != INDEX]
    found = [entry(r) for r in records if r is not None and "tag" in r and "digest" in r]
    return sorted(found, key=lambda e: str(e["published"]))


def read_record(folder: Path, name: str) -> dict[str, Any]:
    """build/releases/<name>.json, or UsageError naming the releases there are."""
    record = _load(folder / f"{name}.json")
    if record is None:
        known = ", ".join(e["tag"] for e in entries(folder)) or "none yet"
        raise UsageError(f"no release record of {name} ({folder / f'{name}.json'})",
                         f"publish it first (`{command('publish', name)}`); released: {known}")
    return record


def render_table(listed: list[dict[str, Any]]) -> list[str]:
    rows = [("TAG", "DIGEST", "UPSTREAM", "SERIES", "SMOKE", "PUBLISHED")]
    rows += [(e["tag"], str(e["digest"])[:19], e["upstream"], ",".join(e["series"]) or "-",
              e["smoke"], e["published"]) for e in listed]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]])
            .rstrip() for row in rows]


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What changed from release a to release b, section by section (empty: the same; None:
    unknown, as a release has no image manifest recorded, which wheels and base come from)."""
    ma, mb = a.get("manifest") or {}, b.get("manifest") or {}
    sections: dict[str, list[Change] | None] = {
        "digest": _scalar("digest", a.get("digest"), b.get("digest")),
        "upstream": _scalar("upstream", describe_upstream(a.get("upstream") or {}),
                            describe_upstream(b.get("upstream") or {})),
        "series": _series(a.get("series") or [], b.get("series") or []),
        "patches": _patches(a.get("series") or [], b.get("series") or []),
        "env": _mapping(_env(a), _env(b)),
        "wheels": _mapping(_wheels(ma), _wheels(mb)),
        "base": _scalar("base", _base(ma), _base(mb)),
        "smoke": _scalar("smoke", (a.get("smoke") or {}).get("result", "unknown"),
                         (b.get("smoke") or {}).get("result", "unknown")),
    }
    unknown = [tag for tag, m in ((a["tag"], ma), (b["tag"], mb)) if not m]
    if unknown:
        sections["wheels"] = sections["base"] = None
    return {"a": a["tag"], "b": b["tag"], "sections": sections, "no_manifest": unknown}


def render_diff(report: dict[str, Any]) -> list[str]:
    lines = [f"diff {report['a']} -> {report['b']}"]
    for name in SECTIONS:
        changes = report["sections"][name]
        if changes is None:
            lines.append(f"{name}: unknown (no image manifest recorded for "
                         f"{', '.join(report['no_manifest'])})")
            continue
        lines.append(f"{name}: {'changed' if changes else 'same'}")
        lines += [f"  {_change_text(c)}" for c in changes]
    return lines


def _change_text(change: Change) -> str:
    a, b = (_short(change[side]) for side in ("a", "b"))
    if change["op"] == "+":
        return f"+ {change['what']}: {b}"
    if change["op"] == "-":
        return f"- {change['what']}: {a}"
    return f"~ {change['what']}: {a} -> {b}"


def _short(value: Any) -> Any:
    """A whole sha256 digest as its first 12 hex digits (the JSON keeps it whole)."""
    whole = isinstance(value, str) and value.startswith("sha256:") and len(value) == 71
    return value[:19] if whole else value


def _scalar(what: str, a: Any, b: Any) -> list[Change]:
    return [] if a == b else [{"op": "~", "what": what, "a": a, "b": b}]


def _mapping(a: dict[str, str], b: dict[str, str]) -> list[Change]:
    """Added, removed and changed keys of two flat mappings, in key order."""
    changes: list[Change] = []
    for key in sorted(a.keys() | b.keys()):
        if key not in a:
            changes.append({"op": "+", "what": key, "a": None, "b": b[key]})
        elif key not in b:
            changes.append({"op": "-", "what": key, "a": a[key], "b": None})
        elif a[key] != b[key]:
            changes.append({"op": "~", "what": key, "a": a[key], "b": b[key]})
    return changes


def _series(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[Change]:
    names_a, names_b = [s["name"] for s in a], [s["name"] for s in b]
    counts = {s["name"]: _patch_count(len(s.get("patches") or [])) for s in [*a, *b]}
    changes = _mapping({n: counts[n] for n in names_a}, {n: counts[n] for n in names_b})
    changes = [c for c in changes if c["op"] != "~"]  # a series' own changes: see patches
    if names_a != names_b:
        changes.append({"op": "~", "what": "order", "a": ", ".join(names_a) or "-",
                        "b": ", ".join(names_b) or "-"})
    return changes


def _patch_count(count: int) -> str:
    return f"{count} patch" if count == 1 else f"{count} patches"


def _patches(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[Change]:
    """Every patch file, as series/file -> sha256, compared."""
    def files(series: list[dict[str, Any]]) -> dict[str, str]:
        return {f"{s['name']}/{name}": f"sha256:{str(sha)[:12]}" for s in series
                for name, sha in s.get("patches") or []}
    return _mapping(files(a), files(b))


def _env(record: dict[str, Any]) -> dict[str, str]:
    env = record.get("env")
    if env is None:
        env = (record.get("manifest") or {}).get("env") or {}
    return {str(k): repr(str(v)) for k, v in env.items()}


def _wheels(manifest: dict[str, Any]) -> dict[str, str]:
    return {str(w.get("name")): f"{w.get('file')} sha256:{str(w.get('sha256'))[:12]}"
            for w in manifest.get("wheels") or []}


def _base(manifest: dict[str, Any]) -> str | None:
    base = manifest.get("base") or {}
    return f"{base.get('image')} {str(base.get('digest'))[:19]}" if base else None


def _load(path: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _read_index(path: Path) -> list[dict[str, Any]] | None:
    loaded = _load(path)
    listed = loaded.get("releases") if loaded is not None else None
    return [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One publish at a time updates the index (read, change, write)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f".{INDEX}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
