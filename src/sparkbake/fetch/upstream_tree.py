"""fetch: a pinned upstream tree (PyPI sdist + sha256, git commit, or local dir), verified."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from sparkbake.config.settings import Settings
from sparkbake.config.versions import DirUpstream, GitUpstream, PypiUpstream, Upstream
from sparkbake.console.display import Console
from sparkbake.console.tools import run
from sparkbake.core.stages import Stage
from sparkbake.errors import ConfigError, EngineError, FatalError
from sparkbake.files import atomic_dir
from sparkbake.hashing import file_sha256

if TYPE_CHECKING:
    # imported where used at run time: requests takes ~0.1 s to import and most runs
    # download nothing
    import requests

__all__ = ["DEFAULT_SOURCE_DATE", "dir_date", "download", "fetch", "index_url_of",
           "sdist_url", "source_date"]

CHUNK = 1 << 20
DEFAULT_SOURCE_DATE = 315532800  # 1980-01-01T00:00:00Z, the earliest time a wheel (zip) stores
SKIPPED = (".git", "__pycache__", "build", "*.egg-info")  # of a dir upstream: not its source
DATE_FILE = "source-date-epoch"  # beside a git or dir tree: the time its source gives
# a folder's commit time is a plan input: read with no user or system git config, and git
# found where the system keeps it, so that it is the same on every machine
GIT_DATE_ENVIRONMENT = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                        "LC_ALL": "C", "PATH": os.defpath}


def fetch(upstream: Upstream, entry: Path, settings: Settings, console: Console) -> Path:
    """Make entry/tree the pristine upstream tree unless it is already cached; return it."""
    tree = entry / "tree"
    if is_fetched(upstream, entry):
        console.cached(Stage.FETCH, f"fetch: {upstream.key} cached at {entry.name[:12]}")
        return tree
    with atomic_dir(entry) as tmp:
        if isinstance(upstream, PypiUpstream):
            _fetch_sdist(upstream, tmp, settings, console)
        elif isinstance(upstream, GitUpstream):
            _fetch_git(upstream, tmp / "tree", console)
        else:
            _copy_dir(upstream, tmp / "tree")
    return tree


def is_fetched(upstream: Upstream, entry: Path) -> bool:
    """Is the fetch stage's entry complete? A git or dir tree needs its source's time beside
    it (the source date). The stage skips it, and `plan` says cached, on this one test."""
    return (entry / "tree").is_dir() and (isinstance(upstream, PypiUpstream)
                                          or (entry / DATE_FILE).is_file())


def _copy_dir(upstream: DirUpstream, dest: Path) -> None:
    if not upstream.path.is_dir():
        raise ConfigError(f"upstream {upstream.key!r}: {upstream.path} is not a folder",
                          "fix 'dir:' in versions.yaml")
    shutil.copytree(upstream.path, dest, symlinks=True, ignore=shutil.ignore_patterns(*SKIPPED))
    (dest.parent / DATE_FILE).write_text(f"{dir_date(upstream.path)}\n")


def dir_date(folder: Path) -> int:
    """A folder's time, from its source and never from its copy: the last commit that
    touched it where git tracks it (a clone's or a copy's file times are when it was made,
    not the source's), else DEFAULT_SOURCE_DATE. Never before DEFAULT_SOURCE_DATE (zip's
    floor). Part of the folder's pin (planning.upstream_pin) when versions.yaml declares no
    source_date_epoch for it; its content is pinned by hash beside it."""
    return dir_dating(folder)[0]


def dir_dating(folder: Path) -> tuple[int, str]:
    """dir_date and where it comes from, in words (plan shows them)."""
    committed = _commit_time(folder)
    if committed is None:
        return DEFAULT_SOURCE_DATE, "a fixed date: not in git, no source_date_epoch"
    return max(committed, DEFAULT_SOURCE_DATE), "its last commit"


def _commit_time(folder: Path) -> int | None:
    """The commit time of folder's last change in git; None where git does not track it
    (or there is no git)."""
    try:
        stamp = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(folder), "log",
                                "-1", "--format=%ct", "--", "."], capture_output=True,
                               text=True, check=False, env=GIT_DATE_ENVIRONMENT)
    except OSError:
        return None
    if stamp.returncode or not stamp.stdout.strip():
        return None
    return int(stamp.stdout)


def _fetch_git(upstream: GitUpstream, dest: Path, console: Console) -> None:
    what = f"fetching {upstream.url} at {upstream.commit[:12]}"
    run(console, ["git", "init", "-q", dest], error=EngineError, what="git init")
    run(console, ["git", "-C", dest, "fetch", "-q", "--depth", "1", upstream.source,
                  upstream.commit], error=ConfigError, what=what)
    run(console, ["git", "-C", dest, "checkout", "-q", "--detach", "FETCH_HEAD"],
        error=ConfigError, what=what)
    head = run(console, ["git", "-C", dest, "rev-parse", "HEAD"], error=EngineError,
               what="git rev-parse", capture=True).stdout.strip()
    if head != upstream.commit:
        raise ConfigError(f"upstream {upstream.key!r}: got commit {head}, not {upstream.commit}",
                          "pin the full 40-hex commit")
    stamp = run(console, ["git", "-C", dest, "log", "-1", "--format=%ct", "HEAD"],
                error=EngineError, what="git log", capture=True).stdout.strip()
    (dest.parent / DATE_FILE).write_text(stamp + "\n")
    shutil.rmtree(dest / ".git")


def source_date(upstream: Upstream, entry: Path) -> int:
    """The tag's SOURCE_DATE_EPOCH: declared in versions.yaml, else a git pin's commit time
    or a folder's time (recorded by fetch in entry), else DEFAULT_SOURCE_DATE."""
    if upstream.source_date_epoch is not None:
        return upstream.source_date_epoch
    if isinstance(upstream, PypiUpstream):
        return DEFAULT_SOURCE_DATE
    return int((entry / DATE_FILE).read_text())


