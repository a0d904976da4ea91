"""Shared fixtures: the Docker engine, the locally made Debian base, the built fixture tag.

Docker tests skip when no engine answers, except in CI (CI=true), where they fail.
Expensive things are made once per run: the base image by debootstrap, the fixture build.
"""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.bake import bases
from sparkbake.config import settings, versions
from sparkbake.console import invocation
from sparkbake.errors import EngineError
from sparkbake.oci import docker_engine
from sparkbake.pipeline import plan

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Project:
    """A copy of tests/data: its own versions.yaml, patches/, build/ and wheels/."""

    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / "versions.yaml"

    def config(self) -> versions.Config:
        return versions.load(self.config_path)

    def plan(self, tag: str = "fixture") -> plan.Plan:
        loaded = self.config()
        return plan.make(loaded, loaded.tag(tag))

    def sparkbake(self, *args: str) -> int:
        return main(["--config", str(self.config_path), *args])

    def log(self, tag: str, stage: str) -> str:
        """The full output of a stage's last run: build/logs/<tag>/<stage>.log."""
        return (self.root / "build" / "logs" / tag / f"{stage}.log").read_text()


VERSIONS_HEAD = """\
schema: 1
defaults:
  repository: {repository}
  platform: {platform}
  cuda_arch: "12.1a"
  builder: debian
  runtime: debian
bases:
  debian:
    debootstrap: {{suite: bookworm}}
upstreams:
  tree:
    dir: upstream
tags:
"""


def versions_yaml(repository: str, platform: str, tags: str) -> str:
    """A versions.yaml with one debootstrap base `debian`, a dir upstream `tree`, and tags."""
    return VERSIONS_HEAD.format(repository=repository, platform=platform) + tags


def one_patch_project(folder: Path, patch: str, tags: str) -> Path:
    """A versions.yaml (the `tree` upstream: upstream/demo.py) and a series `demo` of one
    patch in folder; returns the versions.yaml's path."""
    (folder / "upstream").mkdir(parents=True)
    (folder / "upstream" / "demo.py").write_text("print('demo')\n")
    series = folder / "patches" / "demo"
    series.mkdir(parents=True)
    (series / "series").write_text("0001-demo.patch\n")
    (series / "0001-demo.patch").write_text(patch)
    path = folder / "versions.yaml"
    path.write_text(versions_yaml("localhost:5000/sparkbake-cli", "linux/amd64", tags),
                    encoding="utf-8")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def copy_project(dest: Path) -> Project:
    shutil.copytree(DATA, dest, ignore=shutil.ignore_patterns("build", "wheels"))
    return Project(dest)


@pytest.fixture(scope="session")
def docker_client() -> docker_engine.Client:
    try:
        return docker_engine.connect()
    except EngineError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs a Docker engine: {exc}")
        pytest.skip(f"no Docker engine: {exc.message}")


@pytest.fixture(scope="session")
def debian_base(docker_client: docker_engine.Client,
                tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixture's Debian base image (debootstrap + import), made once per engine."""
    loaded = versions.load(DATA / "versions.yaml")
    tag = loaded.tag("fixture")
    base = bases.ensure(docker_client, tag.runtime, tag.platform,
                        tmp_path_factory.mktemp("bases"), settings.host_settings())
    return base.ref


@pytest.fixture(scope="session")
def built_fixture(docker_client: docker_engine.Client, debian_base: str,
                  tmp_path_factory: pytest.TempPathFactory) -> Project:
    """tests/data copied once and its `fixture` tag built to an image: shared, never edited."""
    project = copy_project(tmp_path_factory.mktemp("built") / "project")
    assert project.sparkbake("build-image", "fixture") == 0
    return project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """A fresh copy of tests/data that a test may edit."""
    return copy_project(tmp_path / "project")


@pytest.fixture(autouse=True)
def plain_invocation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remedies name `sparkbake COMMAND` (not nox's form, as under `nox -s tests`), and no
    --config of an earlier test's command line."""
    monkeypatch.delenv("NOX_CURRENT_SESSION", raising=False)
    invocation.remember_config(invocation.DEFAULT_CONFIG)
