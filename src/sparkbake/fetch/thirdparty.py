"""Third-party sources of a CMake upstream: locked by `lock`, fetched and verified by the
fetch stage into build/thirdparty/<commit or sha256>/, handed read-only to the offline
builder (FETCHCONTENT_FULLY_DISCONNECTED, FETCHCONTENT_SOURCE_DIR_<NAME>)."""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import run
from sparkbake.core.folders import Folders
from sparkbake.errors import ConfigError, EngineError
from sparkbake.fetch import cmake_sources
from sparkbake.fetch.cmake_sources import Declaration, Discovery
from sparkbake.fetch.sourcelock import (
    Locked,
    SourcesLock,
    lock_path,
    read,
    require_covered,
    resolve_ref,
    unreachable,
    write,
)
from sparkbake.files import atomic_dir, read_json
from sparkbake.hashing import file_sha256, tree_hash

__all__ = ["MOUNT", "Fetched", "builder_args", "discover", "fetch_locked", "lock",
           "lock_on_first_use", "missing_lock", "prepare"]

MOUNT = "/thirdparty"
RECORD = "source.json"
MISSING_REF = ("not our ref", "couldn't find remote ref", "no such remote ref",
               "unadvertised object")


@dataclass(frozen=True)
class Fetched:
    locked: Locked
    path: Path  # build/thirdparty/<key>/tree


def discover(tag: Tag, tree: Path, console: Console) -> Discovery:
    found = cmake_sources.discover(tree, dict(tag.upstream.cmake_skip))
    for left in found.left_out:
        console.detail(f"sources: {left.name} ({left.file}:{left.line}) left out: {left.reason}")
    return found


def lock(config: Config, tag: Tag, tree: Path, settings: Settings,
         console: Console) -> Path | None:
    """Resolve and fetch every declaration of the tree; write the tag's sources lock. None
    when the tree declares no downloads."""
    found = discover(tag, tree, console)
    if not found.declarations:
        return None
    locked: list[Locked] = []
    unreachable_urls: list[str] = []
    for declared in found.declarations:
        try:
            locked.append(_lock_one(declared, Folders.of(config).thirdparty, settings,
                                         console))
        except EngineError:
            unreachable_urls.append(declared.url)
    if unreachable_urls:
        raise EngineError(f"cannot reach the servers of {len(unreachable_urls)} CMake "
                          f"dependencies: {', '.join(unreachable_urls)}",
                          "run lock where they are reachable, or mirror them with git's "
                          "url.<mirror>.insteadOf")
    left = tuple({"name": s.name, "declared": f"{s.file}:{s.line}", "reason": s.reason}
                 for s in found.left_out)
    path = lock_path(config, tag)
    write(path, SourcesLock(tag.upstream.key, tuple(locked), left))
    console.detail(f"sources lock: {path} ({len(locked)} dependencies)")
    return path


def missing_lock(config: Config, tag: Tag, tree: Path, settings: Settings) -> bool:
    """Must a build make the tag's sources lock: is there none, where the tree declares
    downloads? Under CI and --locked that is exit 2 instead, as a lock is never made there.
    A build asks before any base is pulled, so that a first one on a Spark does not pull
    gigabytes to stop at the lock. An existing lock is never remade on the fly: one that lacks
    a declaration stays prepare's error."""
    path = lock_path(config, tag)
    if tag.kernels or path.is_file():  # a kernel seed compiles nothing
        return False
    # quiet: what is left out is said when the lock is made
    if not cmake_sources.discover(tree, dict(tag.upstream.cmake_skip)).declarations:
        return False
    if settings.locked:
        raise ConfigError(f"no sources lock for upstream {tag.upstream.key!r} ({path}); CI and "
                          "--locked never make a lock",
                          f"make it: {settings.command('lock', tag.name)}, and commit it")
    return True


def lock_on_first_use(config: Config, tag: Tag, tree: Path, settings: Settings,
                      console: Console) -> None:
    """The sources lock a build found missing (missing_lock), made as `lock` makes it, with a
    notice to commit it."""
    console.notice(f"sources lock: {lock_path(config, tag).relative_to(config.root)} missing: "
                   "making it now; commit it (CI and --locked refuse a missing lock)")
    lock(config, tag, tree, settings, console)


