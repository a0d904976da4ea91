"""Remote patches: a series entry that names a patch by URL and sha256 (an upstream PR's
commit), fetched on the host by `fetch` into build/, verified like an sdist, never copied
into the repository.

In a `series` file: `https://host/path/x.patch sha256=<64 hex>` (`-p1` may follow too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.errors import ConfigError, EngineError
from sparkbake.fetch.upstream_tree import download
from sparkbake.files import scratch_dir
from sparkbake.hashing import file_sha256

__all__ = ["CACHE", "RemotePatch", "fetch", "is_remote", "missing", "parse"]

CACHE = "remote-patches"  # under build/: one <sha256>.patch per remote patch
SCHEMES = ("https", "http")  # http too: the sha256 pin is the integrity check
SHA256 = re.compile(r"sha256=([0-9a-f]{64})")
SYNTAX = "write `URL sha256=<64 hex>` (docs/how-to/patches.md)"


@dataclass(frozen=True)
class RemotePatch:
    """One remote entry of a series file: where it is pinned, what, and its cached copy."""

    url: str
    sha256: str
    where: str  # series file:line
    path: Path  # build/remote-patches/<sha256>.patch

    @property
    def fetched(self) -> bool:
        return self.path.is_file()


def is_remote(entry: str) -> bool:
    return "://" in entry


def parse(where: str, entry: str, options: list[str], build_dir: Path) -> RemotePatch:
    """A remote entry's URL and options (`sha256=<hex>`, optional `-p1`), or a ConfigError
    naming where."""
    scheme = urlsplit(entry).scheme
    if scheme not in SCHEMES or not urlsplit(entry).netloc:
        raise ConfigError(f"{where}: {entry!r} is not an http(s) URL",
                          f"name a remote patch by an https:// URL; {SYNTAX}")
    pins = [match[1] for match in map(SHA256.fullmatch, options) if match]
    other = [o for o in options if not SHA256.fullmatch(o) and o != "-p1"]
    if other:
        raise ConfigError(f"{where}: options {' '.join(other)!r} are not supported "
                          f"for remote patch {entry}", SYNTAX)
    if len(pins) != 1:
        raise ConfigError(f"{where}: remote patch {entry} needs one sha256=<64 hex> "
                          f"(found {len(pins)})", SYNTAX + "; sha256sum the downloaded patch")
    return RemotePatch(entry, pins[0], where, build_dir / CACHE / f"{pins[0]}.patch")


def missing(remote: Iterable[RemotePatch]) -> list[RemotePatch]:
    """Those not cached, or cached with other bytes than pinned (then fetched anew)."""
    return [patch for patch in remote
            if not patch.fetched or file_sha256(patch.path) != patch.sha256]


def fetch(remote: Iterable[RemotePatch], settings: Settings, console: Console) -> int:
    """Download each remote patch not cached yet; return how many were downloaded."""
    wanted = missing(remote)
    for patch in wanted:
        _download(patch, settings, console)
    return len(wanted)


def _download(patch: RemotePatch, settings: Settings, console: Console) -> None:
    """The URL into a scratch folder, refused unless its sha256 is the pinned one, then
    renamed into the cache: a cache entry is always a verified file."""
    with scratch_dir(patch.path.parent, ".download-") as scratch:
        dest = scratch / patch.path.name
        try:
            download(patch.url, dest, patch.sha256, settings, console, patch.where,
                     name=patch.url, pinned_by="the series")
        except EngineError as exc:  # the URL, and what to check for a patch's server
            raise EngineError(f"{patch.where}: remote patch: {exc.message}",
                              "check the network and the URL (fetch is the only stage that "
                              "needs it); PIP_CERT or REQUESTS_CA_BUNDLE for a proxy's CA") \
                from exc
        except ConfigError as exc:  # another sha256: what to do about a patch that changed
            raise ConfigError(exc.message, f"if the changed patch is trusted, update sha256= in "
                              f"{patch.where}; pin a commit's URL, not a branch's, so it "
                              "cannot change") from exc
        os.replace(dest, patch.path)
