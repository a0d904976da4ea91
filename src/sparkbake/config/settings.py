"""What the host and the command line say: package index, TLS trust, Debian mirror, build
limits, caches, signing, --locked. One `Settings` is made per run (`Settings.of_process` in
__main__; the benchmark scripts and tests make their own) and passed down to what needs it.

Besides `config` (versions.yaml), this is the one module that reads the environment: it is
taken once, when the Settings is made. pip's configuration costs a `pip config` process per
value, so it is asked only when a value of it is first needed, and then kept.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from sparkbake.config.versions import REDIS_URL
from sparkbake.errors import ConfigError

__all__ = ["CompileCacheSettings", "PipConfig", "Settings", "SigningSettings",
           "apt_mirror", "child_environment", "pip_config"]

DEFAULT_GIB_PER_JOB = 6.0  # peak resident memory of one nvcc job on vLLM's largest sources
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
CI_TRUE = ("1", "true", "yes")
DEFAULT_CONFIG = Path("versions.yaml")  # the --config of a run that gives none

# one value of pip's configuration (`pip config get KEY`), None when pip has none
PipConfig = Callable[[str, Mapping[str, str]], str | None]  # (key, the run's environment)


def pip_config(name: str, environ: Mapping[str, str]) -> str | None:
    """`pip config get name`: pip's own answer, from every file it reads (pip run with the
    run's environment, which names them)."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", name],
                             capture_output=True, text=True, check=False, timeout=60,
                             env=child_environment(environ, {}))
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = out.stdout.strip()
    return value if out.returncode == 0 and value else None


@dataclass(frozen=True)
class SigningSettings:
    """The key publish signs with, and its passphrase."""

    key: Path | None  # SPARKBAKE_SIGNING_KEY (publish --sign-key overrides it)
    passphrase: str | None  # SPARKBAKE_SIGNING_PASSPHRASE: of that key, and of a new one


@dataclass(frozen=True)
class CompileCacheSettings:
    """The host's word on the builder's compile cache (README: Caches)."""

    override: str | None  # SPARKBAKE_COMPILE_CACHE: off, local or a Redis URL
    folder: Path  # the local cache, kept across builds: <cache dir>/sccache


