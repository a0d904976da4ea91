"""patch: apply a tag's series in order, with git, to a copy of the pristine tree.

Each patch becomes one commit carrying the patch's own subject, description and author
(as `git am` makes it) at a fixed date, with `Sparkbake-Series:`/`Sparkbake-Patch:`
trailers, so `git log` of a patched tree reads series by series, patch by patch.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbake.config.versions import Upstream
from sparkbake.console.display import Console
from sparkbake.core.stages import Stage
from sparkbake.errors import ConfigError, PatchError, UsageError
from sparkbake.fetch import remote_patches
from sparkbake.files import atomic_dir
from sparkbake.hashing import tree_hash
from sparkbake.patch import parsed, syntax
from sparkbake.planning import Plan, SeriesInfo, upstream_pin

if TYPE_CHECKING:
    from sparkbake.patch import gitapply, gitwork
    from sparkbake.patch.gitapply import Outcome

__all__ = ["Options", "PatchedTree", "apply", "check_safety", "describe_pin", "message"]

REPORT = "patches.json"
FORMAT = 2  # entries of format 1 kept .git inside the tree and no per-patch status


@dataclass(frozen=True)
class PatchedTree:
    path: Path
    key: str
    tree_hash: str


@dataclass(frozen=True)
class Options:
    skip_applied: bool = False  # skip (and record) patches already in upstream
    keep: bool = False  # leave the three-way conflict markers in the failed tree
    checkout: Path | None = None  # also give a git work tree of the result here


def apply(plan: Plan, pristine: Path, entry: Path, options: Options = Options(), *,
          console: Console) -> PatchedTree:
    """Make entry/tree = pristine + every series of the tag, one git commit per patch.

    entry/git holds the history (outside the tree, so builds see a plain source tree).
    """
    plan.require_series()
    _require_fetched(plan.series)
    check_safety(plan.series, pristine)
    if options.checkout is not None and options.checkout.exists() and any(
            options.checkout.iterdir()):
        raise UsageError(f"--checkout {options.checkout}: the folder is not empty",
                         "name a new or empty folder")
    if is_patched(entry):
        done = _cached(plan, entry, options, console=console)
    else:  # missing, or made by an older sparkbake: made anew
        done = _apply(plan, pristine, entry, options, console=console)
    if options.checkout is not None:
        checkout(entry, options.checkout, console=console)
    return done


def is_patched(entry: Path) -> bool:
    """Is the patch stage's entry complete, and made by this sparkbake's format? The stage
    skips it, and `plan` says cached, on this one test."""
    return _record(entry).get("format") == FORMAT


def _record(entry: Path) -> dict[str, Any]:
    try:
        record = json.loads((entry / REPORT).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _cached(plan: Plan, entry: Path, options: Options, *, console: Console) -> PatchedTree:
    record = _record(entry)
    skipped = [p for s in record["series"] for p in s["patches"] if p["status"] == "upstream"]
    if skipped and not options.skip_applied:
        first = skipped[0]
        raise _upstream_error(plan, f"{first['series']}/{first.get('file') or first['url']}")
    console.cached(Stage.PATCH, f"patch: {plan.tag.name} cached at {entry.name[:12]}"
                   + (f" ({len(skipped)} already-upstream patch(es) skipped)" if skipped else ""))
    return PatchedTree(entry / "tree", plan.patch_key, record["tree_hash"])


def _apply(plan: Plan, pristine: Path, entry: Path, options: Options, *,
           console: Console) -> PatchedTree:
    from sparkbake.patch import gitwork  # here: a no-op build applies nothing

    upstream = gitwork.upstream_repo(pristine, upstream_message(plan.tag.upstream), console=console)
    failed = entry.with_name(entry.name + ".failed")
    shutil.rmtree(failed, ignore_errors=True)
    with atomic_dir(entry) as tmp:
        repo = gitwork.work_tree(upstream, pristine, tmp / "tree", console=console)
        others = _other_upstreams(pristine) if options.keep else []
        records = []
        for series in plan.series:
            try:
                records.append(_apply_series(plan, series, repo, options, others,
                                             console=console))
            except PatchError as error:
                if not options.keep:
                    repo.git("reset", "-q", "--hard")  # the tree as before the failing patch
                kept = _keep(tmp / "tree", options.checkout or failed)
                if isinstance(error, Conflict):
                    console.detail(error.report + _next_steps(error, kept, options.keep))
                    raise error.kept_at(kept, options.keep) from None
                raise
        (tmp / "tree" / ".git").rename(tmp / "git")
        digest = tree_hash(tmp / "tree")
        (tmp / REPORT).write_text(json.dumps({
            "format": FORMAT, "tag": plan.tag.name, "upstream": upstream_pin(plan.tag.upstream),
            "tree_hash": digest, "series": records}, indent=2) + "\n")
    return PatchedTree(entry / "tree", plan.patch_key, digest)


def _keep(tree: Path, dest: Path) -> Path:
    """A failed tree kept for inspection at dest (the --checkout folder, else beside the
    cache entry), never as a cache entry."""
    if dest.is_dir() and not any(dest.iterdir()):
        dest.rmdir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(tree, dest)
    return dest


def _apply_series(plan: Plan, series: SeriesInfo, repo: gitwork.Repo, options: Options,
                  others: list[Path], *, console: Console) -> dict[str, Any]:
    from sparkbake.patch import gitapply
    records = []
    for name, sha in series.patches:
        patch = series.path(name)
        console.detail(f"patch: {series.name}/{name}")
        header = gitapply.read_header(repo, patch)
        outcome = gitapply.attempt(repo, patch, message(header, series.name, name),
                                   header.author)
        if outcome.status == "conflict" and options.keep and not outcome.markers:
            _borrow_base(repo, patch, others, console=console)
        _judge(plan, series, name, header, outcome, options, console=console)
        records.append({"series": series.name, **series.record(name, sha),
                        "subject": header.subject, "status": outcome.status,
                        "notes": list(outcome.notes)})
    return {"name": series.name, "sha256": series.sha256, "patches": records}


def _borrow_base(repo: gitwork.Repo, patch: Path, others: list[Path], *,
                 console: Console) -> None:
    """--keep, and no markers: the patch was made against another upstream. Where one
    fetched here holds its base blobs, merge three-way with them (the outcome stays a
    conflict: the markers are for the person refreshing the patch)."""
    from sparkbake.patch import gitapply
    used = gitapply.merge_markers(repo, patch, others)
    if used is not None:
        console.notice(f"patch: conflict markers from a three-way merge with the base blobs "
                       f"in {used}")


def _other_upstreams(pristine: Path) -> list[Path]:
    """The upstream repositories fetched beside this one (build/sources/*/upstream.git)."""
    return [p for p in sorted(pristine.parent.parent.glob("*/upstream.git"))
            if p.parent != pristine.parent]


