"""The run's settings: read once from the environment, pip's configuration asked only when a
value of it is needed, and the command line's --locked carried to the lock code in them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.core.stages import Stage
from sparkbake.fetch import thirdparty
from sparkbake.pipeline import stage_commands
from sparkbake.run import Run
from tests.conftest import copy_project, plain_console, versions_yaml


class CountingPip:
    """pip's configuration as a fake: what each key answers, and every key asked, in order
    (each ask is a `pip config get` process with the real one)."""

    def __init__(self, **answers: str) -> None:
        self.answers = {key.replace("_", "-"): value for key, value in answers.items()}
        self.asked: list[str] = []

    def __call__(self, name: str, environ: Mapping[str, str]) -> str | None:
        self.asked.append(name)
        return self.answers.get(name.removeprefix("global."))


def test_values_that_are_not_pips_never_ask_pip() -> None:
    pip = CountingPip(index_url="https://pip.example/simple")
    settings = Settings({"SPARKBAKE_CACHE": "/cache", "SPARKBAKE_MAX_JOBS": "3"}, ask_pip=pip)
    assert (settings.cache_dir, settings.max_jobs, settings.builder_memory) == \
        (Path("/cache"), 3, None)
    assert settings.compile_cache.folder == Path("/cache/sccache")
    assert (settings.locked, settings.nox_session, settings.signing.key) == (False, False, None)
    assert settings.docker_certs_dirs[1] == Path("/etc/docker/certs.d")
    assert pip.asked == []


def test_pip_is_asked_once_per_value_and_only_where_the_environment_has_none() -> None:
    pip = CountingPip(index_url="https://pip.example/simple/", find_links="/a /b")
    settings = Settings({"PIP_CERT": "/ca.pem"}, ask_pip=pip)
    assert settings.index_url == "https://pip.example/simple"
    assert settings.index_url == "https://pip.example/simple"
    assert settings.ca_bundle == "/ca.pem"  # the environment's: pip not asked
    assert settings.find_links == ("/a", "/b")
    assert settings.extra_index_urls == ()
    assert pip.asked == ["global.index-url", "global.find-links", "global.extra-index-url"]


def test_the_environment_is_read_when_the_settings_are_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKBAKE_BUILDER_MEMORY", "12g")
    settings = Settings.of_process(locked=True)
    monkeypatch.setenv("SPARKBAKE_BUILDER_MEMORY", "24g")  # later: not this run's
    assert (settings.builder_memory, settings.locked) == ("12g", True)
    assert settings.with_environ(SPARKBAKE_BUILDER_MEMORY="1g").builder_memory == "1g"


def test_a_build_that_needs_no_package_index_starts_no_pip(tmp_path: Path) -> None:
    """fetch and patch of a folder upstream: nothing of pip's configuration is read."""
    project = copy_project(tmp_path / "project")
    pip = CountingPip()
    settings = Settings({"HOME": str(tmp_path)}, ask_pip=pip)
    loaded = project.config()
    run = Run.of(loaded, settings, plain_console())
    assert stage_commands.run_until(run, loaded.tag("fixture"), Stage.PATCH) == 0
    assert stage_commands.run_until(run, loaded.tag("fixture"), Stage.PATCH) == 0
    assert pip.asked == []


# a download the tree declares, on a port where nothing listens
CLOSED = "FetchContent_Declare(tinydep GIT_REPOSITORY git://127.0.0.1:9/tinydep.git GIT_TAG main)\n"


def test_locked_reaches_the_lock_code_in_the_settings_not_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CI", raising=False)  # main reads it: --locked alone refuses here
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "CMakeLists.txt").write_text(CLOSED)
    config = tmp_path / "versions.yaml"
    config.write_text(versions_yaml(tags="  t: {upstream: tree, series: []}\n"))
    seen: list[tuple[bool, dict[str, str]]] = []
    missing_lock = thirdparty.missing_lock

    def watched(loaded: versions.Config, tag: versions.Tag, tree: Path,
                settings: Settings) -> bool:
        seen.append((settings.locked, dict(os.environ)))
        return missing_lock(loaded, tag, tree, settings)

    monkeypatch.setattr(thirdparty, "missing_lock", watched)
    before = dict(os.environ)
    assert main(["--config", str(config), "wheels", "t", "--locked"]) == 2
    assert "CI and --locked never make a lock" in capsys.readouterr().err
    assert seen == [(True, before)]  # the lock code got it, and the environment is as it was
    assert dict(os.environ) == before
    seen.clear()
    assert main(["--config", str(config), "wheels", "t"]) == 8  # made: its server is asked
    assert "cannot reach the servers of 1 CMake dependencies" in capsys.readouterr().err
    assert seen == [(False, before)]


def test_settings_with_locked_are_settings_that_lock() -> None:
    plain = Settings({})
    assert not plain.locked
    assert dataclasses.replace(plain, locked_option=True).locked
    assert plain.with_environ(CI="true").locked and plain.with_environ(CI="1").locked
    assert not plain.with_environ(CI="false").locked
    # documented for hosts that are not CI (docs/reference/locks.md)
    assert plain.with_environ(SPARKBAKE_LOCKED="1").locked
    assert not plain.with_environ(SPARKBAKE_LOCKED="0").locked


def test_the_home_folder_is_the_settings_own() -> None:
    settings = Settings({"HOME": "/home/builder"})
    assert settings.cache_dir == Path("/home/builder/.cache/sparkbake")
    assert settings.docker_certs_dirs[0] == Path("/home/builder/.config/docker/certs.d")


def test_the_bytecode_cache_is_in_the_host_cache_unless_compiles_are_cold() -> None:
    assert Settings({"SPARKBAKE_CACHE": "/cache"}).bytecode_cache == Path("/cache/bytecode")
    cold = Settings({"SPARKBAKE_CACHE": "/cache", "SPARKBAKE_COMPILE_CACHE": "off"})
    assert cold.bytecode_cache is None
    assert cold.bytecode_folder == Path("/cache/bytecode")  # gc still trims what is there


def test_children_get_the_runs_environment_without_sparkbakes_secrets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkbake.config.settings import child_environment
    from sparkbake.console.display import Console
    from sparkbake.console.tools import run
    from sparkbake.errors import EngineError

    monkeypatch.setenv("SPARKBAKE_SIGNING_PASSPHRASE", "hunter2")
    monkeypatch.setenv("DOCKER_CONFIG", "/logins")
    monkeypatch.setenv("SPARKBAKE_KEPT", "yes")
    settings = Settings.of_process()
    monkeypatch.setenv("SPARKBAKE_LATER", "set after the run started")
    env = child_environment(settings.environ, {"ADDED": "1"})
    assert "SPARKBAKE_SIGNING_PASSPHRASE" not in env and "DOCKER_CONFIG" not in env
    assert (env["SPARKBAKE_KEPT"], env["ADDED"]) == ("yes", "1")
    console = Console(settings.environ)
    shown = run(console, ["env"], error=EngineError, what="env", capture=True).stdout
    assert "SPARKBAKE_LATER" not in shown  # the run's environment, not the process's now
    assert "SPARKBAKE_KEPT=yes" in shown and "hunter2" not in shown and "/logins" not in shown
