"""The bake's pip installs the lock's wheels whatever the host's pip is configured with."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sparkbake.bake import venv
from sparkbake.errors import BakeError
from tests.conftest import plain_console
from tests.unit.test_wheel_kernels import ARM64, FILES, LIBRARY, SOURCE_DATE, make_wheel


@pytest.mark.parametrize("configured", ["variable", "config file"])
def test_the_bakes_pip_ignores_the_hosts_pip_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, configured: str) -> None:
    """A constraint the host's pip has (here one no wheel meets) does not reach the install."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, FILES)
    (tmp_path / "constraints.txt").write_text("pkg<1.0\n")
    if configured == "variable":
        monkeypatch.setenv("PIP_CONSTRAINT", str(tmp_path / "constraints.txt"))
    else:
        (tmp_path / "pip.conf").write_text(f"[global]\nconstraint = {tmp_path}/constraints.txt\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    site = tmp_path / "site"
    venv._pip_target(site, "image", ARM64, "3.11", [wheels], ["pkg"], SOURCE_DATE,
                     tmp_path / "log", console=plain_console())
    assert (site / "pkg" / "_C.abi3.so").read_bytes() == LIBRARY


def small_wheel(folder: Path, name: str, version: str, requires: str = "",
                python: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", "")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\n"
                       f"Version: {version}\n"
                       + (f"Requires-Dist: {requires}\n" if requires else "")
                       + (f"Requires-Python: {python}\n" if python else ""))
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                       "Tag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")


def test_an_image_of_another_python_gets_the_lock_not_this_hosts_markers(
        tmp_path: Path) -> None:
    """The lock, resolved for Python 3.13, took dep 2.0 and a tool that needs 3.13; this
    host's pip would read `python_version <= "3.12"` for its own Python and refuse both."""
    wheels, house = tmp_path / "wheels", tmp_path / "house"
    small_wheel(wheels, "pkg", "1.0", 'dep<2; python_version <= "3.12"')
    small_wheel(house, "dep", "2.0")
    small_wheel(house, "tool", "1.0", python=">=3.13")
    other = "3.13" if venv.HOST_PYTHON != "3.13" else "3.12"
    asked = venv._asked_of_pip(["pkg"], ("tool",), [wheels, house], other)
    venv._pip_target(tmp_path / "site", "image", ARM64, other, [wheels, house], asked,
                     SOURCE_DATE, tmp_path / "log", console=plain_console())
    assert {p.name for p in (tmp_path / "site").iterdir() if not p.name.endswith("-info")} == {
        "pkg", "dep", "tool"}
    assert venv._asked_of_pip(["pkg"], ("tool",), [wheels, house], venv.HOST_PYTHON) == [
        "pkg", "tool"]
    with pytest.raises(BakeError, match="installing its wheels"):
        venv._pip_target(tmp_path / "again", "image", ARM64, other, [wheels, house],
                         ["pkg", "tool"], SOURCE_DATE, tmp_path / "log", console=plain_console())