def _lock_one(declared: Declaration, cache: Path, settings: Settings,
              console: Console) -> Locked:
    if declared.kind == "url":
        # without URL_HASH (vLLM 0.34.0's triton_kernels), the lock pins what the URL served
        pin = declared.ref.removeprefix("sha256:") or _served_sha256(declared.url, settings)
    else:
        pin, _ = resolve_ref(declared, console)
    draft = Locked(declared.name, declared.kind, declared.url, declared.ref, pin,
                   declared.submodules, declared.env, declared.form, "", declared.where)
    return replace(draft, tree=_ensure(draft, cache, settings, console, expected=None))


def fetch_locked(config: Config, tag: Tag, settings: Settings, console: Console,
                 names: set[str] | None = None) -> tuple[Fetched, ...]:
    """Every source of the tag's sources lock (or those named) in the host cache, verified;
    the servers that could not be reached are named together (exit 8)."""
    sources = read(lock_path(config, tag))
    if sources is None or tag.kernels:  # a kernel seed compiles nothing
        return ()
    fetched: list[Fetched] = []
    unreachable_urls: list[str] = []
    for locked in sources.sources:
        if names is not None and locked.name not in names:
            continue
        try:
            _ensure(locked, Folders.of(config).thirdparty, settings, console,
                    expected=locked.tree)
        except EngineError:
            unreachable_urls.append(locked.url)
            continue
        fetched.append(Fetched(locked, Folders.of(config).thirdparty / locked.key / "tree"))
    if unreachable_urls:
        raise EngineError(f"cannot fetch {len(unreachable_urls)} third-party sources: "
                          f"{', '.join(unreachable_urls)} unreachable",
                          "check the network and retry `sparkbake fetch`")
    return tuple(fetched)


def prepare(config: Config, tag: Tag, tree: Path, settings: Settings,
            console: Console) -> tuple[Fetched, ...]:
    """The patched tree's declarations, each in the sources lock (else exit 2 naming it),
    fetched and verified: what the builder mounts."""
    if tag.kernels:
        return ()
    found = discover(tag, tree, console)
    path = lock_path(config, tag)
    require_covered(path, read(path), found, tag)
    return fetch_locked(config, tag, settings, console, {d.name for d in found.declarations})


def builder_args(fetched: tuple[Fetched, ...]) -> tuple[dict[str, dict[str, str]],
                                                         dict[str, str]]:
    """(volumes, environment) of the builder: each source read-only at /thirdparty/<name>,
    named to FetchContent in SPARKBAKE_FETCHCONTENT (build_wheels.py makes it the cache
    entries every CMake configure gets, whatever its command line: images/cmake_wrapper.py),
    and the upstream's own *_SRC_DIR variables where FetchContent's do not reach
    (FetchContent_Populate with its own details ignores them)."""
    if not fetched:
        return {}, {}
    volumes = {str(f.path): {"bind": f"{MOUNT}/{f.locked.name}", "mode": "ro"} for f in fetched}
    folders = {f.locked.name: f"{MOUNT}/{f.locked.name}" for f in fetched}
    environment = {"SPARKBAKE_FETCHCONTENT": json.dumps(folders, sort_keys=True)}
    for f in fetched:
        if f.locked.form == "populate":
            environment |= dict.fromkeys(f.locked.env, f"{MOUNT}/{f.locked.name}")
    return volumes, environment


def _ensure(locked: Locked, cache: Path, settings: Settings, console: Console,
            expected: str | None) -> str:
    """The source in cache/<key>/tree (fetched unless there and verified); its tree hash.
    A fetched tree whose hash is not `expected` is refused and not kept."""
    entry = cache / locked.key
    record = entry / RECORD
    if record.is_file():
        have = str(read_json(record).get("tree", ""))
        if expected is None or have == expected:
            console.detail(f"fetch: {locked.name} cached at {locked.key[:12]}")
            return have
    with atomic_dir(entry) as tmp:
        if locked.kind == "git":
            _git(locked, tmp / "tree", console)
        else:
            _archive(locked, tmp / "tree", settings)
        actual = tree_hash(tmp / "tree")
        if expected is not None and actual != expected:
            raise ConfigError(f"{locked.name} ({locked.url} at {locked.pin[:12]}) fetched as tree "
                              f"{actual[:16]}, the sources lock says {expected[:16]}; refused",
                              "if the lock was edited, remake it with `sparkbake lock TAG`")
        (tmp / RECORD).write_text(json.dumps({"name": locked.name, "url": locked.url,
                                              "pin": locked.pin, "tree": actual}, indent=2))
    return actual