def _judge(plan: Plan, series: SeriesInfo, name: str, header: gitapply.Header,
           outcome: Outcome, options: Options, *, console: Console) -> None:
    where = f"{series.name}/{name}"
    if outcome.status == "upstream":
        if not options.skip_applied:
            raise _upstream_error(plan, where)
        console.notice(f"warning: patch {where} is already in upstream "
                       f"{describe_pin(plan.tag.upstream)}: skipped (--skip-applied); drop it "
                       "from the series")
    elif outcome.status == "malformed":
        raise malformed_error(_shown(series, name),
                              syntax.Malformed(outcome.line, outcome.notes[0]))
    elif outcome.status == "conflict":
        where_in = f"{outcome.target}, hunk {outcome.hunk!r}" if outcome.hunk else outcome.target
        raise Conflict(
            f"tag {plan.tag.name}: patch {where} does not apply to {plan.tag.upstream.key} "
            f"({describe_pin(plan.tag.upstream)}): {where_in}",
            f"{_refresh(series, name)} (docs/how-to/patches.md)",
            conflict_report(plan, series, name, header.subject, outcome),
            series.name,
            header.author)
    for note in outcome.notes:
        console.notice(f"warning: patch {where}: {note}")


class Conflict(PatchError):
    """A patch that does not apply; carries the report printed once the tree is kept."""

    def __init__(self, message: str, remedy: str, report: str, series: str,
                 author: gitwork.Author) -> None:
        super().__init__(message, remedy)
        self.report, self.series, self.author = report, series, author

    def kept_at(self, tree: Path, keep: bool) -> Conflict:
        """The same conflict, its remedy naming where the partial tree is kept."""
        kept = (f"{tree} keeps the three-way conflict markers: resolve and commit there, "
                f"then `export-series {tree} {self.series}`" if keep else
                f"the partial tree is kept in {tree} (--keep: with the conflict markers)")
        return Conflict(self.message, f"{self.remedy}; {kept}", self.report, self.series,
                        self.author)


def _refresh(series: SeriesInfo, name: str) -> str:
    """What to do about a patch that conflicts: refresh a local one, re-pin a remote one."""
    if not remote_patches.is_remote(name):
        return f"refresh {series.folder / name} against this upstream"
    where = next(r.where for r in series.remote if r.url == name)
    return (f"pin a version of {name} made for this upstream (URL and sha256 at {where}), "
            "or refresh it as a local patch")


def _shown(series: SeriesInfo, name: str) -> str:
    """A patch as a person finds it: its file in the series folder, or its URL."""
    return name if remote_patches.is_remote(name) else str(series.folder / name)


