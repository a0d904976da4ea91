"""Kernel seeds: the wheel made from a seed and the series' changes, without a compiler."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from sparkbake import kernelseed
from sparkbake.config import KernelSeed
from sparkbake.errors import BuildError
from tests.conftest import Project

LIBRARY = b"\x7fELF compiled code, never rebuilt"
SEED = "pkg-1.0-cp38-abi3-manylinux_2_28_aarch64.whl"


def make_seed(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("pkg/__init__.py", "VERSION = 1\n")
        wheel.writestr("pkg/old.py", "gone = True\n")
        wheel.writestr("pkg/_C.abi3.so", LIBRARY)
        wheel.writestr("pkg-1.0.dist-info/METADATA", "Name: pkg\nVersion: 1.0\n")
        wheel.writestr("pkg-1.0.dist-info/RECORD", "stale\n")


def make_trees(root: Path) -> tuple[Path, Path]:
    pristine, patched = root / "pristine", root / "patched"
    for tree in (pristine, patched):
        (tree / "pkg").mkdir(parents=True)
        (tree / "tests").mkdir()
        (tree / "pkg" / "old.py").write_text("gone = True\n")
        (tree / "tests" / "test_pkg.py").write_text("def test(): pass\n")
    (pristine / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (patched / "pkg" / "__init__.py").write_text("VERSION = 2  # patched\n")
    (patched / "pkg" / "new.py").write_text("added = True\n")
    (patched / "pkg" / "old.py").unlink()
    (patched / "tests" / "test_pkg.py").write_text("def test(): assert True\n")
    return pristine, patched


def test_the_series_changes_reach_the_wheel_and_the_kernels_stay(tmp_path: Path) -> None:
    make_seed(tmp_path / SEED)
    pristine, patched = make_trees(tmp_path)
    out = tmp_path / "out.whl"
    changed = kernelseed.overlay(tmp_path / SEED, pristine, patched, out, 1735689600)
    assert changed == ["pkg/__init__.py", "pkg/new.py", "pkg/old.py"]  # not tests/
    with zipfile.ZipFile(out) as wheel:
        names = wheel.namelist()
        assert wheel.read("pkg/__init__.py") == b"VERSION = 2  # patched\n"
        assert wheel.read("pkg/new.py") == b"added = True\n"
        assert wheel.read("pkg/_C.abi3.so") == LIBRARY
        assert "pkg/old.py" not in names
        assert names[-1] == "pkg-1.0.dist-info/RECORD"
        assert {info.date_time for info in wheel.infolist()} == {(2025, 1, 1, 0, 0, 0)}
        record = wheel.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
    digest = base64.urlsafe_b64encode(hashlib.sha256(LIBRARY).digest()).rstrip(b"=").decode()
    assert f"pkg/_C.abi3.so,sha256={digest},{len(LIBRARY)}" in record
    assert record[-1] == "pkg-1.0.dist-info/RECORD,,"


def test_the_wheel_is_the_same_bytes_every_time(tmp_path: Path) -> None:
    make_seed(tmp_path / SEED)
    pristine, patched = make_trees(tmp_path)
    for name in ("a.whl", "b.whl"):
        kernelseed.overlay(tmp_path / SEED, pristine, patched, tmp_path / name, 1735689600)
    assert (tmp_path / "a.whl").read_bytes() == (tmp_path / "b.whl").read_bytes()


def seeded_entry(root: Path, sass: list[str]) -> Path:
    entry = root / "kernels" / "k"
    entry.mkdir(parents=True)
    make_seed(entry / SEED)
    (entry / kernelseed.KERNELS_FILE).write_text(json.dumps({
        "wheel": SEED, "kernels": [{"path": "pkg/_C.abi3.so", "sha256": "0" * 64,
                                    "sass": sass}]}))
    return entry


def test_a_seed_with_family_code_for_the_arch_is_taken_and_said_so(
        tmp_path: Path, project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    tag = dataclasses.replace(project.config().tag("fixture"),
                              kernels=KernelSeed(wheel=SEED, sha256="0" * 64))
    pristine, patched = make_trees(tmp_path)
    built = kernelseed.build_wheels(tag, seeded_entry(tmp_path, ["sm_120", "sm_90"]), pristine,
                                    patched, tmp_path / "wheels" / "w", 1735689600)
    assert built.report["kernels"]["seed"] == SEED
    assert "pkg/_C.abi3.so: no sm_121a SASS; taking sm_120" in capsys.readouterr().err


def test_a_seed_without_code_for_the_arch_is_exit_4_naming_the_library(
        tmp_path: Path, project: Project) -> None:
    tag = dataclasses.replace(project.config().tag("fixture"),
                              kernels=KernelSeed(wheel=SEED, sha256="0" * 64))
    pristine, patched = make_trees(tmp_path)
    with pytest.raises(BuildError) as caught:
        kernelseed.build_wheels(tag, seeded_entry(tmp_path, ["sm_90a", "sm_100"]), pristine,
                                patched, tmp_path / "wheels" / "w", 1735689600)
    assert caught.value.exit_code == 4
    assert caught.value.message == (f"{SEED}: pkg/_C.abi3.so has no SASS a sm_121a device "
                                    "loads (has: sm_90a, sm_100)")
    assert not (tmp_path / "wheels" / "w").exists()  # no cache entry
