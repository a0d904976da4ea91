"""rebase-check: would the tag's series apply to another pinned upstream? No build.

Only the files the series touches are checked out (git sparse-checkout of the upstream
commit), so the answer costs a fetch (cached) and a few git commands, not a tree copy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sparkbake import planning
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.core.stages import Stage
from sparkbake.errors import ConfigError, PatchError
from sparkbake.fetch import remote_patches, upstream_tree
from sparkbake.files import scratch_dir
from sparkbake.patch import apply, gitapply, gitwork, parsed
from sparkbake.patch.gitapply import Outcome

__all__ = ["check", "render"]

RESULTS = {"applied": "applies", "offset": "applies with offset", "three-way":
           "applies (three-way merge)", "upstream": "already upstream", "conflict": "conflicts",
           "malformed": "is malformed"}


def check(config: Config, tag: Tag, target_key: str, settings: Settings, *,
          console: Console) -> int:
    """Apply tag's series to upstream target_key; print a table; exit 3 unless all apply."""
    if target_key not in config.upstreams:
        raise ConfigError(f"{config.path}: no upstream {target_key!r}",
                          f"known upstreams: {', '.join(sorted(config.upstreams))}")
    target = config.upstreams[target_key]
    plan = planning.make(config, dataclasses.replace(tag, upstream=target))
    plan.require_series()
    folders = Folders.of(config)
    # one line for the stage, as the build's: its git commands go to its log (shown with -v)
    with console.stage(Stage.REBASE_CHECK, plan.patch_key,
                       folders.stage_log(tag.name, Stage.REBASE_CHECK)):
        pristine = upstream_tree.fetch(target, folders.source(plan.fetch_key), settings,
                                       console=console)
        remote_patches.fetch(plan.remote, settings, console=console)
        apply.check_safety(plan.series, pristine)
        upstream = gitwork.upstream_repo(pristine, apply.upstream_message(target),
                                         console=console)
        bases = _own_blobs(config, tag, settings, console=console)
        rows = _rows(plan, pristine, upstream, config, bases, console=console)
    print(render(tag, plan, rows))
    bad = [r for r in rows if not r[2].applied]
    if bad:
        raise PatchError(f"rebase-check: {len(bad)} of {len(rows)} patches of {tag.name} do not "
                         f"apply cleanly to {target_key}",
                         "drop the ones already upstream; refresh the others in a "
                         "`patch --checkout` tree and `export-series` them")
    return 0


def _own_blobs(config: Config, tag: Tag, settings: Settings, *, console: Console) -> Path:
    """The objects of the tag's own upstream, where the series' base blobs (their `index`
    lines) are: with them the three-way merge works across upstreams."""
    own = planning.make(config, tag)
    pristine = upstream_tree.fetch(tag.upstream, Folders.of(config).source(own.fetch_key),
                                   settings, console=console)
    return gitwork.upstream_repo(pristine, apply.upstream_message(tag.upstream),
                                 console=console) / "objects"


def _rows(plan: planning.Plan, pristine: Path, upstream: Path, config: Config,
          bases: Path, *, console: Console) -> list[tuple[str, str, Outcome]]:
    paths = sorted({p for s in plan.series for name, _ in s.patches
                    for _, p in parsed.read_patch(s.path(name)).paths})
    rows = []
    with scratch_dir(config.build_dir / "rebase-check", f"{plan.tag.name}-") as scratch:
        repo = gitwork.work_tree(upstream, pristine, scratch / "tree", sparse=paths,
                                 console=console)
        (repo.git_dir / "objects" / "info" / "alternates").write_text(f"{bases}\n")
        for series in plan.series:
            for name, _sha in series.patches:
                patch = series.path(name)
                header = gitapply.read_header(repo, patch)
                outcome = gitapply.attempt(repo, patch, apply.message(header, series.name,
                                                                        name), header.author)
                if outcome.status == "conflict":
                    repo.git("reset", "-q", "--hard")  # go on with the next patch
                rows.append((_shown(series, config.patches_dir), name, outcome))
    return rows


def _shown(series: planning.SeriesInfo, patches_dir: Path) -> str:
    """A series as the table names it: `name`, or `name/UPSTREAM` for a variant."""
    if series.folder.is_relative_to(patches_dir):
        return series.folder.relative_to(patches_dir).as_posix()
    return series.name


def render(tag: Tag, plan: planning.Plan, rows: list[tuple[str, str, Outcome]]) -> str:
    """The table: one row per patch, its result and, for offsets and conflicts, where."""
    target = plan.tag.upstream
    head = (f"rebase-check {tag.name}: {tag.upstream.key} -> {target.key} "
            f"({apply.describe_pin(target)})")
    width = max([len("SERIES"), *(len(s) for s, _, _ in rows)])
    pwidth = max([len("PATCH"), *(len(p) for _, p, _ in rows)])
    lines = [head, f"{'SERIES':<{width}}  {'PATCH':<{pwidth}}  RESULT"]
    for series, name, outcome in rows:
        lines.append(f"{series:<{width}}  {name:<{pwidth}}  {RESULTS[outcome.status]}"
                     f"{_detail(outcome)}")
    applied = sum(o.applied for _, _, o in rows)
    lines.append(f"{applied} of {len(rows)} patches apply")
    return "\n".join(lines)


def _detail(outcome: Outcome) -> str:
    if outcome.status == "conflict":
        hunk = f" {outcome.hunk}" if outcome.hunk else ""
        notes = "".join(f" ({n})" for n in outcome.notes)
        return f": {outcome.target}{hunk}{notes}"
    if outcome.status == "offset":
        return ": " + "; ".join(outcome.notes)
    if outcome.status == "malformed":
        return f": line {outcome.line}: {outcome.notes[0]}"
    return ""
