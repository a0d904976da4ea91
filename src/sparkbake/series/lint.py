"""patch-lint: series folders and patch files checked before anything is applied.

A series folder holds a `series` file (quilt order, `#` comments) and `git format-patch`
files, each with a subject and a description. Every problem is reported as `file:line:`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sparkbake.config.versions import Config
from sparkbake.console.tools import echo
from sparkbake.errors import ConfigError
from sparkbake.fetch import remote_patches
from sparkbake.fetch.remote_patches import RemotePatch
from sparkbake.patch import patchsyntax
from sparkbake.pipeline.layout import Layout
from sparkbake.pipeline.plan import make

__all__ = ["Listing", "PatchFile", "Problem", "lint", "read_listing", "read_patch", "unsafe"]

PATCH_SUFFIXES = (".patch", ".diff")
PATH_LINE = re.compile(r"^(?:(?:---|\+\+\+) (?!/dev/null)|(?:rename|copy) (?:from|to) )(.+)$")
DIFF_GIT = re.compile(r"^diff --git (\S+) (\S+)$")
HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


@dataclass(frozen=True)
class Problem:
    where: str  # file:line
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass(frozen=True)
class Listing:
    """A `series` file: (line, patch file name) in order, and its problems."""

    path: Path
    entries: tuple[tuple[int, str], ...]
    problems: tuple[Problem, ...]
    remote: tuple[RemotePatch, ...] = ()  # the entries naming a patch by URL and sha256


@dataclass
class PatchFile:
    """What lint needs of a patch file: header, description, paths, binary parts."""

    path: Path
    subject: tuple[int, str] | None = None
    description: int = 0  # number of non-blank description lines
    paths: list[tuple[int, str]] = field(default_factory=list)
    links: list[tuple[int, str, str]] = field(default_factory=list)  # line, path, target
    binary: list[int] = field(default_factory=list)  # sections with `Binary files`, no data


def read_listing(folder: Path, build_dir: Path) -> Listing:
    path = folder / "series"
    entries: list[tuple[int, str]] = []
    problems: list[Problem] = []
    remote: list[RemotePatch] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        entry, *options = raw.split("#", 1)[0].split() or [""]
        where = f"{path}:{number}"
        if not entry:
            continue
        if remote_patches.is_remote(entry):
            try:
                remote.append(remote_patches.parse(where, entry, options, build_dir))
            except ConfigError as exc:
                problems.append(Problem(where, exc.message.removeprefix(f"{where}: ")))
        elif options not in ([], ["-p1"]):
            problems.append(Problem(where, f"options {' '.join(options)!r} are not supported"))
        if entry in seen:
            problems.append(Problem(where, f"{entry} is listed twice (first on line "
                                           f"{seen[entry]})"))
        elif not remote_patches.is_remote(entry) and not (folder / entry).is_file():
            problems.append(Problem(where, f"patch {entry!r} does not exist"))
        seen.setdefault(entry, number)
        entries.append((number, entry))
    return Listing(path, tuple(entries), tuple(problems), tuple(remote))


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


def lint_patch(path: Path, trees: list[Path]) -> list[Problem]:
    patch = read_patch(path)
    problems = []
    if patch.subject is None or not patch.subject[1]:
        problems.append(Problem(f"{path}:1", "no Subject: header (not a git format-patch file)"))
    elif not patch.description:
        problems.append(Problem(f"{path}:{patch.subject[0]}",
                                "no description: say what, why, upstream status, when to drop"))
    if not patch.paths:
        problems.append(Problem(f"{path}:1", "no diff in this patch"))
    if malformed := patchsyntax.check(path.read_text(errors="replace")):
        problems.append(Problem(f"{path}:{malformed.line}", f"malformed: {malformed.what}"))
    for found in [unsafe(patch, tree) for tree in trees] or [unsafe(patch)]:
        problems += [p for p in found if p not in problems]
    return problems


def lint_folder(folder: Path, trees: list[Path], build_dir: Path) -> tuple[int, list[Problem]]:
    """Lint one series folder; returns its number of patches and its problems."""
    if not (folder / "series").is_file():
        return 0, [Problem(str(folder), "no `series` file listing the patches in order")]
    listing = read_listing(folder, build_dir)
    problems = list(listing.problems)
    listed = {name for _, name in listing.entries}
    for extra in sorted(folder.iterdir()):
        if extra.suffix in PATCH_SUFFIXES and extra.name not in listed:
            problems.append(Problem(str(extra), f"not listed in {listing.path}"))
    for _, name in listing.entries:
        if (folder / name).is_file():
            problems += lint_patch(folder / name, trees)
    for remote in listing.remote:
        problems += lint_remote(remote, trees)
    return len(listed), problems


def lint_remote(remote: RemotePatch, trees: list[Path]) -> list[Problem]:
    """A remote patch's cached copy, its problems named by its URL; without a verified
    copy (not fetched yet) only its series line was checked: lint needs no network."""
    if remote_patches.missing([remote]):
        echo(f"patch-lint: {remote.where}: {remote.url} is not fetched (`sparkbake fetch TAG`):"
             " its line checked, not its content")
        return []
    cached = str(remote.path)
    return [Problem(p.where.replace(cached, remote.url, 1), p.what)
            for p in lint_patch(remote.path, trees)]


def lint(config: Config) -> int:
    """Lint every series folder and every series a tag names; raise on any problem."""
    names = {n for tag in config.tags.values() for n in tag.series}
    folders = sorted(p for p in config.patches_dir.glob("*") if p.is_dir())
    problems: list[Problem] = []
    count = 0
    for folder in folders:
        found, more = lint_folder(folder, _trees(config, folder.name), config.build_dir)
        count, problems = count + found, problems + more
    for name in sorted(names - {f.name for f in folders}):
        echo(f"patch-lint: warning: series {name!r} is named by a tag but "
             f"{config.patches_dir / name} does not exist yet (plan shows it blocked)")
    for problem in problems:
        echo(str(problem))
    if problems:
        raise ConfigError(f"patch-lint: {len(problems)} problem(s) in {config.patches_dir}",
                          "fix each file:line above (docs/how-to/patches.md)")
    echo(f"patch-lint: {len(folders)} series, {count} patches: ok")
    return 0


def _trees(config: Config, series: str) -> list[Path]:
    """Pristine trees (already fetched) of the tags that apply this series."""
    trees = []
    for tag in config.tags.values():
        if series in tag.series:
            tree = Layout.of(config).source(make(config, tag).fetch_key) / "tree"
            if tree.is_dir() and tree not in trees:
                trees.append(tree)
    return trees
