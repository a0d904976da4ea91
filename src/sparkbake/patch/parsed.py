"""A patch file as patch-lint and the patch stage read it: its mail header, description, the
paths it touches, the symlinks it makes and its binary parts; and which of those would reach
outside the tree."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

__all__ = ["PatchFile", "Problem", "read_patch", "unsafe"]

PATH_LINE = re.compile(r"^(?:(?:---|\+\+\+) (?!/dev/null)|(?:rename|copy) (?:from|to) )(.+)$")
DIFF_GIT = re.compile(r"^diff --git (\S+) (\S+)$")
HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


@dataclass(frozen=True)
class Problem:
    where: str  # file:line
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass
class PatchFile:
    """What lint needs of a patch file: header, description, paths, binary parts."""

    path: Path
    subject: tuple[int, str] | None = None
    description: int = 0  # number of non-blank description lines
    paths: list[tuple[int, str]] = field(default_factory=list)
    links: list[tuple[int, str, str]] = field(default_factory=list)  # line, path, target
    binary: list[int] = field(default_factory=list)  # sections with `Binary files`, no data


def read_patch(path: Path) -> PatchFile:
    lines = path.read_text(errors="replace").splitlines()
    patch = PatchFile(path)
    body = _header(patch, lines)
    diff = len(lines)
    for index in range(body, len(lines)):
        if lines[index].startswith(("diff --git ", "--- ", "Index: ")) or lines[index] == "---":
            diff = index
            break
        patch.description += bool(lines[index].strip())
    _diff(patch, lines, diff)
    return patch


def _header(patch: PatchFile, lines: list[str]) -> int:
    """Record the Subject; return the index of the first line after the mail header."""
    start = 1 if lines and lines[0].startswith("From ") else 0
    for index in range(start, len(lines)):
        line = lines[index]
        if not line.strip():
            return index + 1
        if line.lower().startswith("subject:"):
            patch.subject = (index + 1, line.split(":", 1)[1].strip())
        elif not re.match(r"[\w-]+:|\s", line):
            return index  # no mail header at all: a plain diff
    return len(lines)


def _diff(patch: PatchFile, lines: list[str], start: int) -> None:
    """Paths, new symlinks and data-less binary sections, outside of hunk bodies."""
    old = new = 0  # lines left in the current hunk
    section, symlink, data = 0, False, True
    for number, line in enumerate(lines[start:], start=start + 1):
        if old > 0 or new > 0:
            old -= line[:1] in (" ", "-", "")
            new -= line[:1] in (" ", "+", "")
            if symlink and line.startswith("+"):
                patch.links.append((number, patch.paths[-1][1], line[1:]))
            continue
        if hunk := HUNK.match(line):
            old, new = int(hunk[1] or 1), int(hunk[2] or 1)
        elif match := DIFF_GIT.match(line):
            if not data:
                patch.binary.append(section)
            section, symlink, data = number, False, True
            patch.paths += [(number, _strip(p)) for p in match.groups()]
        elif match := PATH_LINE.match(line):
            patch.paths.append((number, _strip(match[1].split("\t")[0])))
        elif line == "new file mode 120000":
            symlink = True
        elif line.startswith("Binary files "):
            data = False
        elif line == "GIT binary patch":
            data = True
    if not data:
        patch.binary.append(section)


def _strip(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def unsafe(patch: PatchFile, tree: Path | None = None) -> list[Problem]:
    """Paths outside the tree (`..`, absolute, through a symlink of tree), data-less binaries."""
    problems = []
    for number, name in _first(patch.paths):
        reason = _escapes(name) or (tree is not None and _through_link(tree, name))
        if reason:
            problems.append(Problem(f"{patch.path}:{number}", f"{name!r} {reason}"))
    for number, name, target in patch.links:
        if target.startswith("/") or _escapes(str(PurePosixPath(name).parent / target)):
            problems.append(Problem(f"{patch.path}:{number}",
                                    f"symlink {name!r} points outside the tree ({target})"))
    for number in patch.binary:
        problems.append(Problem(f"{patch.path}:{number}", "binary change without its data: "
                                "make the patch with `git format-patch --binary`"))
    return problems


def _first(paths: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Each path once, at its first line."""
    seen: dict[str, int] = {}
    for number, name in paths:
        seen.setdefault(name, number)
    return [(number, name) for name, number in seen.items()]


def _escapes(name: str) -> str:
    if name.startswith("/"):
        return "is an absolute path"
    depth = 0
    for part in PurePosixPath(name).parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return "is outside the tree (..)"
    return ""


def _through_link(tree: Path, name: str) -> str:
    parts = PurePosixPath(name).parts[:-1]
    for end in range(1, len(parts) + 1):
        if (tree / Path(*parts[:end])).is_symlink():
            return f"goes through the symlink {'/'.join(parts[:end])!r} of the upstream tree"
    return ""
