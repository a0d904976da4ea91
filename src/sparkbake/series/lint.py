"""patch-lint: series folders and patch files checked before anything is applied.

A series folder holds a `series` file (quilt order, `#` comments) and `git format-patch`
files, each with a subject and a description. Every problem is reported as `file:line:`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkbake.config.versions import Config
from sparkbake.config.yamlsource import did_you_mean
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.errors import ConfigError
from sparkbake.fetch import remote_patches
from sparkbake.fetch.remote_patches import RemotePatch
from sparkbake.patch import syntax
from sparkbake.patch.parsed import Problem, read_patch, unsafe
from sparkbake.planning import make, series_folder

__all__ = ["Listing", "lint", "read_listing", "variant_folders"]

PATCH_SUFFIXES = (".patch", ".diff")


@dataclass(frozen=True)
class Listing:
    """A `series` file: (line, patch file name) in order, and its problems."""

    path: Path
    entries: tuple[tuple[int, str], ...]
    problems: tuple[Problem, ...]
    remote: tuple[RemotePatch, ...] = ()  # the entries naming a patch by URL and sha256


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
    if malformed := syntax.check(path.read_text(errors="replace")):
        problems.append(Problem(f"{path}:{malformed.line}", f"malformed: {malformed.what}"))
    for found in [unsafe(patch, tree) for tree in trees] or [unsafe(patch)]:
        problems += [p for p in found if p not in problems]
    return problems


def lint_folder(folder: Path, trees: list[Path], build_dir: Path, *,
                console: Console) -> tuple[int, list[Problem]]:
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
        problems += lint_remote(remote, trees, console=console)
    return len(listed), problems


def lint_remote(remote: RemotePatch, trees: list[Path], *, console: Console) -> list[Problem]:
    """A remote patch's cached copy, its problems named by its URL; without a verified
    copy (not fetched yet) only its series line was checked: lint needs no network."""
    if remote_patches.missing([remote]):
        console.detail(f"patch-lint: {remote.where}: {remote.url} is not fetched (`sparkbake "
                       "fetch TAG`):"
             " its line checked, not its content")
        return []
    cached = str(remote.path)
    return [Problem(p.where.replace(cached, remote.url, 1), p.what)
            for p in lint_patch(remote.path, trees)]


def lint(config: Config, *, console: Console) -> int:
    """Lint every series folder, its variants and every series a tag names; raise on any
    problem."""
    names = {n for tag in config.tags.values() for n in tag.series}
    folders = sorted(p for p in config.patches_dir.glob("*") if p.is_dir())
    problems: list[Problem] = []
    count = 0
    for folder in folders:
        variants, strays = variant_folders(config, folder)
        problems += strays
        for listed in ([folder] if (folder / "series").is_file() or not variants else []) + \
                variants:
            found, more = lint_folder(listed, _trees(config, listed), config.build_dir,
                                      console=console)
            count, problems = count + found, problems + more
    for name in sorted(names - {f.name for f in folders}):
        console.detail(f"patch-lint: warning: series {name!r} is named by a tag but "
             f"{config.patches_dir / name} does not exist yet (plan shows it blocked)")
    for problem in problems:
        console.detail(str(problem))
    if problems:
        raise ConfigError(f"patch-lint: {len(problems)} problem(s) in {config.patches_dir}",
                          "fix each file:line above (docs/how-to/patches.md)")
    console.detail(f"patch-lint: {len(folders)} series, {count} patches: ok")
    return 0


def variant_folders(config: Config, folder: Path) -> tuple[list[Path], list[Problem]]:
    """A series folder's variants, patches/<series>/<upstream>/, each named by an upstream
    of versions.yaml; a sub-folder named otherwise is a problem."""
    variants, problems = [], []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if sub.name in config.upstreams:
            variants.append(sub)
            continue
        problems.append(Problem(str(sub), "not an upstream of versions.yaml"
                                f"{did_you_mean(sub.name, list(config.upstreams))}: a variant "
                                "folder is named by the upstream key it is for"))
    return variants, problems


def _trees(config: Config, folder: Path) -> list[Path]:
    """Pristine trees (already fetched) of the tags that apply this series folder."""
    trees = []
    for tag in config.tags.values():
        if any(series_folder(config.patches_dir, name, tag.upstream.key) == folder
               for name in tag.series):
            tree = Folders.of(config).source(make(config, tag).fetch_key) / "tree"
            if tree.is_dir() and tree not in trees:
                trees.append(tree)
    return trees
