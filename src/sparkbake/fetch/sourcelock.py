"""The sources lock: each third-party source of an upstream's CMake pinned to what it is.

locks/sources/<upstream>.json is committed. Per dependency: its FetchContent name, URL, the
ref as the tree writes it, the commit it was resolved to with `git ls-remote` (a 40-hex
ref is kept as is), the submodules it asks for, the upstream's own *_SRC_DIR variables,
and the tree hash of the fetched content (for a URL download: the archive's sha256, checked
against URL_HASH, or, where the tree gives none, the sha256 the URL served when locked). A
tag moved upstream changes nothing until `sparkbake lock` is run again.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import run
from sparkbake.errors import ConfigError, EngineError
from sparkbake.fetch.cmake_sources import Declaration, Discovery, Form, Kind
from sparkbake.files import atomic_write

__all__ = ["Locked", "SourcesLock", "lock_path", "read", "require_covered", "resolve_ref",
           "unreachable", "write"]

SCHEMA = 1
COMMIT = re.compile(r"[0-9a-f]{40}")
NOTE = ("Made by `sparkbake lock TAG` from the FetchContent declarations of the upstream's "
        "patched tree; remake it after changing them.")


@dataclass(frozen=True)
class Locked:
    """One locked dependency: `pin` is the commit (git) or the archive's sha256 (URL)."""

    name: str
    kind: Kind
    url: str
    ref: str  # as the tree writes it, resolved: a tag, branch or commit; sha256:<hex> for URL
    pin: str  # 40-hex commit, or the archive's sha256
    submodules: tuple[str, ...] | None  # None: all of them (CMake's default)
    env: tuple[str, ...]
    form: Form
    tree: str  # tree hash of the fetched content
    declared: str  # file:line when it was locked (informative)

    @property
    def key(self) -> str:
        """The cache folder: the pin, and which submodules come with it."""
        if self.submodules is None:
            return self.pin
        return f"{self.pin}-{'+'.join(self.submodules) or 'nosub'}".replace("/", "_")

    def matches(self, declared: Declaration) -> bool:
        return (self.name, self.kind, self.url, self.ref, self.submodules) == \
            (declared.name, declared.kind, declared.url, declared.ref, declared.submodules)


@dataclass(frozen=True)
class SourcesLock:
    upstream: str
    sources: tuple[Locked, ...]
    left_out: tuple[dict[str, str], ...] = ()  # name, declared, reason

    def get(self, name: str) -> Locked | None:
        return next((s for s in self.sources if s.name == name), None)


def lock_path(config: Config, tag: Tag) -> Path:
    return config.root / "locks" / "sources" / f"{tag.upstream.key}.json"


def write(path: Path, lock: SourcesLock) -> None:
    """Stable JSON: sorted keys, sources by name, a newline at the end."""
    sources = [_entry(s) for s in sorted(lock.sources, key=lambda s: s.name)]
    data = {"schema": SCHEMA, "note": NOTE, "upstream": lock.upstream, "sources": sources,
            "left_out": list(lock.left_out)}
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _entry(locked: Locked) -> dict[str, Any]:
    entry = asdict(locked)
    entry["submodules"] = "all" if locked.submodules is None else list(locked.submodules)
    entry["env"] = list(locked.env)
    return entry


def read(path: Path) -> SourcesLock | None:
    """The lock at path, or None when there is none; a malformed one is a config error."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        sources = tuple(_locked(entry) for entry in data["sources"])
        return SourcesLock(str(data["upstream"]), sources,
                           tuple(dict(e) for e in data.get("left_out", ())))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a sources lock ({type(exc).__name__}: {exc})",
                          "remake it with `sparkbake lock TAG`") from exc


def _locked(entry: dict[str, Any]) -> Locked:
    subs = entry["submodules"]
    pin = str(entry["pin"])
    if entry["kind"] == "git" and not COMMIT.fullmatch(pin):
        raise ValueError(f"{entry['name']}: pin {pin!r} is not a 40-hex commit")
    return Locked(name=str(entry["name"]), kind=entry["kind"], url=str(entry["url"]),
                  ref=str(entry["ref"]), pin=pin,
                  submodules=None if subs == "all" else tuple(map(str, subs)),
                  env=tuple(map(str, entry["env"])), form=entry["form"],
                  tree=str(entry["tree"]), declared=str(entry["declared"]))


def require_covered(path: Path, lock: SourcesLock | None, found: Discovery, tag: Tag) -> None:
    """Every declaration of the tree is in the lock, as declared; else exit 2 naming it."""
    for declared in found.declarations:
        locked = lock.get(declared.name) if lock else None
        if locked is None or not locked.matches(declared):
            state = "is not in" if locked is None else "differs from its entry in"
            raise ConfigError(
                f"{declared.where}: FetchContent {declared.name} ({declared.url} "
                f"{declared.ref or declared.written}) {state} the sources lock {path.name}",
                f"run `sparkbake lock {tag.name}` and commit {path.parent.name}/{path.name}")


def resolve_ref(declared: Declaration, console: Console) -> tuple[str, bool]:
    """(40-hex commit, whether the ref could move) for a git declaration. A 40-hex ref is
    kept as is; a tag or branch is resolved with `git ls-remote`."""
    if COMMIT.fullmatch(declared.ref):
        return declared.ref, False
    listing = run(console, ["git", "ls-remote", declared.url], error=EngineError, capture=True,
                  check=False, what=f"git ls-remote {declared.url}")
    if listing.returncode != 0:
        raise unreachable(declared.url, listing.stderr)
    pairs = (line.split("\t", 1) for line in listing.stdout.splitlines() if "\t" in line)
    refs = {ref: commit for commit, ref in pairs}
    for candidate in (f"refs/tags/{declared.ref}^{{}}", f"refs/tags/{declared.ref}",
                      f"refs/heads/{declared.ref}", declared.ref):
        if candidate in refs:
            console.notice(f"warning: {declared.where}: {declared.name} pins {declared.ref!r}, "
                           f"a moving ref ({candidate}); locked to its commit "
                           f"{refs[candidate][:12]}")
            return refs[candidate], True
    raise ConfigError(f"{declared.where}: FetchContent {declared.name}: {declared.url} has no "
                      f"ref {declared.ref!r}", "pin a tag, a branch or a full 40-hex commit")


def unreachable(url: str, stderr: str) -> EngineError:
    cause = (stderr.strip().splitlines() or ["no answer"])[-1]
    return EngineError(f"cannot reach the dependency server {url}: {cause}",
                       "check the network (fetch is the only stage that needs it), or mirror "
                       "it with git's url.<mirror>.insteadOf")
