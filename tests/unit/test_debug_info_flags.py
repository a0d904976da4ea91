"""The flags that make `-g` objects the same on a compile farm server and here: build_wheels.py
puts -gno-column-info -ftrack-macro-expansion=0 in CFLAGS and CXXFLAGS (a real CMake
RelWithDebInfo build compiles with them), and the nvcc wrapper gives nvcc's host compiler the
same and sccache's step folder one fixed name in the debug info."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from sparkbake import resources


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, resources.path(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nvcc_wrapper = load("nvcc_wrapper")


def test_the_build_adds_no_column_info_to_the_flags_it_is_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXXFLAGS", "-O3 -march=native")
    monkeypatch.delenv("CFLAGS", raising=False)
    load("build_wheels").reproducible_debug_info()
    flags = "-gno-column-info -ftrack-macro-expansion=0"
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
        *steps, "-Xcompiler=-gno-column-info,-ftrack-macro-expansion=0"]
    compile_only = ["-g", "-c", "k.cu", "-o", "k.o"]
    assert nvcc_wrapper.reproducible_debug_info(compile_only) == [
        *compile_only, "-Xcompiler=-gno-column-info,-ftrack-macro-expansion=0"]
    assert nvcc_wrapper.reproducible_debug_info(["--version"]) == ["--version"]


def test_runs_that_compile_nothing_go_to_nvcc_unchanged() -> None:
    for args in ([], ["--version"], ["-V"], ["--help"]):
        assert nvcc_wrapper.reproducible_debug_info(args) == args
