"""Shared fixtures: the Docker engine, the locally made Debian base, the built fixture tag.

Docker tests skip when no engine answers, except in CI (CI=true), where they fail.
Expensive things are made once per run: the base image by debootstrap, the fixture build.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, cast

import pytest

from sparkbake import bases, planning, records
from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.errors import EngineError
from sparkbake.oci import docker_engine
from sparkbake.publish.record import Release

DATA = Path(__file__).parent / "data"
# The nox sessions that run the proofs a landing does not (docs/how-to/develop.md says
# which area requires which): a test marked required(SESSION) runs only under its session.
REQUIRED_SESSIONS = ("prove-arm64", "prove-release", "prove-faults", "prove-compile-cache",
                     "repro-builds", "repro-one-step", "repro-vllm", "serve-cpu")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--required-by", choices=REQUIRED_SESSIONS, metavar="SESSION",
                     help="run only the tests nox session SESSION requires")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --required-by, the tests of a landing; with it, those of one session."""
    session = config.getoption("--required-by")
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("required")
        (kept if (marker.args[0] if marker else None) == session else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def no_pip_config(name: str, environ: Mapping[str, str]) -> str | None:
    """pip's configuration where pip has none: nothing is asked of the host's pip."""
    return None


def settings_of(**environ: str) -> Settings:
    """Settings of these environment variables alone; pip's configuration never asked."""
    return Settings(environ, ask_pip=no_pip_config)


@dataclass(frozen=True)
class Project:
    """A copy of tests/data: its own versions.yaml, patches/, build/ and wheels/."""

    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / "versions.yaml"

    def config(self) -> versions.Config:
        return versions.load(self.config_path)

    def plan(self, tag: str = "fixture") -> planning.Plan:
        loaded = self.config()
        return planning.make(loaded, loaded.tag(tag))

    def sparkbake(self, *args: str) -> int:
        return main(["--config", str(self.config_path), *args])

    def log(self, tag: str, stage: str) -> str:
        """The full output of a stage's last run: build/logs/<tag>/<stage>.log."""
        return (self.root / "build" / "logs" / tag / f"{stage}.log").read_text()


DEBIAN_BASE = "  debian:\n    debootstrap: {suite: bookworm}\n"
DEBIAN_BASE_WITH_PYTHON = DEBIAN_BASE + '    python: "3.11"\n'  # what a lock needs
TREE_UPSTREAM = "  tree:\n    dir: upstream\n"


def versions_yaml(*, tags: str, upstreams: str = TREE_UPSTREAM, bases: str = DEBIAN_BASE,
                  repository: str = "localhost:5000/sparkbake-test",
                  platform: str = "linux/amd64", builder: str = "debian",
                  runtime: str = "debian") -> str:
    """A versions.yaml's text. tags, upstreams and bases are YAML indented under their
    section; by default the one base is the debootstrap base `debian` and the one upstream
    the dir upstream `tree` (./upstream). Each key has a line of its own, so that a test can
    find the line an error names."""
    return f"""\
schema: 1
defaults:
  repository: {repository}
  platform: {platform}
  cuda_arch: "12.1a"
  builder: {builder}
  runtime: {runtime}
bases:
{bases}upstreams:
{upstreams}tags:
{tags}"""


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
    path.write_text(versions_yaml(repository="localhost:5000/sparkbake-cli", tags=tags),
                    encoding="utf-8")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def missing(what: str) -> NoReturn:
    """Skip a test that needs what this machine lacks; in CI (CI=true) fail it: there every
    test must run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs {what}")
    pytest.skip(f"no {what}")


def copy_project(dest: Path) -> Project:
    shutil.copytree(DATA, dest, ignore=shutil.ignore_patterns("build", "wheels"))
    return Project(dest)


def cp_project(dest: Path, later: int | None = None) -> Path:
    """tests/data copied as `cp -r` copies (file times: the copy's; `later`: set to that
    time), outside git, with its upstream's declared date taken out."""
    subprocess.run(["cp", "-r", str(DATA), str(dest)], check=True)
    if later is not None:
        for path in (dest, *dest.rglob("*")):
            os.utime(path, (later, later), follow_symlinks=False)
    config = dest / "versions.yaml"
    config.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                              if "source_date_epoch" not in line))
    return config


@pytest.fixture(scope="session")
def docker_client() -> docker_engine.Client:
    try:
        return docker_engine.connect(Settings.of_process())
    except EngineError as exc:
        missing(f"Docker engine: {exc.message}")


@pytest.fixture(scope="session")
def debian_base(docker_client: docker_engine.Client,
                tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixture's Debian base image (debootstrap + import), made once per engine."""
    loaded = versions.load(DATA / "versions.yaml")
    tag = loaded.tag("fixture")
    base = bases.ensure(docker_client, tag.runtime, tag.platform,
                        tmp_path_factory.mktemp("bases"), Settings.of_process(),
                        console=plain_console())
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
    """Remedies name `sparkbake COMMAND` (not nox's form, as under `nox -s tests`)."""
    monkeypatch.delenv("NOX_CURRENT_SESSION", raising=False)  # what main reads


def plain_console() -> Console:
    """A console as main makes it, at the default verbosity, on this process's stderr; its
    environment (which child processes start from) is this process's."""
    return Console(dict(os.environ))


@pytest.fixture
def console() -> Console:
    return plain_console()


def printed(release: Release) -> dict[str, Any]:
    """A release record as --json prints it (and build/releases keeps it): plain JSON."""
    record: dict[str, Any] = json.loads(json.dumps(records.to_json(release)))
    return record


def fake_engine(fake: object) -> docker_engine.Client:
    """A unit test's stand-in for the engine's client: it has what the code under test asks
    of one (None: the code never reaches the engine)."""
    return cast(docker_engine.Client, fake)
