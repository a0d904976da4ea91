"""The compile cache's pure logic: which backend, URLs shown and relayed, sccache's counts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sparkbake.config import settings
from sparkbake.config.versions import CompileCache
from sparkbake.errors import ConfigError
from sparkbake.wheels import compile_cache
from tests.conftest import plain_console, settings_of

FOLDER = Path("/cache/sparkbake/sccache")
URL = "redis://cache.lan:6379/0"


def host(override: str | None) -> settings.CompileCacheSettings:
    return settings.CompileCacheSettings(override=override, folder=FOLDER)


@pytest.mark.parametrize(("configured", "override", "kind", "redis"), [
    (None, None, "local", None),
    (URL, None, "redis", URL),
    (URL, "local", "local", None),
    (URL, "off", "off", None),
    (None, "redis://other:1/3", "redis", "redis://other:1/3"),
    (URL, "redis://other:1/3", "redis", "redis://other:1/3"),
])
def test_the_environment_overrides_versions_yaml(configured: str | None, override: str | None,
                                                 kind: str, redis: str | None) -> None:
    backend = compile_cache.choose(CompileCache(redis=configured), host(override))
    assert (backend.kind, backend.redis, backend.folder) == (kind, redis, FOLDER)


def test_the_override_is_checked() -> None:
    with pytest.raises(ConfigError, match="SPARKBAKE_COMPILE_CACHE=") as info:
        _ = settings_of(SPARKBAKE_COMPILE_CACHE="redis//cache.lan").compile_cache
    assert info.value.exit_code == 2
    found = settings_of(SPARKBAKE_COMPILE_CACHE="off", SPARKBAKE_CACHE="/tmp/somewhere")
    assert found.compile_cache == settings.CompileCacheSettings(
        "off", Path("/tmp/somewhere/sccache"))


def test_passwords_never_show_and_the_relay_keeps_credentials_and_db() -> None:
    url = "redis://builder:s3cret@cache.lan:6380/4"
    assert compile_cache.public_url(url) == "redis://builder:***@cache.lan:6380/4"
    assert "s3cret" not in compile_cache.Backend("redis", FOLDER, url).describe()
    assert compile_cache.public_url(URL) == URL
    relayed = compile_cache._via_relay(url)
    assert relayed == f"redis://builder:s3cret@{compile_cache.RELAY_ALIAS}:6379/4"
    assert compile_cache._via_relay("redis://cache.lan") == "redis://sparkbake-redis:6379"


def test_an_unreachable_redis_falls_back_to_the_local_folder() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = compile_cache.Backend("redis", FOLDER, f"redis://127.0.0.1:{port}")
    assert compile_cache.probe(backend.redis or "", timeout=2) is not None
    fallback = compile_cache.reachable(backend, console=plain_console())
    assert (fallback.kind, fallback.folder) == ("local", FOLDER)
    assert "Redis unreachable" in fallback.why


def test_summary_totals_the_counts_by_kind() -> None:
    stats = {"version": "0.16.0", "stats": {
        "compile_requests": 2, "non_cacheable_compilations": 1, "cache_read_errors": 1,
        "cache_hits": {"counts": {"CUDA": 1, "PTX": 1, "CUBIN": 1}},
        "cache_misses": {"counts": {"CUDA (Device code)": 1}},
        "cache_errors": {"counts": {"CUDA": 2}}}}
    summary = compile_cache.summary(stats)
    assert (summary["hits"], summary["misses"], summary["hit_rate"]) == (3, 1, 0.75)
    assert (summary["errors"], summary["compile_requests"]) == (3, 2)
    assert compile_cache.summary(None) == {}
    assert compile_cache.summary({"stats": {}})["hit_rate"] is None