@dataclass(frozen=True, eq=False)
class Settings:
    """The run's settings: the environment as it was when the run started, the command
    line's options, and pip's configuration when asked. Each value is read from them when
    used, so a setting a command never uses is never checked (nor pip ever started)."""

    environ: Mapping[str, str]
    locked_option: bool = False  # --locked: refuse a missing lock, as CI does
    ask_pip: PipConfig = field(default=pip_config, repr=False)
    apt_dir: Path = Path("/etc/apt")  # where the Debian mirror is read from
    config_option: Path | None = None  # the --config the user gave, when not the default

    @classmethod
    def of_process(cls, *, locked: bool = False, config: Path = DEFAULT_CONFIG) -> Settings:
        """This process's environment, read now, with the command line's --locked and
        --config."""
        return cls(dict(os.environ), locked_option=locked,
                   config_option=config if config != DEFAULT_CONFIG else None)

    def command(self, name: str, *args: str) -> str:
        """The command line that runs `name args` the way this run was started, so that a
        remedy repeats it: `nox -s NAME -- ARGS` in a nox session, else `sparkbake NAME
        ARGS`, with the user's own --config."""
        config = ["--config", str(self.config_option)] if self.config_option else []
        if self.nox_session:
            return shlex.join(["nox", "-s", name, "--", *args, *config])
        return shlex.join(["sparkbake", *config, name, *args])

    def with_environ(self, **changes: str) -> Settings:
        """These settings with environment variables changed (pip is asked anew if needed)."""
        return replace(self, environ={**self.environ, **changes})

    # -- package indexes (pip's configuration) --------------------------------------------

    @cached_property
    def index_url(self) -> str:
        """PIP_INDEX_URL, else pip's global.index-url, else pip's default index."""
        index = (self.environ.get("PIP_INDEX_URL") or self._pip("global.index-url")
                 or _pip_default())
        return index.rstrip("/")

    @cached_property
    def ca_bundle(self) -> str | None:
        """The CA file for package indexes: PIP_CERT, pip's global.cert, REQUESTS_CA_BUNDLE,
        SSL_CERT_FILE, else the system's bundle where there is one."""
        ca = (self.environ.get("PIP_CERT") or self._pip("global.cert")
              or self.environ.get("REQUESTS_CA_BUNDLE") or self.environ.get("SSL_CERT_FILE"))
        if ca is None and SYSTEM_CA.is_file():
            ca = str(SYSTEM_CA)
        return ca

    @cached_property
    def extra_index_urls(self) -> tuple[str, ...]:
        """pip's extra-index-url, for host-side locks."""
        return self._pip_list("PIP_EXTRA_INDEX_URL", "global.extra-index-url")

    @cached_property
    def find_links(self) -> tuple[str, ...]:
        """pip's find-links, for host-side locks."""
        return self._pip_list("PIP_FIND_LINKS", "global.find-links")

    def _pip_list(self, variable: str, key: str) -> tuple[str, ...]:
        """A whitespace-separated pip option, from its environment variable, else pip's
        config."""
        return tuple((self.environ.get(variable) or self._pip(key) or "").split())

    @cached_property
    def debian_mirror(self) -> str | None:
        """The first Debian archive of the host's apt sources: a debootstrap base's mirror."""
        return apt_mirror(self.apt_dir)

    # -- build limits and caches ----------------------------------------------------------

    @property
    def max_jobs(self) -> int | None:
        """SPARKBAKE_MAX_JOBS: a fixed compile job count."""
        jobs = self._positive("SPARKBAKE_MAX_JOBS")
        return int(jobs) if jobs else None

    @property
    def gib_per_job(self) -> float:
        """SPARKBAKE_GIB_PER_JOB: the memory one compile job is given."""
        return self._positive("SPARKBAKE_GIB_PER_JOB") or DEFAULT_GIB_PER_JOB

    @property
    def builder_memory(self) -> str | None:
        """SPARKBAKE_BUILDER_MEMORY: the builder container's limit, e.g. "96g"."""
        return self.environ.get("SPARKBAKE_BUILDER_MEMORY") or None

    @property
    def cache_dir(self) -> Path:
        """The host's cache (base layers, the compile cache): SPARKBAKE_CACHE, else
        $XDG_CACHE_HOME/sparkbake, else ~/.cache/sparkbake."""
        if self.environ.get("SPARKBAKE_CACHE"):
            return Path(self.environ["SPARKBAKE_CACHE"])
        xdg = self.environ.get("XDG_CACHE_HOME")
        return (Path(xdg) if xdg else self._home / ".cache") / "sparkbake"

    @property
    def compile_cache(self) -> CompileCacheSettings:
        """SPARKBAKE_COMPILE_CACHE overrides versions.yaml's `cache:`: `off` (no sccache),
        `local` (this host's folder), or a Redis URL."""
        raw = self.environ.get("SPARKBAKE_COMPILE_CACHE") or None
        if raw is not None and raw not in ("off", "local") and not REDIS_URL.fullmatch(raw):
            raise ConfigError(f"SPARKBAKE_COMPILE_CACHE={raw!r} is not off, local or a Redis "
                              "URL", "write e.g. SPARKBAKE_COMPILE_CACHE=redis://cache.lan:6379/0")
        return CompileCacheSettings(override=raw, folder=self.cache_dir / "sccache")

    @property
    def bytecode_folder(self) -> Path:
        """Where the venv's .pyc files are kept by what decides their bytes (bake/bytecode.py):
        in the host's cache."""
        return self.cache_dir / "bytecode"

    @property
    def bytecode_cache(self) -> Path | None:
        """The bytecode folder a bake uses; None under SPARKBAKE_COMPILE_CACHE=off, which
        makes compiles cold."""
        if self.environ.get("SPARKBAKE_COMPILE_CACHE") == "off":
            return None
        return self.bytecode_folder

    @property
    def compress_workers(self) -> int:
        """Threads that gzip a layer: SPARKBAKE_COMPRESS_WORKERS, else every core (the bytes
        are the same either way: oci/blockgzip)."""
        return int(self._positive("SPARKBAKE_COMPRESS_WORKERS") or os.cpu_count() or 1)

    # -- what the run may do --------------------------------------------------------------

    @property
    def ci(self) -> bool:
        """Under CI (`CI=true`)."""
        return self.environ.get("CI", "").lower() in CI_TRUE

    @property
    def locked(self) -> bool:
        """Must every lock exist already? Under CI, with --locked or SPARKBAKE_LOCKED=1: a lock
        is an input to review, never made on the fly there."""
        return self.ci or self.locked_option or self.environ.get("SPARKBAKE_LOCKED") == "1"

    @property
    def nox_session(self) -> bool:
        """Run by a nox session (nox sets NOX_CURRENT_SESSION): remedies name `nox -s`."""
        return bool(self.environ.get("NOX_CURRENT_SESSION"))

    @property
    def signing(self) -> SigningSettings:
        key = self.environ.get("SPARKBAKE_SIGNING_KEY") or None
        return SigningSettings(Path(key) if key else None,
                               self.environ.get("SPARKBAKE_SIGNING_PASSPHRASE") or None)

    # -- registries (Docker's TLS folders) ------------------------------------------------

    @property
    def registry_ca_roots(self) -> str | None:
        """The CA file registries are checked against besides Docker's certs.d:
        REQUESTS_CA_BUNDLE, SSL_CERT_FILE, else the system's bundle (None: requests' own)."""
        chosen = self.environ.get("REQUESTS_CA_BUNDLE") or self.environ.get("SSL_CERT_FILE")
        if chosen:
            return chosen
        return str(SYSTEM_CA) if SYSTEM_CA.is_file() else None

    @property
    def docker_certs_dirs(self) -> tuple[Path, ...]:
        """Where Docker keeps per-registry TLS files (certs.d/<host[:port]>): a rootless
        engine's under $XDG_CONFIG_HOME/docker, then /etc/docker's."""
        xdg = self.environ.get("XDG_CONFIG_HOME")
        rootless = (Path(xdg) if xdg else self._home / ".config") / "docker" / "certs.d"
        return rootless, Path("/etc/docker/certs.d")

    @property
    def docker_config_file(self) -> Path:
        """Docker's client config, where `docker login` keeps logins: $DOCKER_CONFIG's
        config.json, else ~/.docker/config.json."""
        folder = self.environ.get("DOCKER_CONFIG")
        return (Path(folder) if folder else self._home / ".docker") / "config.json"

    def patch_tests_environment(self, **overrides: str) -> dict[str, str]:
        """The environment without VLLM_* variables (they would change what vLLM's own tests
        see), plus overrides: what the patch-tests run with."""
        kept = {k: v for k, v in _without_secrets(self.environ).items()
                if not k.startswith("VLLM_")}
        return {**kept, **overrides}

    def _pip(self, key: str) -> str | None:
        return self.ask_pip(key, self.environ)

    @property
    def _home(self) -> Path:
        return Path(self.environ["HOME"]) if self.environ.get("HOME") else Path.home()

    def _positive(self, name: str) -> float | None:
        raw = self.environ.get(name)
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = 0.0
        if value <= 0:
            raise ConfigError(f"{name}={raw!r} is not a positive number", "unset it or fix it")
        return value


# What only sparkbake itself reads, and no child needs: the signing key and its passphrase,
# and the Docker client config that holds registry logins (pip, a builder, patch code and
# vLLM's own tests run as children, and must not see them).
SECRET_VARIABLES = frozenset({"SPARKBAKE_SIGNING_KEY", "SPARKBAKE_SIGNING_PASSPHRASE",
                              "DOCKER_CONFIG"})


def child_environment(environ: Mapping[str, str], added: Mapping[str, str]) -> dict[str, str]:
    """A child process's environment: the run's (Settings.environ) but its secrets, with
    added on top."""
    return {**_without_secrets(environ), **added}


def _without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in SECRET_VARIABLES}


def apt_mirror(apt_dir: Path) -> str | None:
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


def _pip_default() -> str:
    """pip's own default index, asked of pip so that no host is written here."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError as exc:
        raise ConfigError("no package index configured and pip is not installed",
                          "set PIP_INDEX_URL") from exc
    return str(PyPI.simple_url)
