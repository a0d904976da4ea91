"""The builder's cmake wrapper and sources script, with this host's real cmake and git: a
project that runs CMake with its own toolchain file and no CMAKE_ARGS configures offline with
two FetchContent dependencies (one with SOURCE_SUBDIR) from local folders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbake import resources
from tests.image_scripts import load

UNREACHABLE = "git://127.0.0.1:9"  # nothing listens: a download fails at once
PROJECT = f"""\
cmake_minimum_required(VERSION 3.24)
project(selfdriven LANGUAGES NONE)
include(FetchContent)
FetchContent_Declare(tinydep GIT_REPOSITORY {UNREACHABLE}/tinydep.git GIT_TAG main)
FetchContent_Declare(tinyconf GIT_REPOSITORY {UNREACHABLE}/tinyconf.git GIT_TAG v1.0
                     SOURCE_SUBDIR cmake)
FetchContent_MakeAvailable(tinydep tinyconf)
get_property(conf GLOBAL PROPERTY TINYCONF_VALUE)
message(STATUS "result: dep=${{tinydep_SOURCE_DIR}} conf=${{conf}} scale=${{OWN_SCALE}}")
"""


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A project, its own toolchain file, the two dependencies' folders and the wrapper as
    `cmake` first on PATH (run by this Python: the builder's is not here)."""
    assert shutil.which("cmake") and shutil.which("git"), "needs cmake >= 3.24 and git"
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "CMakeLists.txt").write_text(PROJECT)
    (tmp_path / "project" / "own.cmake").write_text("set(OWN_SCALE 3)\n")
    (tmp_path / "tinydep").mkdir()
    (tmp_path / "tinydep" / "tinydep.h").write_text("#define TINYDEP_VALUE 4242\n")
    (tmp_path / "tinyconf" / "cmake").mkdir(parents=True)
    (tmp_path / "tinyconf" / "cmake" / "CMakeLists.txt").write_text(
        "set_property(GLOBAL PROPERTY TINYCONF_VALUE 77)\n")
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "cmake"
    text = resources.path("cmake_wrapper.py").read_text()
    wrapper.write_text(f"#!{sys.executable} -I\n" + text.split("\n", 1)[1])
    wrapper.chmod(0o755)
    return {"root": tmp_path, "project": tmp_path / "project", "bin": tmp_path / "bin"}


def sources_script(layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """What build_wheels.py writes for the lock's two folders, and the environment it sets."""
    root = layout["root"]
    for name in ("SPARKBAKE_SOURCES_CMAKE", "CMAKE_TOOLCHAIN_FILE"):
        monkeypatch.delenv(name, raising=False)
    script = root / "sources.cmake"
    load("build_wheels").write_sources_cmake(
        {"tinydep": str(root / "tinydep"), "tinyconf": str(root / "tinyconf")}, script)
    return script


def configure(layout: dict[str, Path], *args: str, program: str = "cmake",
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = f"{layout['bin']}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(
        [program, "-S", str(layout["project"]), "-B", str(layout["root"] / "out"), *args],
        capture_output=True, text=True, check=False,
        env={**os.environ, "PATH": path, **(env or {})})


def test_the_script_holds_the_locks_folders_and_names_itself_to_cmake(
        layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    script = sources_script(layout, monkeypatch)
    root = layout["root"]
    assert script.read_text().splitlines() == [
        'set(FETCHCONTENT_FULLY_DISCONNECTED ON CACHE BOOL '
        '"sparkbake: third-party sources come from the sources lock")',
        f'set(FETCHCONTENT_SOURCE_DIR_TINYCONF "{root}/tinyconf" CACHE PATH '
        '"sparkbake: tinyconf from the sources lock")',
        f'set(FETCHCONTENT_SOURCE_DIR_TINYDEP "{root}/tinydep" CACHE PATH '
        '"sparkbake: tinydep from the sources lock")']
    assert os.environ["SPARKBAKE_SOURCES_CMAKE"] == str(script)
    assert os.environ["CMAKE_TOOLCHAIN_FILE"] == str(script)


def test_a_configure_with_its_own_toolchain_and_no_cmake_args_gets_the_locked_sources(
        layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    script = sources_script(layout, monkeypatch)
    own = f"-DCMAKE_TOOLCHAIN_FILE={layout['project'] / 'own.cmake'}"
    done = configure(layout, own)
    assert done.returncode == 0, done.stdout + done.stderr
    root = layout["root"]
    assert f"result: dep={root}/tinydep conf=77 scale=3" in done.stdout
    assert f"sparkbake cmake: the sources lock pre-loaded (-C {script})" in done.stderr


def test_without_the_wrapper_the_same_configure_tries_to_download(
        layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    sources_script(layout, monkeypatch)
    own = f"-DCMAKE_TOOLCHAIN_FILE={layout['project'] / 'own.cmake'}"
    real = shutil.which("cmake")
    assert real is not None
    done = configure(layout, own, program=real)  # its own toolchain: the environment's loses
    assert done.returncode != 0
    assert "tinydep-populate" in done.stdout + done.stderr


def test_a_cmake_run_by_its_full_path_reads_the_script_as_the_toolchain_file(
        layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    sources_script(layout, monkeypatch)
    real = shutil.which("cmake")
    assert real is not None
    done = configure(layout, program=real)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"dep={layout['root']}/tinydep conf=77 scale=" in done.stdout


def test_other_modes_go_to_cmake_unchanged(layout: dict[str, Path],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    sources_script(layout, monkeypatch)
    done = subprocess.run(["cmake", "-E", "echo", "plain"], capture_output=True, text=True,
                          check=True, env={**os.environ, "PATH": f"{layout['bin']}{os.pathsep}"
                                           f"{os.environ['PATH']}"})
    assert (done.stdout, done.stderr) == ("plain\n", "")
