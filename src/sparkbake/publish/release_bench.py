"""The bench figures of two releases in their diff. A release is written before any cluster
runs it, so its record holds no bench: each release's figures are those measured on a
cluster that ran its image (nodes.bench_store, found by the release's image ID or digest),
shown beside each other with how they changed.
"""

from __future__ import annotations

from pathlib import Path

from sparkbake.nodes import bench_store
from sparkbake.nodes.bench_store import Measured
from sparkbake.publish.record import Change, Release, ReleaseBench

__all__ = ["compare", "image_ids", "measured", "render"]


def image_ids(release: Release) -> set[str]:
    """The IDs and manifest digests a cluster's image may have been of this release: its own,
    and each platform's of a multi-platform one."""
    return {i for r in (release, *release.platforms) for i in (r.image_id, r.digest) if i}


def measured(folder: Path, a: Release, b: Release) -> ReleaseBench:
    """The two releases' benches kept in folder (build/clusters), compared."""
    return compare(bench_store.lookup(folder, image_ids(a)),
                   bench_store.lookup(folder, image_ids(b)))


def compare(a: Measured | None, b: Measured | None) -> ReleaseBench:
    """Each figure that differs between two measured benches; none where one is missing."""
    if a is None or b is None:
        return ReleaseBench(a, b, ())
    fa, fb = _figures(a), _figures(b)
    return ReleaseBench(a, b, tuple(Change("~", what, fa[what], fb[what]) for what in fa
                                    if fa[what] != fb[what]))


def _figures(found: Measured) -> dict[str, str]:
    figures = found.figures
    return {"decode tok/s": f"{figures.decode_tok_s:.1f}",
            "TTFT median ms": f"{figures.ttft_median_ms:.1f}",
            "acceptance length": _acceptance(found), "load": _load(found)}


def _acceptance(found: Measured) -> str:
    length = found.figures.acceptance_length
    return f"{length:.2f}" if length else "none" if not found.figures.speculates else "no draft"


def _load(found: Measured) -> str:
    load = found.figures.load
    return (f"{load.prompts} prompts of {load.input_len} tokens, {load.output_len} out, "
            f"{load.concurrency} at a time")


def render(report: ReleaseBench, tags: tuple[str, str]) -> list[str]:
    """The bench section: its verdict, each release's figures (or not measured) in one line,
    then each change with its ratio."""
    missing = [tag for tag, found in zip(tags, (report.a, report.b), strict=True) if not found]
    head = (f"unknown (not measured: {', '.join(missing)})" if missing
            else "changed" if report.changes else "same")
    lines = [f"bench: {head}"]
    lines += [f"  {tag}: {_line(found, tag)}"
              for tag, found in zip(tags, (report.a, report.b), strict=True)]
    return lines + [f"  ~ {c.what}: {c.a} -> {c.b}{_ratio(c)}" for c in report.changes]


def _line(found: Measured | None, tag: str) -> str:
    if found is None:
        return (f"not measured: no bench of its image is kept (`sparkbake bench {tag}` on a "
                f"cluster up with it)")
    figures = found.figures
    return (f"decode {figures.decode_tok_s:.1f} tok/s, TTFT median {figures.ttft_median_ms:.1f} "
            f"ms, acceptance {_acceptance(found)}; {_load(found)}; measured {figures.date} on "
            f"{found.cluster}'s cluster ({found.image_id[:19]})")


def _ratio(change: Change) -> str:
    """ (+4.6 %) after a number that changed; nothing after words."""
    try:
        before, after = float(change.a or ""), float(change.b or "")
    except ValueError:
        return ""
    return f" ({(after - before) / before:+.1%})" if before else ""
