"""The bake's pip installs the lock's wheels whatever the host's pip is configured with."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.bake import venv
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