def index_url_of(project: str, filenames: set[str], settings: Settings) -> str | None:
    """The URL of one of filenames on the project's page of the configured index (PEP 503)."""
    from packaging.utils import canonicalize_name
    page = f"{settings.index_url}/{canonicalize_name(project)}/"
    for href in _hrefs(_get(page, settings, error=ConfigError).text):
        if Path(urlsplit(href).path).name in filenames:
            return urljoin(page, href)
    return None


def _hrefs(page: str) -> list[str]:
    """The href targets of a PEP 503 simple index page's links."""
    from html.parser import HTMLParser  # here: only a fetch reads an index page

    class Links(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.hrefs: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            href = dict(attrs).get("href")
            if tag == "a" and href:
                self.hrefs.append(href)

    links = Links()
    links.feed(page)
    return links.hrefs


def sdist_url(upstream: PypiUpstream, settings: Settings) -> str:
    """The sdist's URL on the configured index."""
    from packaging.utils import canonicalize_name
    project = canonicalize_name(upstream.name)
    wanted = {f"{stem}-{upstream.version}.tar.gz"
              for stem in (upstream.name, upstream.name.replace("-", "_"), project)}
    url = index_url_of(upstream.name, wanted, settings)
    if url is None:
        raise ConfigError(f"upstream {upstream.key!r}: no sdist {upstream.name} "
                          f"{upstream.version} on the package index",
                          "check name and version in versions.yaml")
    return url


def download(url: str, dest: Path, sha256: str, settings: Settings, console: Console,
             pinned_in: str, *, name: str = "", pinned_by: str = "versions.yaml") -> None:
    """url -> dest, refused (and deleted) unless its sha256 is the pinned one; the error
    names the file (or name) and what pins it."""
    console.detail(f"fetch: downloading {name or dest.name}")
    with _get(url, settings, error=EngineError, stream=True) as response, dest.open("wb") as out:
        for chunk in response.iter_content(CHUNK):
            out.write(chunk)
    actual = file_sha256(dest)
    if actual != sha256:
        dest.unlink()
        raise ConfigError(
            f"{pinned_in}: {name or dest.name} has sha256 {actual}, {pinned_by} pins {sha256}; "
            "download deleted", f"if the new file is trusted, update sha256 in {pinned_by}")


def _fetch_sdist(upstream: PypiUpstream, tmp: Path, settings: Settings,
                 console: Console) -> None:
    url = sdist_url(upstream, settings)
    archive = tmp / Path(urlsplit(url).path).name
    download(url, archive, upstream.sha256, settings, console, f"upstream {upstream.key!r}")
    _unpack(archive, tmp / "tree")
    archive.unlink()


def _unpack(archive: Path, dest: Path) -> None:
    """Unpack the sdist's single top folder as dest, refusing members outside it."""
    staging = dest.with_name("unpack")
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(staging)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
    tops = list(staging.iterdir())
    if len(tops) != 1 or not tops[0].is_dir():
        raise ConfigError(f"{archive.name}: not one top folder", "pin a regular sdist")
    tops[0].rename(dest)
    staging.rmdir()


def _get(url: str, settings: Settings, *, error: type[FatalError],
         stream: bool = False) -> requests.Response:
    import requests

    verify: str | bool = settings.ca_bundle or True
    try:
        response = requests.get(url, timeout=60, stream=stream, verify=verify)
    except requests.RequestException as exc:
        raise EngineError(f"cannot reach {url.split('?')[0]}: {type(exc).__name__}",
                          "check the network, PIP_INDEX_URL and PIP_CERT") from exc
    if response.status_code != 200:
        raise error(f"{url.split('?')[0]}: HTTP {response.status_code}",
                    "check the package name and the index (PIP_INDEX_URL)")
    return response
