"""A build's download of a locked source, found in its output with CMake's own words, and
why the lock did not reach it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sparkbake import resources
from sparkbake.fetch import download_attempts, thirdparty
from tests.unit.test_cmake_sources import locked

CUTLASS = thirdparty.Fetched(locked("cutlass"), Path("/c/1/tree"))
DEEPGEMM = thirdparty.Fetched(locked("deepgemm", form="populate", env=("DEEPGEMM_SRC_DIR",),
                                     url="https://github.com/vllm-project/DeepGEMM.git",
                                     declared="cmake/external_projects/deepgemm.cmake:54"),
                              Path("/c/2/tree"))
# CMake 4's words when the builder has no git (policy CMP0168 OLD: a sub-build)
NO_GIT = "CMake Error at cutlass-subbuild/cutlass-populate-prefix/tmp/cutlass-populate-" \
         "gitclone.cmake:31 (message):\n  could not find git for clone of cutlass-populate\n"


def test_a_failure_that_downloads_nothing_is_left_to_the_compile_errors() -> None:
    output = "csrc/x.cu(3): error: identifier \"y\" is undefined\n"
    assert download_attempts.explain(output, (CUTLASS, DEEPGEMM)) is None


def test_a_cmake_run_past_the_wrapper_is_named_with_its_declaration() -> None:
    explained = download_attempts.explain(NO_GIT, (CUTLASS, DEEPGEMM))
    assert explained == (
        "CMakeLists.txt:11: FetchContent cutlass (https://github.com/nvidia/cutlass.git) tried "
        "to download; the sources lock had it at /thirdparty/cutlass\n  not used: CMake ran "
        "without the builder's cmake (called by another path) and with a toolchain file of its "
        "own, which takes the place of CMAKE_TOOLCHAIN_FILE",
        "run `cmake` from PATH in the build driver, or include $ENV{SPARKBAKE_SOURCES_CMAKE} "
        "in its toolchain file (a patch)")


def test_a_populate_with_its_own_details_is_said_to_ignore_fetchcontents_variables() -> None:
    output = (f"{download_attempts.WRAPPER_MARK} (-C /build/sparkbake-sources.cmake)\n"
              "fatal: unable to access 'https://github.com/vllm-project/DeepGEMM.git': "
              "Could not resolve host\n")
    what, remedy = download_attempts.explain(output, (CUTLASS, DEEPGEMM)) or ("", "")
    assert what.startswith("cmake/external_projects/deepgemm.cmake:54: FetchContent deepgemm")
    assert what.endswith("not used: a FetchContent_Populate with its own download details "
                         "ignores FETCHCONTENT_SOURCE_DIR_*, and the upstream's own variables "
                         "(DEEPGEMM_SRC_DIR) were set")
    assert remedy.startswith("keep FetchContent's FETCHCONTENT_* variables")


def test_every_source_that_tried_is_named_and_a_declare_overridden_by_the_project() -> None:
    both = f"{download_attempts.WRAPPER_MARK}\nBuild step for deepgemm failed: 2\n" + NO_GIT
    what, _ = download_attempts.explain(both, (CUTLASS, DEEPGEMM)) or ("", "")
    first_line = what.splitlines()[0]
    assert first_line.endswith("tried to download (and deepgemm); the sources lock had it at "
                               "/thirdparty/cutlass")
    assert what.endswith("the project overrode FETCHCONTENT_FULLY_DISCONNECTED or "
                         "FETCHCONTENT_SOURCE_DIR_CUTLASS")


def test_the_mark_is_the_one_the_wrapper_prints() -> None:
    assert f'MARK = "{download_attempts.WRAPPER_MARK}"' in \
        resources.path("cmake_wrapper.py").read_text()


def test_a_name_is_matched_whole() -> None:
    other = dataclasses.replace(CUTLASS.locked, name="cut", url="https://x/cut.git")
    assert download_attempts.explain(NO_GIT, (thirdparty.Fetched(other, Path("/c")),)) is None
