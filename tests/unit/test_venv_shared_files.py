"""A file two installed distributions hold: the asked distribution's copy is kept."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sparkbake.bake import venv
from sparkbake.errors import BakeError
from sparkbake.hashing import record_hash
from tests.conftest import plain_console

SHIM = b"# flashinfer's b12x shim\n"
REAL = b"# the b12x package\n"


def installed(site: Path, dist: str, version: str, files: dict[str, bytes]) -> None:
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    (info / "RECORD").write_text("".join(f"{path},{record_hash(data)},{len(data)}\n"
                                         for path, data in files.items())
                                 + f"{info.name}/RECORD,,\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """pip --target's folder after flashinfer-python wrote b12x/__init__.py last."""
    site = tmp_path / "site"
    installed(site, "b12x", "1.5.1", {"b12x/__init__.py": REAL, "b12x/_lib/env.py": b"x"})
    installed(site, "flashinfer_python", "0.7.2.post1",
              {"b12x/__init__.py": SHIM, "flashinfer/__init__.py": b""})
    return site


def wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "house"
    house.mkdir()
    with zipfile.ZipFile(house / "b12x-1.5.1-py3-none-any.whl", "w") as wheel:
        wheel.writestr("b12x/__init__.py", REAL)
    return house


def test_the_asked_distributions_copy_is_kept(
        site: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    venv._settle_shared_files(site, [wheelhouse(tmp_path)], {"b12x"}, console=plain_console())
    assert (site / "b12x/__init__.py").read_bytes() == REAL
    assert ("bake: b12x and flashinfer-python hold 1 same-named file(s) with other bytes "
            "(b12x/__init__.py); b12x's copies are kept (the tag asks for it)") in \
        capsys.readouterr().err


def test_an_overlap_of_unasked_distributions_is_reported_and_left(
        site: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    venv._settle_shared_files(site, [wheelhouse(tmp_path)], set(), console=plain_console())
    assert (site / "b12x/__init__.py").read_bytes() == SHIM
    assert ("b12x and flashinfer-python hold 1 same-named file(s) with other bytes "
            "(b12x/__init__.py); pip's last copies stay; pin or ask for the one to keep") in \
        capsys.readouterr().err


def test_the_asked_wheel_missing_from_the_wheelhouse_is_a_bake_error(
        site: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BakeError, match=r"the wheel of b12x-1\.5\.1 is not in"):
        venv._settle_shared_files(site, [empty], {"b12x"}, console=plain_console())


def test_the_same_bytes_in_two_distributions_are_no_conflict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    installed(site, "one", "1.0", {"build_backend.py": b"same\n", "one/__init__.py": b""})
    installed(site, "two", "1.0", {"build_backend.py": b"same\n", "two/__init__.py": b""})
    venv._settle_shared_files(site, [], set(), console=plain_console())
    assert capsys.readouterr().err == ""
