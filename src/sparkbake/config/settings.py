"""What the host says, read once: package index, TLS trust, Debian mirror, build limits.

Besides `config` (versions.yaml), this is the one module that reads the environment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sparkbake.config.versions import REDIS_URL
from sparkbake.errors import ConfigError

__all__ = ["CompileCacheSettings", "HostSettings", "SigningSettings", "compile_cache_settings",
           "compress_workers", "docker_certs_dirs", "host_settings", "patch_tests_environment",
           "registry_ca_roots", "signing_settings"]

DEFAULT_GIB_PER_JOB = 6.0  # peak resident memory of one nvcc job on vLLM's largest sources


@dataclass(frozen=True)
class HostSettings:
    """What the host's configuration says about reaching package indexes."""

    index_url: str
    ca_bundle: str | None
    debian_mirror: str | None
    max_jobs: int | None = None  # SPARKBAKE_MAX_JOBS: fixed compile job count
    gib_per_job: float = DEFAULT_GIB_PER_JOB  # SPARKBAKE_GIB_PER_JOB
    builder_memory: str | None = None  # SPARKBAKE_BUILDER_MEMORY: builder limit, e.g. "96g"
    cache_dir: Path = Path("/var/cache/sparkbake")  # SPARKBAKE_CACHE: base layers, per host
    extra_index_urls: tuple[str, ...] = ()  # pip's extra-index-url, for host-side locks
    find_links: tuple[str, ...] = ()  # pip's find-links, for host-side locks


def host_settings() -> HostSettings:
    """The package index and CA bundle, as pip on this host is configured."""
    index = os.environ.get("PIP_INDEX_URL") or _pip_config("global.index-url") or _pip_default()
    ca = (os.environ.get("PIP_CERT") or _pip_config("global.cert")
          or os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE"))
    if ca is None and Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        ca = "/etc/ssl/certs/ca-certificates.crt"
    return HostSettings(
        index_url=index.rstrip("/"), ca_bundle=ca, debian_mirror=_apt_mirror(),
        max_jobs=int(jobs) if (jobs := _positive("SPARKBAKE_MAX_JOBS")) else None,
        gib_per_job=_positive("SPARKBAKE_GIB_PER_JOB") or DEFAULT_GIB_PER_JOB,
        builder_memory=os.environ.get("SPARKBAKE_BUILDER_MEMORY") or None,
        cache_dir=_cache_dir(),
        extra_index_urls=_pip_list("PIP_EXTRA_INDEX_URL", "global.extra-index-url"),
        find_links=_pip_list("PIP_FIND_LINKS", "global.find-links"),
    )


@dataclass(frozen=True)
class SigningSettings:
    """The key publish signs with, and its passphrase."""

    key: Path | None  # SPARKBAKE_SIGNING_KEY (publish --sign-key overrides it)
    passphrase: str | None  # SPARKBAKE_SIGNING_PASSPHRASE: of that key, and of a new one


def signing_settings() -> SigningSettings:
    key = os.environ.get("SPARKBAKE_SIGNING_KEY") or None
    return SigningSettings(Path(key) if key else None,
                           os.environ.get("SPARKBAKE_SIGNING_PASSPHRASE") or None)


def patch_tests_environment(**overrides: str) -> dict[str, str]:
    """The host's environment without VLLM_* variables (they would change what vLLM's own
    tests see), plus overrides: what the patch-tests run with."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    return {**kept, **overrides}


@dataclass(frozen=True)
class CompileCacheSettings:
    """The host's word on the builder's compile cache (README: Caches)."""

    override: str | None  # SPARKBAKE_COMPILE_CACHE: off, local or a Redis URL
    folder: Path  # the local cache, kept across builds: <cache dir>/sccache


def compile_cache_settings() -> CompileCacheSettings:
    """SPARKBAKE_COMPILE_CACHE overrides versions.yaml's `cache:`: `off` (no sccache),
    `local` (this host's folder), or a Redis URL."""
    raw = os.environ.get("SPARKBAKE_COMPILE_CACHE") or None
    if raw is not None and raw not in ("off", "local") and not REDIS_URL.fullmatch(raw):
        raise ConfigError(f"SPARKBAKE_COMPILE_CACHE={raw!r} is not off, local or a Redis URL",
                          "write e.g. SPARKBAKE_COMPILE_CACHE=redis://cache.lan:6379/0")
    return CompileCacheSettings(override=raw, folder=_cache_dir() / "sccache")


def compress_workers() -> int:
    """Threads that gzip a layer: SPARKBAKE_COMPRESS_WORKERS, else every core (the bytes are
    the same either way: oci/blockgzip)."""
    return int(_positive("SPARKBAKE_COMPRESS_WORKERS") or os.cpu_count() or 1)


def registry_ca_roots() -> str | None:
    """The CA file registries are checked against besides Docker's certs.d: REQUESTS_CA_BUNDLE,
    SSL_CERT_FILE, else the system's bundle (None: requests' own)."""
    chosen = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE")
    if chosen:
        return chosen
    system = Path("/etc/ssl/certs/ca-certificates.crt")
    return str(system) if system.is_file() else None


def docker_certs_dirs() -> tuple[Path, ...]:
    """Where Docker keeps per-registry TLS files (certs.d/<host[:port]>): a rootless engine's
    under $XDG_CONFIG_HOME/docker, then /etc/docker's."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    rootless = (Path(xdg) if xdg else Path.home() / ".config") / "docker" / "certs.d"
    return rootless, Path("/etc/docker/certs.d")


def _cache_dir() -> Path:
    """SPARKBAKE_CACHE, else $XDG_CACHE_HOME/sparkbake, else ~/.cache/sparkbake."""
    if os.environ.get("SPARKBAKE_CACHE"):
        return Path(os.environ["SPARKBAKE_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sparkbake"


def _positive(name: str) -> float | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} is not a positive number", "unset it or fix it")
    return value


def _apt_mirror(apt_dir: Path = Path("/etc/apt")) -> str | None:
    """The first Debian archive URI in the host's apt sources (deb822 or one-line style)."""
    for sources in sorted(apt_dir.glob("sources.list.d/*.sources")):
        for stanza in sources.read_text().split("\n\n"):
            fields = dict(re.findall(r"^(\w+):\s*(.+)$", stanza, re.MULTILINE))
            suites = fields.get("Suites", "").split()
            if "Types" in fields and suites and "-" not in suites[0]:
                return fields.get("URIs", "").split()[0] or None
    listing = apt_dir / "sources.list"
    if listing.is_file():
        for line in listing.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "-" not in parts[2]:
                return parts[1]
    return None


def _pip_list(variable: str, key: str) -> tuple[str, ...]:
    """A whitespace-separated pip option, from its environment variable, else pip's config."""
    return tuple((os.environ.get(variable) or _pip_config(key) or "").split())


def _pip_config(name: str) -> str | None:
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", name],
                             capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = out.stdout.strip()
    return value if out.returncode == 0 and value else None


def _pip_default() -> str:
    """pip's own default index, asked of pip so that no host is written here."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError as exc:
        raise ConfigError("no package index configured and pip is not installed",
                          "set PIP_INDEX_URL") from exc
    return str(PyPI.simple_url)
