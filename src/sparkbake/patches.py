"""patch: apply a tag's series in order, with git, to a copy of the pristine tree."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .cache import atomic_dir
from .errors import EngineError, PatchError
from .hashing import tree_hash
from .plan import Plan, SeriesInfo, upstream_pin
from .proc import echo, run

__all__ = ["PatchedTree", "apply", "failing_hunk"]

# Fixed identity and time: the patched tree's history is the same on every machine.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "sparkbake", "GIT_AUTHOR_EMAIL": "sparkbake@localhost",
    "GIT_COMMITTER_NAME": "sparkbake", "GIT_COMMITTER_EMAIL": "sparkbake@localhost",
    "GIT_AUTHOR_DATE": "1970-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "1970-01-01T00:00:00Z",
}
FAILED = re.compile(r"error: patch failed: (?P<file>.+):(?P<line>\d+)")
MISSING = re.compile(r"error: (?P<file>.+): (?:No such file or directory|does not exist in index)")


@dataclass(frozen=True)
class PatchedTree:
    path: Path
    key: str
    tree_hash: str


def apply(plan: Plan, pristine: Path, entry: Path) -> PatchedTree:
    """Make entry/tree = pristine + every series of the tag, one git commit per patch."""
    plan.require_series()
    tree = entry / "tree"
    report = entry / "patches.json"
    if report.is_file():
        echo(f"patch: {plan.tag.name} cached at {entry.name[:12]}")
        return PatchedTree(tree, plan.patch_key, json.loads(report.read_text())["tree_hash"])
    failed = entry.with_name(entry.name + ".failed")
    shutil.rmtree(failed, ignore_errors=True)
    with atomic_dir(entry) as tmp:
        work = tmp / "tree"
        shutil.copytree(pristine, work, symlinks=True)
        _git(work, "init", "-q")
        _commit(work, "upstream " + json.dumps(upstream_pin(plan.tag.upstream), sort_keys=True))
        try:
            for series in plan.series:
                _apply_series(plan, series, work)
        except PatchError:
            shutil.move(work, failed)  # kept for inspection, never a cache entry
            raise
        digest = tree_hash(work)
        (tmp / "patches.json").write_text(json.dumps({
            "tag": plan.tag.name, "tree_hash": digest,
            "series": [{"name": s.name, "sha256": s.sha256,
                        "patches": [{"file": f, "sha256": h} for f, h in s.patches]}
                       for s in plan.series],
        }, indent=2))
    return PatchedTree(tree, plan.patch_key, digest)


def _apply_series(plan: Plan, series: SeriesInfo, work: Path) -> None:
    for name, _sha in series.patches:
        patch = series.folder / name
        echo(f"patch: {series.name}/{name}")
        check = subprocess.run(["git", "apply", "--check", "-v", str(patch)], cwd=work,
                               capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise _conflict(plan, series, patch, check.stderr)
        _git(work, "apply", "--whitespace=nowarn", str(patch))
        _commit(work, f"{series.name}: {name}")


def _conflict(plan: Plan, series: SeriesInfo, patch: Path, stderr: str) -> PatchError:
    pin = upstream_pin(plan.tag.upstream)
    upstream = pin.get("version") or pin.get("commit", "")[:12] or pin.get("tree", "")[:12]
    found = FAILED.search(stderr)
    if found:
        target, line = found["file"], int(found["line"])
        hunk = failing_hunk(patch, target, line)
        where = f"{target}, hunk {hunk!r}"
    else:
        missing = MISSING.search(stderr)
        target = missing["file"] if missing else "?"
        where = f"{target} (file not in the tree)"
    return PatchError(
        f"tag {plan.tag.name}: patch {series.name}/{patch.name} does not apply to "
        f"{plan.tag.upstream.key} ({upstream}): {where}",
        f"refresh {patch} against this upstream; the partial tree is kept for inspection",
    )


def failing_hunk(patch: Path, target: str, old_start: int) -> str:
    """The `@@ ... @@` header of the hunk of `target` that starts at old line `old_start`."""
    current = None
    for raw in patch.read_text(errors="replace").splitlines():
        if raw.startswith("--- "):
            current = raw[4:].removeprefix("a/")
        elif raw.startswith("@@") and current == target:
            hunk = re.match(r"@@ -(\d+)", raw)
            if hunk and int(hunk.group(1)) == old_start:
                return raw
    return f"@@ -{old_start} @@"


def _git(work: Path, *args: str) -> None:
    run(["git", "-C", work, *args], error=EngineError, what=f"git {args[0]}", capture=True)


def _commit(work: Path, message: str) -> None:
    cmd = ["git", "-C", str(work), "-c", "commit.gpgsign=false", "add", "-A"]
    subprocess.run(cmd, check=True, capture_output=True)
    subprocess.run(["git", "-C", str(work), "-c", "commit.gpgsign=false", "commit", "-q",
                    "--allow-empty", "-m", message], check=True, capture_output=True,
                   env={**_base_env(), **GIT_ENV})


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
