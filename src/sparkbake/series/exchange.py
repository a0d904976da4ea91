"""export-series / import-series: git commits to a series folder and back, byte-stable.

A commit becomes `NNNN-<subject>.patch` by `git format-patch` with every volatile field
fixed: zero commit id, no version signature, no stat, full blob ids, the date set to the
epoch, sparkbake's trailers removed. The same commits give the same bytes every time, and a
patch already in the folder whose index lines abbreviate those ids (one written by hand or
by another tool) is kept byte for byte: its bytes are part of the build key.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from sparkbake.config.versions import Config
from sparkbake.config.yamlsource import did_you_mean
from sparkbake.console.display import Console
from sparkbake.console.tools import run
from sparkbake.errors import ConfigError, UsageError
from sparkbake.files import atomic_dir, scratch_dir
from sparkbake.patch.gitapply import PATCH_TRAILER, SERIES_TRAILER
from sparkbake.patch.gitwork import HERMETIC, UPSTREAM_TAG, Repo
from sparkbake.planning import series_folder
from sparkbake.series.lint import read_listing

__all__ = ["checkout_upstream", "export", "import_range", "normalize", "read_folder",
           "series_commits", "target_folder"]

EPOCH_DATE = "Date: Thu, 1 Jan 1970 00:00:00 +0000"
FORMAT = ["format-patch", "--zero-commit", "--no-signature", "--no-stat", "-N", "--full-index",
          "--binary", "--no-encode-email-headers", "--diff-algorithm=myers"]
TRAILER = re.compile(rf"^(?:{SERIES_TRAILER}|{PATCH_TRAILER}): .*\n", re.MULTILINE)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
INDEX = re.compile(rb"index ([0-9a-f]+)\.\.([0-9a-f]+)( [0-7]+)?")


def export(config: Config, work: Path, series: str, commit_range: str | None = None, *,
           upstream: str | None = None, drop: bool = False, console: Console) -> int:
    """Write the series' commits in work (a `patch --checkout` tree) to its folder: the
    variant for `upstream` (patches/<series>/<upstream>/), else the folder the checkout's
    own upstream reads (its variant where one exists, else patches/<series>/). A patch the
    folder lists that no commit came from is refused unless drop."""
    repo = _repo(work, console=console)
    commits = _rev_list(repo, commit_range) if commit_range else series_commits(repo, series)
    if repo.out("status", "--porcelain", "--untracked-files=no"):
        console.detail(f"export-series: warning: {work} has uncommitted changes; they are not "
                       "exported")
    if upstream is not None:
        folder = target_folder(config, series, upstream)
    else:
        detected = checkout_upstream(repo)
        folder = read_folder(config, series, detected)
        _warn_shared(config, series, folder, detected, console=console)
    if not drop:
        _refuse_dropped(repo, commits, _listed(folder, series), series, config.build_dir)
    return _write(repo, commits, folder, series, console=console)


def _refuse_dropped(repo: Repo, commits: list[str], folder: Path, series: str,
                    build_dir: Path) -> None:
    """A patch the folder's series file lists that no commit came from (by the trailer
    `patch --checkout` writes) would leave the series silently: after a conflict, the rest
    of the series is applied with `git am -3` before the export, or the export would drop
    it."""
    if not (folder / "series").is_file() or not commits:
        return
    bodies = repo.out("log", "--no-walk=unsorted", "--format=%B", *commits)
    came_from = set(re.findall(rf"^{PATCH_TRAILER}: (\S+)$", bodies, re.MULTILINE))
    listing = read_listing(folder, build_dir)
    missing = [name for _, name in listing.entries if name not in came_from]
    if not came_from or not missing:  # commits made elsewhere: nothing to compare with
        return
    in_progress = " (a `git am` is in progress there)" \
        if (repo.git_dir / "rebase-apply").is_dir() else ""
    first = folder / missing[0]
    raise ConfigError(
        f"export-series {series}: {repo.tree} has no commit of {', '.join(missing)}, which "
        f"{listing.path} lists{in_progress}; the export would drop "
        f"{'it' if len(missing) == 1 else 'them'}",
        f"apply the rest first (`git -C {repo.tree} am -3 {first}` ...), or pass --drop to "
        "drop them")


def import_range(config: Config, source: str, commit_range: str, series: str, *,
                 upstream: str | None = None, console: Console) -> int:
    """Import the commits of range from a git URL or a local repository as a series (the
    variant for `upstream`, if given)."""
    folder = target_folder(config, series, upstream)
    local = Path(source)
    if local.is_dir():
        repo = _repo(local, console=console)
        return _write(repo, _rev_list(repo, commit_range), folder, series, console=console)
    with scratch_dir(config.build_dir / "import", "clone-") as scratch:
        repo = Repo(scratch, scratch / "repo.git", console)
        run(console, ["git", "clone", "-q", "--bare", source, repo.git_dir], error=ConfigError,
            what=f"cloning {source}", capture=True, env=HERMETIC)
        return _write(repo, _rev_list(repo, commit_range), folder, series, console=console)


def target_folder(config: Config, series: str, upstream: str | None) -> Path:
    """Where a series is written: patches/<series>/, or its variant for an upstream of
    versions.yaml (an existing variant is chosen as the plan chooses it)."""
    if not NAME.fullmatch(series):
        raise UsageError(f"series name {series!r} is not a valid name",
                         "use letters, digits, '.', '_' and '-'")
    if upstream is None:
        return config.patches_dir / series
    if upstream not in config.upstreams:
        raise ConfigError(f"{config.path}: no upstream {upstream!r} for the variant of series "
                          f"{series!r}{did_you_mean(upstream, config.upstreams)}",
                          f"known upstreams: {', '.join(sorted(config.upstreams))}")
    return config.patches_dir / series / upstream


def read_folder(config: Config, series: str, upstream: str | None) -> Path:
    """The folder a tag on upstream reads the series from: its variant where one exists,
    else patches/<series>/."""
    return series_folder(target_folder(config, series, None).parent, series, upstream)


def checkout_upstream(repo: Repo) -> str | None:
    """The upstream key a `patch --checkout` tree was made from (its upstream commit's
    subject, `upstream: KEY (...)`); None for another repository."""
    found = repo.git("log", "-1", "--format=%s", f"refs/tags/{UPSTREAM_TAG}", check=False)
    named = re.match(r"upstream: (\S+) \(", found.stdout) if found.returncode == 0 else None
    return named[1] if named else None


def _warn_shared(config: Config, series: str, folder: Path, upstream: str | None, *,
                 console: Console) -> None:
    """Writing patches/<series>/ from a checkout of one upstream changes the series of tags
    on other upstreams too: say so, and how to write a variant instead."""
    if upstream is None or folder != config.patches_dir / series:
        return
    others = sorted(t.name for t in config.tags.values()
                    if series in t.series and t.upstream.key != upstream
                    and series_folder(config.patches_dir, series, t.upstream.key) == folder)
    if others:
        console.notice(f"export-series: warning: {folder} is also the series of "
                       f"{', '.join(others)} (other upstreams); `--upstream {upstream}` writes "
                       f"a variant for {upstream} instead (docs/how-to/patches.md)")


def series_commits(repo: Repo, series: str) -> list[str]:
    """Commits after the upstream commit that belong to series.

    A commit belongs to the series its Sparkbake-Series trailer names; one without the
    trailer (added by hand) belongs to the series of the commit before it.
    """
    base = UPSTREAM_TAG if repo.git("rev-parse", "-q", "--verify", f"refs/tags/{UPSTREAM_TAG}",
                                    check=False).returncode == 0 else _root(repo)
    log = repo.out("log", "--reverse", "--no-merges", "--format=%H%x00%B%x01", f"{base}..HEAD")
    owner: str | None = None
    found = []
    for record in filter(None, (r.strip("\n") for r in log.split("\x01"))):
        commit, body = record.split("\x00", 1)
        named = re.search(rf"^{SERIES_TRAILER}: (\S+)$", body, re.MULTILINE)
        owner = named[1] if named else owner
        if owner == series:
            found.append(commit)
    if not found:
        raise ConfigError(f"no commits of series {series!r} after {base} in {repo.tree}",
                          f"commit with a '{SERIES_TRAILER}: {series}' trailer, or give --range")
    return found


def normalize(text: str) -> str:
    """Remove what varies between exports of the same commit: the date, our trailers."""
    head, sep, diff = text.partition("\ndiff --git ")
    head = re.sub(r"^Date: .*$", EPOCH_DATE, head, count=1, flags=re.MULTILINE)
    head = TRAILER.sub("", head + "\n")[:-1]
    head = re.sub(r"\n\n+(\n---|$)", r"\n\1", head) if sep else head
    return head + sep + diff


def _write(repo: Repo, commits: list[str], folder: Path, series: str, *,
           console: Console) -> int:
    if not commits:
        raise ConfigError(f"no commits to export into series {series!r}",
                          "check the range: A..B lists the commits after A up to B")
    with atomic_dir(folder) as tmp:
        names = [_format(repo, commit, number, tmp) for number, commit in
                 enumerate(commits, start=1)]
        for name in names:
            _keep_abbreviated(folder / name, tmp / name)
        (tmp / "series").write_text(_comments(_listed(folder, series))
                                    + "".join(f"{n}\n" for n in names))
        _keep_other_files(folder, tmp)
        changed = [n for n in names if _differs(folder / n, tmp / n)]
    console.detail(f"series {series}: {len(names)} patch(es) in {folder}, {len(changed)} new or "
                   "changed")
    return 0


def _format(repo: Repo, commit: str, number: int, out: Path) -> str:
    written = repo.out(*FORMAT, f"--start-number={number}", "-o", out, "-1", commit)
    path = Path(written.splitlines()[-1])
    path.write_bytes(normalize(path.read_bytes().decode("utf-8", "surrogateescape"))
                     .encode("utf-8", "surrogateescape"))
    return path.name


def _keep_abbreviated(old: Path, new: Path) -> None:
    """Put old's bytes in place of new's when they differ only where old's index lines give
    the same blobs by shorter ids: the same change, which must keep the bytes it has."""
    if not old.is_file():
        return
    old_lines, new_lines = old.read_bytes().split(b"\n"), new.read_bytes().split(b"\n")
    if len(old_lines) == len(new_lines) and all(
            short == full or _abbreviates(short, full)
            for short, full in zip(old_lines, new_lines, strict=True)):
        shutil.copyfile(old, new)


def _abbreviates(short: bytes, full: bytes) -> bool:
    """Whether the index line short names full's blobs (and mode) by prefixes of their ids."""
    given, whole = INDEX.fullmatch(short), INDEX.fullmatch(full)
    return bool(given and whole and given[3] == whole[3] and whole[1].startswith(given[1])
                and whole[2].startswith(given[2]))


