"""A patch file's hunks read against their `@@` line counts: what makes a patch malformed.

A hunk cut short or with a stray line in it is "corrupt" to git apply; a changed line after a
hunk whose counts are too small is dropped by git without a word. Either is a broken file,
not a conflict with upstream, and is named here by its line in the patch file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NOT_A_PATCH", "Malformed", "check", "from_git"]

HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
# git apply's words for a patch it cannot read, with the line of the patch file
GIT_CORRUPT = re.compile(r"^error: (corrupt (?:binary )?patch|patch with only garbage|"
                         r"patch fragment without header) at line (\d+)", re.MULTILINE)
# ... and for a file with no diff in it at all (a note, a binary file, the wrong file)
GIT_NO_PATCH = re.compile(r"^error: No valid patches in input", re.MULTILINE)
NOT_A_PATCH = "not a patch: git apply finds no diff in it"
SIGNATURE = "-- "  # git format-patch's signature separator: the diff ends above it
SHOWN = 60  # characters of a stray line quoted in a message


@dataclass(frozen=True)
class Malformed:
    line: int  # in the patch file, from 1; 0: the whole file
    what: str


@dataclass
class _Hunk:
    line: int
    header: str
    old: int  # lines of the old side still to come
    new: int

    def take(self, text: str) -> None:
        self.old -= text[:1] in (" ", "-", "")  # an empty line is a context line git accepts
        self.new -= text[:1] in (" ", "+", "")

    @property
    def done(self) -> bool:
        return self.old <= 0 and self.new <= 0

    @property
    def counts(self) -> str:
        return self.header.split("@@")[1].strip()


def check(text: str) -> Malformed | None:
    """The first malformed hunk of a patch, or None when every hunk matches its counts."""
    hunk: _Hunk | None = None
    just_ended = False  # the line before ended a hunk
    for number, line in enumerate(text.splitlines(), start=1):
        if hunk is not None and not hunk.done:  # its counts decide, as they do for git
            if line.startswith(("@@ ", "diff --git ")):
                return _short(hunk)
            if line[:1] not in (" ", "-", "+", "\\", ""):
                return Malformed(number, f"{_quote(line)} inside the hunk of line {hunk.line} "
                                         "is not a ' ', '-' or '+' line")
            hunk.take(line)
            just_ended = hunk.done
            continue
        if line == SIGNATURE:
            break
        if just_ended and line[:1] in (" ", "-", "+") and not _starts_header(line):
            assert hunk is not None
            return Malformed(number, f"{_quote(line)} after the hunk of line {hunk.line} is "
                                     f"not counted by its @@ line ({hunk.counts}): git would "
                                     "ignore it")
        just_ended = False
        if line.startswith("@@ "):
            found = HUNK.match(line)
            if found is None:
                return Malformed(number, f"{_quote(line)} is not a hunk header "
                                         "(@@ -START,COUNT +START,COUNT @@)")
            hunk = _Hunk(number, line, int(found[1] or 1), int(found[2] or 1))
            just_ended = hunk.done
    if hunk is not None and not hunk.done:
        return _short(hunk)
    return None


def from_git(stderr: str) -> Malformed | None:
    """git apply's own report of a patch it cannot read, where check() found nothing: the
    line it names first (it may add "No valid patches" after a corrupt one)."""
    found = GIT_CORRUPT.search(stderr)
    if found:
        return Malformed(int(found[2]), f"git apply reads it as a {found[1]}")
    return Malformed(0, NOT_A_PATCH) if GIT_NO_PATCH.search(stderr) else None


def _starts_header(line: str) -> bool:
    return line.startswith(("@@ ", "diff --git ", "--- ", "+++ ", "Index: "))


def _short(hunk: _Hunk) -> Malformed:
    return Malformed(hunk.line, f"the hunk has fewer lines than its @@ line counts "
                                f"({hunk.counts})")


def _quote(line: str) -> str:
    return repr(line if len(line) <= SHOWN else line[:SHOWN] + "...")