def _git(locked: Locked, dest: Path, console: Console) -> None:
    run(console, ["git", "init", "-q", dest], error=EngineError, what="git init", capture=True)
    _network(["git", "-C", dest, "fetch", "-q", "--depth", "1", locked.url, locked.pin], locked,
             console)
    run(console, ["git", "-C", dest, "checkout", "-q", "--detach", "FETCH_HEAD"], error=EngineError,
        what=f"checking out {locked.name}", capture=True)
    head = run(console, ["git", "-C", dest, "rev-parse", "HEAD"], error=EngineError, capture=True,
               what="git rev-parse").stdout.strip()
    if head != locked.pin:
        raise ConfigError(f"{locked.name}: {locked.url} gave commit {head}, not {locked.pin}",
                          "remake the sources lock with `sparkbake lock TAG`")
    if locked.submodules != ():
        paths = ["--", *locked.submodules] if locked.submodules else []
        _network(["git", "-C", dest, "submodule", "update", "--init", "--recursive", *paths],
                 locked, console)
    for found in sorted(dest.rglob(".git"), reverse=True):
        shutil.rmtree(found) if found.is_dir() else found.unlink()


def _network(cmd: list[str | Path], locked: Locked, console: Console) -> None:
    """A git command that talks to the source's server: unreachable is exit 8, a commit the
    server lacks exit 2."""
    done = run(console, cmd, error=EngineError, what=f"fetching {locked.name}", capture=True,
               check=False)
    if done.returncode == 0:
        return
    if any(text in done.stderr for text in MISSING_REF):
        raise ConfigError(f"{locked.name}: {locked.url} has no commit {locked.pin}",
                          "remake the sources lock with `sparkbake lock TAG`")
    raise unreachable(locked.url, done.stderr)


def _download(url: str, folder: Path, settings: Settings) -> Path:
    """The URL's content in folder; unreachable is exit 8."""
    import requests  # here: it takes ~0.1 s to import and most runs download nothing

    archive = folder / (url.rsplit("/", 1)[-1].split("?")[0] or "archive")
    try:
        with requests.get(url, timeout=60, stream=True,
                          verify=settings.ca_bundle or True) as response:
            response.raise_for_status()
            with archive.open("wb") as out:
                for chunk in response.iter_content(1 << 20):
                    out.write(chunk)
    except requests.RequestException as exc:
        raise unreachable(url, str(exc)) from exc
    return archive


def _served_sha256(url: str, settings: Settings) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        return file_sha256(_download(url, Path(scratch), settings))


def _archive(locked: Locked, dest: Path, settings: Settings) -> None:
    """A URL download, checked against its sha256 and unpacked (one top folder stripped)."""
    with tempfile.TemporaryDirectory() as scratch:
        archive = _download(locked.url, Path(scratch), settings)
        if file_sha256(archive) != locked.pin:
            pinned_by, remedy = (("URL_HASH", "fix URL_HASH in the CMake file") if locked.ref
                                 else ("the sources lock", "if the server's archive changed, "
                                       "remake the lock with `sparkbake lock TAG`"))
            raise ConfigError(f"{locked.name}: {locked.url} has sha256 {file_sha256(archive)}, "
                              f"{pinned_by} pins {locked.pin}", remedy)
        _unpack(archive, Path(scratch) / "unpacked")
        tops = list((Path(scratch) / "unpacked").iterdir())
        shutil.move(tops[0] if len(tops) == 1 and tops[0].is_dir() else tops[0].parent, dest)


def _unpack(archive: Path, dest: Path) -> None:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(dest)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
