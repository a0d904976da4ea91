"""compile_cache: sccache in front of the builder's C++ and nvcc compiles (README: Caches).

The cache is a folder on this host (mounted into each builder, so it outlives them) or a
Redis server that builders on other hosts share. The builder stays offline with Redis too:
it runs on an internal Docker network whose one other member is a relay (a container of the
same builder image) that forwards one port to the Redis host and nothing else.
"""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sparkbake.config.settings import CompileCacheSettings
from sparkbake.config.versions import CompileCache
from sparkbake.console.display import Console
from sparkbake.errors import EngineError
from sparkbake.oci.docker_engine import Client, started_container
from sparkbake.wheels.report import CacheCounts

__all__ = ["Backend", "choose", "container_args", "probe", "public_url", "reachable", "summary"]

RELAY_ALIAS = "sparkbake-redis"  # the relay's name on the builder's internal network
RELAY_PORT = 6379
MOUNT = "/cache/sccache"
# nvcc's intermediates named after the object, not its pid; only without sccache, which runs
# nvcc's steps itself (with names after the object) and misreads -objtemp as `-o bjtemp`
OBJTEMP = {"NVCC_APPEND_FLAGS": "-objtemp"}


@dataclass(frozen=True)
class Backend:
    """Where the builder's sccache keeps its objects: `off`, `local` (folder) or `redis`."""

    kind: str
    folder: Path
    redis: str | None = None
    why: str = ""  # what chose it: versions.yaml, SPARKBAKE_COMPILE_CACHE, a fallback

    def describe(self) -> str:
        where = {"off": "off", "local": f"local {self.folder}",
                 "redis": f"redis {public_url(self.redis or '')}"}[self.kind]
        return f"{where} ({self.why})" if self.why else where


def choose(configured: CompileCache, host: CompileCacheSettings) -> Backend:
    """SPARKBAKE_COMPILE_CACHE over versions.yaml's `cache:`; a local folder by default."""
    if host.override == "off":
        return Backend("off", host.folder, why="SPARKBAKE_COMPILE_CACHE=off")
    if host.override == "local":
        return Backend("local", host.folder, why="SPARKBAKE_COMPILE_CACHE=local")
    if host.override:
        return Backend("redis", host.folder, host.override, "SPARKBAKE_COMPILE_CACHE")
    if configured.redis:
        return Backend("redis", host.folder, configured.redis, "versions.yaml cache.redis")
    return Backend("local", host.folder, why="default")


def probe(url: str, timeout: float = 5.0) -> str | None:
    """None when a Redis server answers PING at url (an auth error is an answer too);
    else why not."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or RELAY_PORT),
                                      timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError as exc:
        return str(exc) or type(exc).__name__
    if reply.startswith((b"+PONG", b"-NOAUTH", b"-WRONGPASS", b"-ERR")):
        return None
    return f"no Redis reply to PING (got {reply[:20]!r})"


def reachable(backend: Backend, *, console: Console) -> Backend:
    """A Redis backend whose server does not answer falls back to the local folder, with a
    warning: a team cache that is down slows a build, it does not stop it."""
    if backend.kind != "redis" or backend.redis is None:
        return backend
    problem = probe(backend.redis)
    if problem is None:
        return backend
    console.notice(f"warning: compile cache: Redis {public_url(backend.redis)} does not answer "
                   f"({problem}); using the local cache {backend.folder} for this build")
    return Backend("local", backend.folder, why=f"Redis unreachable: {problem}")


@contextlib.contextmanager
def container_args(client: Client, backend: Backend, builder: str, *,
                   console: Console) -> Iterator[dict[str, Any]]:
    """Volumes, environment and network of a builder using the backend; with Redis, the
    internal network and its relay exist for the block."""
    if backend.kind == "off":
        yield {"volumes": {}, "environment": {"VLLM_DISABLE_SCCACHE": "1", **OBJTEMP}}
        return
    backend.folder.mkdir(parents=True, exist_ok=True)  # with Redis: the builder's fallback
    volumes = {str(backend.folder): {"bind": MOUNT, "mode": "rw"}}
    environment = {"SPARKBAKE_SCCACHE": backend.kind, "SCCACHE_IDLE_TIMEOUT": "0",
                   "SCCACHE_DIR": MOUNT}
    if backend.kind == "local":
        yield {"volumes": volumes, "environment": environment}
        return
    assert backend.redis is not None
    with _relay(client, builder, backend.redis, console=console) as network:
        yield {"volumes": volumes, "network_mode": network,
               "environment": {**environment, "SCCACHE_REDIS_ENDPOINT": _via_relay(backend.redis)}}


@contextlib.contextmanager
def _relay(client: Client, builder: str, url: str, *, console: Console) -> Iterator[str]:
    """An internal network (no route out) and a relay on it and on the default bridge that
    forwards RELAY_PORT to the Redis host; both removed afterwards."""
    parts = urlsplit(url)
    target = f"{parts.hostname}:{parts.port or RELAY_PORT}"
    name = f"sparkbake-cache-{uuid.uuid4().hex[:12]}"
    console.detail(f"compile cache: internal network {name}, relay to {target}")
    try:
        network = client.networks.create(name, driver="bridge", internal=True)
    except Exception as exc:  # docker.errors.APIError: the SDK ships no types
        raise EngineError(f"cannot create the Docker network {name}: {exc}",
                          "check the Docker engine") from exc
    try:
        with started_container(client, builder, ["--relay", target]) as relay:
            network.connect(relay, aliases=[RELAY_ALIAS])
            yield name
    finally:
        with contextlib.suppress(Exception):
            network.remove()


def _via_relay(url: str) -> str:
    """The Redis URL with its host:port replaced by the relay's; credentials and db kept."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@" if credentials else ""
    return urlunsplit((parts.scheme, f"{netloc}{RELAY_ALIAS}:{RELAY_PORT}", parts.path, "", ""))


def public_url(url: str) -> str:
    """A Redis URL without its password, for logs and reports."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    return urlunsplit((parts.scheme, f"{user}:***@{parts.netloc.rpartition('@')[2]}",
                       parts.path, "", ""))


def summary(stats: dict[str, Any] | None) -> CacheCounts:
    """The counts that matter from `sccache --show-stats --stats-format=json`."""
    if not stats:
        return {}
    raw = stats.get("stats", {})

    def total(name: str) -> int:
        return sum(int(v) for v in raw.get(name, {}).get("counts", {}).values())

    hits, misses = total("cache_hits"), total("cache_misses")
    rate = round(hits / (hits + misses), 3) if hits + misses else None
    return {"compile_requests": int(raw.get("compile_requests", 0)), "hits": hits,
            "misses": misses, "hit_rate": rate,
            "hits_by_kind": raw.get("cache_hits", {}).get("counts", {}),
            "misses_by_kind": raw.get("cache_misses", {}).get("counts", {}),
            "not_cacheable": int(raw.get("non_cacheable_compilations", 0)),
            "errors": total("cache_errors") + int(raw.get("cache_read_errors", 0))
            + int(raw.get("cache_write_errors", 0)), "version": stats.get("version")}
