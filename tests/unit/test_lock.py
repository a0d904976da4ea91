"""The builder lock: where it lives, what is refused before anything is resolved."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.errors import ConfigError, EngineError
from sparkbake.lock import pins
from tests.conftest import (
    DEBIAN_BASE,
    DEBIAN_BASE_WITH_PYTHON,
    plain_console,
    settings_of,
    versions_yaml,
)

SETTINGS = settings_of(PIP_INDEX_URL="http://127.0.0.1:9/simple")  # neither CI nor --locked


def load(tmp_path: Path, bases: str = DEBIAN_BASE_WITH_PYTHON) -> versions.Config:
    (tmp_path / "versions.yaml").write_text(
        versions_yaml(bases=bases, tags="  t: {upstream: tree, series: []}\n"))
    return versions.load(tmp_path / "versions.yaml")


def test_a_missing_lock_names_the_command_that_makes_it(tmp_path: Path) -> None:
    loaded = load(tmp_path)
    with pytest.raises(ConfigError) as caught:
        pins.require_lock(loaded, loaded.tag("t"), settings=settings_of())
    assert caught.value.exit_code == 2
    assert str(tmp_path / "locks" / "debian.amd64.txt") in caught.value.message
    assert caught.value.remedy == "create it: sparkbake lock t, and commit it"


def test_a_base_without_its_python_version_cannot_be_locked(tmp_path: Path) -> None:
    loaded = load(tmp_path, bases=DEBIAN_BASE)
    with pytest.raises(ConfigError, match="base 'debian' does not say its Python version"):
        pins.resolve(loaded, loaded.tag("t"), SETTINGS, console=plain_console())


def test_a_platform_the_table_lacks_loads_but_is_not_locked(tmp_path: Path) -> None:
    (tmp_path / "versions.yaml").write_text(versions_yaml(
        platform="linux/riscv64", bases=DEBIAN_BASE_WITH_PYTHON,
        tags="  t: {upstream: tree, series: []}\n"))
    loaded = versions.load(tmp_path / "versions.yaml")
    assert pins.lock_path(loaded, loaded.tag("t")).name == "debian.riscv64.txt"
    with pytest.raises(ConfigError) as caught:
        pins.resolve(loaded, loaded.tag("t"), SETTINGS, console=plain_console())
    assert (caught.value.message, caught.value.remedy) == (
        "tag t: no lock platform for linux/riscv64", "use one of linux/amd64, linux/arm64")


def test_without_uv_the_lock_is_an_environment_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load(tmp_path)
    monkeypatch.setitem(sys.modules, "uv", None)  # the package gone: `import uv` fails
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineError, match="uv is not installed"):
        pins.resolve(loaded, loaded.tag("t"), SETTINGS, console=plain_console())


def test_an_unreachable_index_fails_without_writing_a_lock(tmp_path: Path) -> None:
    loaded = load(tmp_path)
    with pytest.raises(EngineError, match=r"resolving the lock debian\.amd64\.txt failed"):
        pins.resolve(loaded, loaded.tag("t"), SETTINGS, console=plain_console())
    assert not (tmp_path / "locks" / "debian.amd64.txt").exists()


def test_uv_is_found_beside_sparkbake_with_an_empty_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # as from an unactivated venv's sparkbake
    assert Path(pins._uv()).name == "uv"


def test_a_bad_python_version_is_refused_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"versions.yaml:11: python '3' is not"):
        load(tmp_path, bases=DEBIAN_BASE + '    python: "3"\n')  # versions.yaml's line 11


def test_a_missing_lock_is_made_with_a_notice_on_a_developers_machine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load(tmp_path)
    # it is made: uv runs against the (here unreachable) index
    with pytest.raises(EngineError, match=r"resolving the lock debian\.amd64\.txt failed"):
        pins.make_missing(loaded, loaded.tag("t"), SETTINGS, tmp_path, console=plain_console())
    assert "lock: locks/debian.amd64.txt missing: making it now; commit it (CI and --locked " \
           "refuse a missing lock)" in capsys.readouterr().err


@pytest.mark.parametrize("settings", [SETTINGS.with_environ(CI="true"),
                                      dataclasses.replace(SETTINGS, locked_option=True)],
                         ids=["ci", "locked"])
def test_under_ci_or_locked_a_missing_lock_stays_an_error(
        tmp_path: Path, settings: Settings) -> None:
    loaded = load(tmp_path)
    assert pins.make_missing(loaded, loaded.tag("t"), settings, tmp_path,
                             console=plain_console()) == []
    with pytest.raises(ConfigError, match="no builder lock for base 'debian'"):
        pins.require_lock(loaded, loaded.tag("t"), settings=settings_of())


def test_an_existing_lock_is_never_remade(tmp_path: Path) -> None:
    loaded = load(tmp_path)
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "debian.amd64.txt").write_text("# committed\n")
    assert pins.make_missing(loaded, loaded.tag("t"), SETTINGS, tmp_path,
                             console=plain_console()) == []
    assert (tmp_path / "locks" / "debian.amd64.txt").read_text() == "# committed\n"
