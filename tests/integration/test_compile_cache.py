"""The compile cache for real: sccache in two builder containers sharing a redis-server, a
local cache folder, an unreachable Redis, a malformed URL."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbake.oci import docker_engine
from tests import polling
from tests.conftest import Project, copy_project, free_port


@pytest.fixture
def redis_url(docker_client: docker_engine.Client, debian_base: str) -> Iterator[str]:
    """A real redis-server on the Docker bridge's gateway (as a Redis host elsewhere would be
    reached: through the builder's relay), stopped by its PID afterwards."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is missing: run scripts/host-setup")
    gateway = docker_engine.bridge_gateway(docker_client, debian_base)
    port = free_port()
    server = subprocess.Popen(["redis-server", "--bind", gateway, "--port", str(port),
                               "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                              stdout=subprocess.DEVNULL)
    try:
        polling.until(lambda: server.poll() is not None or polling.listening(gateway, port),
                      "redis-server listening")
        assert server.poll() is None, "redis-server did not start"
        yield f"redis://{gateway}:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=30)


def wheels_report(project: Project) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(next((project.root / "wheels").glob("*/wheels.json"))
                                        .read_text())
    return report


def build_on_host(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch,
                  cache_block: str = "") -> Project:
    """A fresh project with its own host cache folder: a builder on another host."""
    project = copy_project(tmp_path / name)
    if cache_block:
        with project.config_path.open("a") as out:
            out.write(cache_block)
    monkeypatch.setenv("SPARKBAKE_CACHE", str(tmp_path / f"{name}-host-cache"))
    assert project.sparkbake("wheels", "fixture") == 0
    return project


def test_a_second_builder_reuses_the_first_ones_objects_through_redis(
        tmp_path: Path, redis_url: str, debian_base: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SPARKBAKE_COMPILE_CACHE", raising=False)
    block = f"cache:\n  redis: {redis_url}\n"
    first = build_on_host(tmp_path, "first", monkeypatch, block)
    second = build_on_host(tmp_path, "second", monkeypatch, block)
    one, two = wheels_report(first), wheels_report(second)
    assert one["compile_cache"]["backend"] == two["compile_cache"]["backend"] == "redis"
    assert one["compile_cache"]["stats"]["hits"] == 0
    assert one["compile_cache"]["stats"]["misses"] > 0
    assert two["compile_cache"]["stats"]["hits"] == one["compile_cache"]["stats"]["misses"]
    assert two["compile_cache"]["stats"]["misses"] == 0
    assert two["compile_cache"]["stats"]["errors"] == 0
    # objects from the cache make the same wheel as compiling them (no -objtemp needed)
    assert [w["sha256"] for w in one["wheels"]] == [w["sha256"] for w in two["wheels"]]
    assert not list((tmp_path / "second-host-cache" / "sccache").rglob("*.o*")), \
        "the second builder used a local cache"
    assert "compile cache (redis): 4 hits, 0 misses (100%)" in second.log("fixture", "wheels")


@pytest.mark.required("prove-compile-cache")
def test_the_local_cache_outlives_the_builder_container(
        tmp_path: Path, debian_base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKBAKE_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("SPARKBAKE_CACHE", str(tmp_path / "host-cache"))
    first, second = copy_project(tmp_path / "one"), copy_project(tmp_path / "two")
    assert first.sparkbake("wheels", "fixture") == 0
    assert second.sparkbake("wheels", "fixture") == 0
    one, two = wheels_report(first), wheels_report(second)
    assert one["compile_cache"]["used"] == "local"
    assert (one["compile_cache"]["stats"]["hits"], two["compile_cache"]["stats"]["misses"]) \
        == (0, 0)
    assert two["compile_cache"]["stats"]["hits"] > 0
    assert any((tmp_path / "host-cache" / "sccache").iterdir())


@pytest.mark.required("prove-compile-cache")
def test_an_unreachable_redis_warns_and_builds_with_the_local_cache(
        tmp_path: Path, debian_base: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPARKBAKE_COMPILE_CACHE", f"redis://127.0.0.1:{free_port()}/0")
    project = build_on_host(tmp_path, "offline", monkeypatch)
    report = wheels_report(project)["compile_cache"]
    assert report["backend"] == "local"
    assert report["stats"]["misses"] > 0
    err = capsys.readouterr().err
    assert "warning: compile cache: Redis redis://127.0.0.1:" in err
    assert "does not answer" in err


@pytest.mark.required("prove-compile-cache")
def test_compile_cache_off_compiles_with_objtemp_and_no_sccache(
        tmp_path: Path, debian_base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKBAKE_COMPILE_CACHE", "off")
    project = build_on_host(tmp_path, "off", monkeypatch)
    report = wheels_report(project)["compile_cache"]
    assert (report["backend"], report["stats"]) == ("off", {})
    log = project.log("fixture", "wheels")
    assert "+ nvcc -O2 -c" in log and "+ sccache nvcc" not in log


def test_a_malformed_redis_url_is_exit_2_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = copy_project(tmp_path / "bad")
    with project.config_path.open("a") as out:
        out.write("cache:\n  redis: redis:/cache.lan:6379\n")
    line = len(project.config_path.read_text().splitlines())
    assert project.sparkbake("plan", "fixture") == 2
    assert f"{project.config_path}:{line}: redis 'redis:/cache.lan:6379' is not a Redis URL" \
        in capsys.readouterr().err