def conflict_report(plan: Plan, series: SeriesInfo, name: str, subject: str,
                    outcome: Outcome) -> str:
    """The block printed before the error: everything needed to refresh the patch."""
    lines = [
        "patch: CONFLICT",
        f"  tag:      {plan.tag.name}",
        f"  upstream: {plan.tag.upstream.key} ({describe_pin(plan.tag.upstream)})",
        f"  series:   {series.name}",
        f"  patch:    {_shown(series, name)}",
        f"  subject:  {subject}",
        f"  file:     {outcome.target}" + "".join(f" ({n})" for n in outcome.notes),
    ]
    if outcome.hunk:
        lines += [f"  hunk:     {outcome.hunk}", *(f"            {x}" for x in outcome.lines)]
    if outcome.markers:
        lines.append(f"  three-way: conflicts in {', '.join(outcome.markers)}")
    return "\n".join(lines)


def _next_steps(conflict: Conflict, failed: Path, keep: bool) -> str:
    if not keep:
        return (f"\n  tree:     {failed} (git log: what applied; "
                "rerun with --keep for the three-way conflict markers)")
    author = f"{conflict.author.name} <{conflict.author.email}>"
    return (f"\n  tree:     {failed} (three-way conflict markers kept, commit message "
            f"prefilled)\n  next:     resolve, `git add`, `git commit --author='{author}'`, "
            f"`git am -3` the rest of {conflict.series}, then `sparkbake export-series "
            f"{failed} {conflict.series}`")


def _upstream_error(plan: Plan, where: str) -> PatchError:
    return PatchError(
        f"tag {plan.tag.name}: patch {where} is already in upstream {plan.tag.upstream.key} "
        f"({describe_pin(plan.tag.upstream)}): its reverse applies",
        "drop it from the series, or rerun with --skip-applied to skip it")


def message(header: gitapply.Header, series: str, patch: str) -> str:
    """The commit message: the patch's subject and description, then sparkbake's trailers."""
    from sparkbake.patch import gitapply
    body = f"\n\n{header.body}" if header.body else ""
    return f"{header.subject}{body}\n\n{gitapply.trailers(series, patch)}"


def check_safety(series: tuple[SeriesInfo, ...], tree: Path | None) -> None:
    """Refuse patches that are malformed, reach outside the tree or lack binary data,
    before any copy."""
    for info in series:
        for name, _sha in info.patches:
            if found := syntax.check(info.path(name).read_text(errors="replace")):
                raise malformed_error(_shown(info, name), found)
            problems = parsed.unsafe(parsed.read_patch(info.path(name)), tree)
            if problems:
                line = problems[0].where.rsplit(":", 1)[-1]
                raise ConfigError(f"{_shown(info, name)}:{line}: {problems[0].what}",
                                  "fix the patch (sparkbake patch-lint lists every problem)")


def malformed_error(shown: str, found: syntax.Malformed) -> PatchError:
    """A patch file git cannot read as its author meant: broken, not in conflict."""
    if found.line == 0:
        return PatchError(f"{shown}: {found.what}",
                          "put a patch there (`git format-patch`), or take it out of the "
                          "series file")
    return PatchError(f"{shown}:{found.line}: malformed patch (not a conflict): {found.what}",
                      "remake it with `git format-patch`, or fix that hunk and its @@ line "
                      "counts (`sparkbake patch-lint` checks every patch)")


def _require_fetched(series: tuple[SeriesInfo, ...]) -> None:
    """Remote patches come from the fetch stage: no network here."""
    for info in series:
        for remote in remote_patches.missing(info.remote):
            raise ConfigError(f"{remote.where}: remote patch {remote.url} is not fetched",
                              f"run `sparkbake fetch TAG` first (it downloads it into "
                              f"{remote.path.parent})")


def checkout(entry: Path, dest: Path, *, console: Console) -> None:
    """A git work tree of the patched tree at dest: upstream commit, then one per patch."""
    from sparkbake.patch import gitwork
    dest.parent.mkdir(parents=True, exist_ok=True)
    repo = gitwork.work_tree(entry / "git", entry / "tree", dest, console=console)
    head = repo.out("log", "--oneline", "-1")
    console.detail(f"checkout: {dest} at {head}; upstream is tag {gitwork.UPSTREAM_TAG}")


def describe_pin(upstream: Upstream) -> str:
    pin = upstream_pin(upstream)
    if pin["kind"] == "pypi":
        return f"{pin['name']} {pin['version']}, sdist sha256 {pin['sha256'][:12]}"
    if pin["kind"] == "git":
        return f"{pin['url']} at {pin['commit'][:12]}"
    return f"dir {pin['path']}, tree {pin['tree'][:12]}"


def upstream_message(upstream: Upstream) -> str:
    return (f"upstream: {upstream.key} ({describe_pin(upstream)})\n\n"
            f"sparkbake pin: {json.dumps(upstream_pin(upstream), sort_keys=True)}\n")
