"""One patch against a git work tree: already upstream, applies, applies with offset,
merges three-way, or conflicts (with the file and hunk that failed)."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sparkbake.patch import syntax
from sparkbake.patch.gitwork import Author, Repo

__all__ = ["Header", "Outcome", "attempt", "base_blobs", "hunk_at", "merge_markers", "read_header",
           "trailers"]

OFFSET = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")
CHECKING = re.compile(r"^Checking patch (.+)\.\.\.$")
FAILED = re.compile(r"error: patch failed: (?P<file>.+):(?P<line>\d+)")
MISSING = re.compile(r"error: (?P<file>.+): (?:No such file or directory|does not exist in index)")
EXISTS = re.compile(r"error: (?P<file>.+): already exists in (?:working directory|index)")
HUNK_LINES = 6
SERIES_TRAILER = "Sparkbake-Series"
PATCH_TRAILER = "Sparkbake-Patch"


@dataclass(frozen=True)
class Header:
    subject: str
    body: str
    author: Author


@dataclass(frozen=True)
class Outcome:
    """What happened to one patch.

    status: applied | offset | three-way | upstream | conflict | malformed (git cannot read it).
    """

    status: str
    notes: tuple[str, ...] = ()  # offsets, or the three-way merge
    target: str = ""  # conflict: the file that failed
    hunk: str = ""  # conflict: its `@@` header
    lines: tuple[str, ...] = ()  # conflict: the hunk's first lines
    markers: tuple[str, ...] = ()  # conflict: files left with three-way conflict markers
    line: int = 0  # malformed: the line of the patch file git stopped at

    @property
    def applied(self) -> bool:
        return self.status in ("applied", "offset", "three-way")


def read_header(repo: Repo, patch: Path) -> Header:
    """Subject, description and author as `git am` takes them (`git mailinfo -b`)."""
    with tempfile.TemporaryDirectory(prefix="sparkbake-mailinfo-") as scratch:
        info, body = repo.mailinfo(patch, Path(scratch))
    author = Author(info["Author"], info["Email"]) if info.get("Email") else Author()
    return Header(info.get("Subject") or patch.name, body.strip("\n"), author)


def trailers(series: str, patch: str) -> str:
    return f"{SERIES_TRAILER}: {series}\n{PATCH_TRAILER}: {patch}\n"


def attempt(repo: Repo, patch: Path, message: str, author: Author) -> Outcome:
    """Apply patch to repo's index and tree and commit it, or say why not.

    A patch whose reverse applies is already upstream (checked first: such a patch may
    also apply forward, at an offset, and would duplicate the change); then forward, with
    offsets reported; then a three-way merge where the patch names its base blobs.
    A conflict leaves the tree as the three-way attempt left it (markers included).
    """
    if repo.git("apply", "--check", "--reverse", patch, check=False).returncode == 0:
        return Outcome("upstream")
    forward = repo.git("apply", "--index", "-v", "--whitespace=nowarn", patch, check=False)
    if forward.returncode == 0:  # git apply changes all or nothing
        repo.commit(message, author)
        offsets = _offsets(forward.stderr)
        return Outcome("offset" if offsets else "applied", offsets)
    failure = _failure(patch, forward.stderr)
    if failure.status == "malformed" or not _has_index_lines(patch):
        return failure
    merged = repo.git("apply", "--3way", "--whitespace=nowarn", patch, check=False)
    if merged.returncode == 0:
        repo.commit(message, author)
        return Outcome("three-way", ("merged three-way with the base blobs it names",))
    unmerged = repo.out("diff", "--name-only", "--diff-filter=U").splitlines()
    (repo.git_dir / "MERGE_MSG").write_text(message)  # what `git commit` offers once resolved
    return Outcome("conflict", failure.notes, failure.target, failure.hunk, failure.lines,
                   tuple(unmerged))


def _offsets(stderr: str) -> tuple[str, ...]:
    notes, current = [], "?"
    for line in stderr.splitlines():
        if checking := CHECKING.match(line):
            current = checking[1]
        elif found := OFFSET.search(line):
            count = abs(int(found[3]))
            notes.append(f"{current} hunk #{found[1]} at line {found[2]} "
                         f"(offset {found[3]} line{'s' if count != 1 else ''})")
    return tuple(notes)


def _failure(patch: Path, stderr: str) -> Outcome:
    if corrupt := syntax.from_git(stderr):  # the file is broken, not the upstream
        return Outcome("malformed", (corrupt.what,), line=corrupt.line)
    if found := FAILED.search(stderr):
        header, lines = hunk_at(patch, found["file"], int(found["line"]))
        return Outcome("conflict", (), found["file"], header, lines)
    for pattern, why in ((MISSING, "the file is not in the tree"),
                         (EXISTS, "the file it creates already exists")):
        if found := pattern.search(stderr):
            header, lines = hunk_at(patch, found["file"], None)
            return Outcome("conflict", (why,), found["file"], header, lines)
    last = stderr.strip().splitlines()[-1:] or ["git apply failed"]
    return Outcome("conflict", (last[0],), "?")


def base_blobs(patch: Path) -> tuple[str, ...]:
    """The blobs a patch was made against (its `index` lines), new files left out."""
    text = patch.read_text(errors="replace")
    found = re.findall(r"^index ([0-9a-f]{7,})\.\.[0-9a-f]{7,}", text, re.MULTILINE)
    return tuple(blob for blob in found if set(blob) != {"0"})


def merge_markers(repo: Repo, patch: Path, upstreams: list[Path]) -> Path | None:
    """A conflict against another upstream than the patch's own: fetch the upstream
    repository that holds most of the patch's base blobs (of those given) into repo and
    merge three-way again, so the tree gets conflict markers. Returns the one fetched."""
    blobs = base_blobs(patch)
    held = {upstream: sum(repo.git("--git-dir", upstream, "cat-file", "-e", blob,
                                   check=False).returncode == 0 for blob in blobs)
            for upstream in upstreams}
    best = max(held, key=lambda upstream: held[upstream], default=None)
    if best is None or held[best] == 0:
        return None
    prefilled = (repo.git_dir / "MERGE_MSG").read_text()  # reset removes it
    repo.git("reset", "-q", "--hard")
    repo.git("fetch", "-q", "--no-tags", best, "+HEAD:refs/sparkbake/base")
    repo.git("apply", "--3way", "--whitespace=nowarn", patch, check=False)
    (repo.git_dir / "MERGE_MSG").write_text(prefilled)
    return best


def _has_index_lines(patch: Path) -> bool:
    text = patch.read_text(errors="replace")
    return re.search(r"^index [0-9a-f]{7,}\.\.[0-9a-f]{7,}", text, re.MULTILINE) is not None


def hunk_at(patch: Path, target: str, old_start: int | None) -> tuple[str, tuple[str, ...]]:
    """The `@@` header and first lines of target's hunk at old line old_start (None: first)."""
    current: str | None = None
    lines = patch.read_text(errors="replace").splitlines()
    for index, raw in enumerate(lines):
        if raw.startswith("--- "):
            name = raw[4:].split("\t")[0]
            current = name[2:] if name.startswith("a/") else None
        elif raw.startswith("+++ ") and current is None:
            name = raw[4:].split("\t")[0]
            current = name[2:] if name.startswith("b/") else None
        elif raw.startswith("@@") and current == target:
            start = re.match(r"@@ -(\d+)", raw)
            if old_start is None or (start and int(start[1]) == old_start):
                body = lines[index + 1:index + 1 + HUNK_LINES]
                ends = [i for i, x in enumerate(body) if x.startswith(("@@", "diff --git"))]
                return raw, tuple(body[:ends[0]] if ends else body)
    return (f"@@ -{old_start} @@" if old_start else "", ())
