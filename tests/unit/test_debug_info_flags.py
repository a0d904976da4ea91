"""The flags that make `-g` objects the same on a compile farm server and here: build_wheels.py
puts -gno-column-info -ftrack-macro-expansion=0 -no-integrated-cpp in CFLAGS and CXXFLAGS (a
real CMake RelWithDebInfo build compiles with them), and the nvcc wrapper gives nvcc's host
compiler the same, and sccache's step folder a link of a fixed name, which the debug info
names."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.image_scripts import load

nvcc_wrapper = load("nvcc_wrapper")


def test_the_build_adds_no_column_info_to_the_flags_it_is_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXXFLAGS", "-O3 -march=native")
    monkeypatch.delenv("CFLAGS", raising=False)
    load("build_wheels").reproducible_debug_info()
    flags = "-gno-column-info -ftrack-macro-expansion=0 -no-integrated-cpp"
    assert os.environ["CXXFLAGS"] == f"-O3 -march=native {flags}"
    assert os.environ["CFLAGS"] == flags


def columns_in_debug_info(tmp_path: Path, env: dict[str, str]) -> bool:
    """Whether a CMake RelWithDebInfo build, configured fresh in env, writes column info."""
    (tmp_path / "src").mkdir(parents=True)
    (tmp_path / "src" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(unit LANGUAGES CXX)\n"
        "add_library(unit OBJECT unit.cpp)\n")
    (tmp_path / "src" / "unit.cpp").write_text("int twice(int x) { return 2 * x; }\n")
    for step in (["-S", str(tmp_path / "src"), "-B", str(tmp_path / "out"),
                  "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], ["--build", str(tmp_path / "out")]):
        subprocess.run(["cmake", *step], env=env, check=True, capture_output=True)
    unit = next((tmp_path / "out").rglob("unit.cpp.o"))
    info = subprocess.run(["readelf", "--debug-dump=info", str(unit)], check=True,
                          capture_output=True, text=True).stdout
    assert "DW_AT_decl_line" in info, "no debug info: not a -g build"
    return "DW_AT_decl_column" in info


def test_a_cmake_build_with_debug_info_compiles_without_columns_in_the_builds_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert shutil.which("cmake") and shutil.which("g++") and shutil.which("readelf")
    for name in ("CFLAGS", "CXXFLAGS"):
        monkeypatch.delenv(name, raising=False)
    assert columns_in_debug_info(tmp_path / "plain", dict(os.environ))
    load("build_wheels").reproducible_debug_info()
    assert not columns_in_debug_info(tmp_path / "builder", dict(os.environ))


def test_every_nvcc_run_gets_no_column_info_and_its_arguments_stay_the_same_otherwise() -> None:
    # sccache's step folder stays unmapped: a random name in the host step's arguments would
    # be in sccache's key, and the step would never hit the cache again
    steps = ["-x", "cu", "-g", "-c", "k.cu", "--keep-dir", "/tmp/sccache_nvccAb12Cd",
             "--dryrun", "--keep"]
    assert nvcc_wrapper.reproducible_debug_info(steps) == [
        *steps, "-Xcompiler=-gno-column-info,-ftrack-macro-expansion=0,-no-integrated-cpp"]
    compile_only = ["-g", "-c", "k.cu", "-o", "k.o"]
    assert nvcc_wrapper.reproducible_debug_info(compile_only) == [
        *compile_only, "-Xcompiler=-gno-column-info,-ftrack-macro-expansion=0,-no-integrated-cpp"]
    assert nvcc_wrapper.reproducible_debug_info(["--version"]) == ["--version"]


def test_runs_that_compile_nothing_go_to_nvcc_unchanged() -> None:
    for args in ([], ["--version"], ["-V"], ["--help"]):
        assert nvcc_wrapper.reproducible_debug_info(args) == args


def dryrun(step: Path, output: str = "CMakeFiles/k.dir/k.cu.o") -> list[str]:
    """The arguments of sccache's second `nvcc --dryrun` of a unit, its step folder given."""
    return ["-g", "-c", "k.cu", "-o", output, "--dryrun", "--keep", "--keep-dir", str(step)]


def test_sccaches_step_folder_becomes_a_link_of_a_fixed_name_no_longer_than_its_own(
        tmp_path: Path) -> None:
    # gcc names a folder's real path where it is shorter than the path given (the includes of
    # nvcc's host file would name the random folder again): the link must not be longer
    first, second = tmp_path / "sccache_nvccAb12Cd", tmp_path / "sccache_nvccZz98Yx"
    first.mkdir()
    second.mkdir()
    args = nvcc_wrapper.fixed_step_folder(dryrun(first), Path("/build/src"))
    link = Path(args[-1])
    assert args[:-1] == dryrun(first)[:-1]
    assert link.parent == tmp_path and link.name.startswith("nvcc-")
    assert len(link.name) == len(first.name) and link.readlink() == first
    # the same unit in another run of sccache: the same name, now pointing at its folder
    assert nvcc_wrapper.fixed_step_folder(dryrun(second), Path("/build/src"))[-1] == str(link)
    assert link.readlink() == second
    # another unit, or the same output in another build folder: another name
    assert nvcc_wrapper.fixed_step_folder(dryrun(second, "k2.o"), Path("/build/src"))[-1] \
        != str(link)
    assert nvcc_wrapper.fixed_step_folder(dryrun(second), Path("/elsewhere"))[-1] != str(link)


def test_links_whose_compile_is_done_are_removed_and_nothing_else(tmp_path: Path) -> None:
    done, running = tmp_path / "sccache_nvccAb12Cd", tmp_path / "sccache_nvccZz98Yx"
    done.mkdir()
    running.mkdir()
    old = Path(nvcc_wrapper.fixed_step_folder(dryrun(done, "a.o"), Path("/b"))[-1])
    (tmp_path / "nvcc-a-file").write_text("not ours")
    done.rmdir()  # sccache removes its step folder when the unit is compiled
    new = Path(nvcc_wrapper.fixed_step_folder(dryrun(running, "b.o"), Path("/b"))[-1])
    assert not old.is_symlink() and new.readlink() == running
    assert (tmp_path / "nvcc-a-file").read_text() == "not ours"


def test_other_nvcc_runs_keep_their_folders(tmp_path: Path) -> None:
    mine = tmp_path / "kept"
    mine.mkdir()
    for args in (dryrun(mine), ["-c", "k.cu", "--keep-dir", str(tmp_path / "sccache_nvccAb12Cd")],
                 ["--dryrun", "-c", "k.cu"]):
        assert nvcc_wrapper.fixed_step_folder(args, Path("/b")) == args
    # a folder of the link's name in the way: sccache's own folder, as without the wrapper
    step = tmp_path / "sccache_nvccAb12Cd"
    step.mkdir()
    name = Path(nvcc_wrapper.fixed_step_folder(dryrun(step), Path("/b"))[-1]).name
    (tmp_path / name).unlink()
    (tmp_path / name).mkdir()
    (tmp_path / name / "file").write_text("")
    assert nvcc_wrapper.fixed_step_folder(dryrun(step), Path("/b")) == dryrun(step)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["kept", step.name, name])