def _listed(folder: Path, series: str) -> Path:
    """Whose series-file comments a folder keeps: its own, or for a new variant
    (patches/<series>/<upstream>/) the series' (its notes, to be brought up to date)."""
    if (folder / "series").is_file() or folder.parent.name != series:
        return folder
    return folder.parent


def _comments(folder: Path) -> str:
    """The leading `#` lines of the series file, kept across exports."""
    listing = folder / "series"
    if not listing.is_file():
        return ""
    lines = listing.read_text().splitlines(keepends=True)
    kept = []
    for line in lines:
        if not line.startswith("#"):
            break
        kept.append(line)
    return "".join(kept)


def _keep_other_files(folder: Path, tmp: Path) -> None:
    if folder.is_dir():
        for item in folder.iterdir():
            if item.is_file() and item.name != "series" and item.suffix not in (".patch",
                                                                                ".diff"):
                shutil.copy2(item, tmp / item.name)


def _differs(old: Path, new: Path) -> bool:
    return not old.is_file() or old.read_bytes() != new.read_bytes()


def _repo(path: Path, *, console: Console) -> Repo:
    path = path.resolve()
    if not path.is_dir():
        raise UsageError(f"{path} is not a folder", "give a git work tree (patch --checkout)")
    found = run(console, ["git", "-C", path, "rev-parse", "--absolute-git-dir"], error=UsageError,
                what="git rev-parse", capture=True, check=False, env=HERMETIC)
    if found.returncode != 0:
        raise UsageError(f"{path} is not a git repository",
                         "make one with `sparkbake patch TAG --checkout DIR`")
    return Repo(path, Path(found.stdout.strip()), console)


def _rev_list(repo: Repo, commit_range: str) -> list[str]:
    if ".." not in commit_range:
        raise UsageError(f"--range {commit_range!r} is not a range", "write it as A..B")
    listed = repo.git("rev-list", "--reverse", "--no-merges", commit_range, "--",
                      check=False, error=ConfigError)
    if listed.returncode != 0:
        raise ConfigError(f"--range {commit_range}: {listed.stderr.strip().splitlines()[-1]}",
                          f"name commits that exist in {repo.tree}")
    return listed.stdout.split()


def _root(repo: Repo) -> str:
    return repo.out("rev-list", "--max-parents=0", "HEAD").splitlines()[0]
