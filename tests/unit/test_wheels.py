"""Pure logic of the wheels stage: which SASS loads, how many jobs, which patches are kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.config.settings import Settings
from sparkbake.errors import BuildError
from sparkbake.wheels import container_build
from tests.conftest import settings_of

GIB = 2**30


@pytest.mark.parametrize(("sass", "target", "loads"), [
    ("sm_121a", "sm_121a", True),
    ("sm_121", "sm_121a", True),
    ("sm_120f", "sm_121a", True),
    ("sm_120", "sm_121a", True),
    ("sm_120a", "sm_121a", False),  # arch-specific to 12.0
    ("sm_122", "sm_121a", False),  # a newer minor
    ("sm_90a", "sm_121a", False),
    ("sm_100f", "sm_121a", False),
    ("sm_90", "sm_90a", True),
    ("compute_121a", "sm_121a", False),  # PTX is not SASS
])
def test_loadable_sass_for_a_target(sass: str, target: str, loads: bool) -> None:
    assert container_build.loadable(sass, target) is loads


def settings(**environ: str) -> Settings:
    return settings_of(PIP_INDEX_URL="x", **environ)


def test_jobs_follow_memory_not_cores() -> None:
    jobs = container_build.compile_jobs({"MemTotal": 121 * GIB, "NCPU": 20}, settings())
    assert jobs.max_jobs == 20  # 121 GiB / 6 GiB = 20, capped by 20 cores
    jobs = container_build.compile_jobs({"MemTotal": 24 * GIB, "NCPU": 20}, settings())
    assert jobs.max_jobs == 4
    assert jobs.reason == "24 GiB / 6 GiB per job, 20 CPUs"


def test_jobs_never_drop_below_one_and_honour_overrides() -> None:
    assert container_build.compile_jobs({"MemTotal": 2 * GIB, "NCPU": 8}, settings()).max_jobs == 1
    assert container_build.compile_jobs({"MemTotal": 24 * GIB, "NCPU": 8},
                                   settings(SPARKBAKE_GIB_PER_JOB="2")).max_jobs == 8
    fixed = container_build.compile_jobs({"MemTotal": 24 * GIB, "NCPU": 8},
                                         settings(SPARKBAKE_MAX_JOBS="3"))
    assert (fixed.max_jobs, fixed.reason) == (3, "SPARKBAKE_MAX_JOBS")


def test_a_builder_memory_limit_bounds_the_jobs() -> None:
    jobs = container_build.compile_jobs({"MemTotal": 120 * GIB, "NCPU": 20},
                                   settings(SPARKBAKE_BUILDER_MEMORY="12g"))
    assert jobs.max_jobs == 2


def test_a_bad_builder_memory_is_refused() -> None:
    with pytest.raises(BuildError, match="is not a size like 96g"):
        container_build.compile_jobs({"MemTotal": GIB, "NCPU": 1},
                                     settings(SPARKBAKE_BUILDER_MEMORY="lots"))


def write_patch(path: Path, *files: str) -> Path:
    body = "".join(f"diff --git a/{f} b/{f}\n--- a/{f}\n+++ b/{f}\n@@ -1 +1 @@\n-a\n+b\n"
                   for f in files)
    path.write_text("Subject: [PATCH] x\n\nwhy\n---\n" + body)
    return path


@pytest.mark.parametrize(("files", "kernel"), [
    (("vllm/engine.py",), False),
    (("csrc/attention/kernel.cu",), True),
    (("vllm/x.py", "CMakeLists.txt"), True),
    (("cmake/utils.cmake",), True),
    (("setup.py",), True),
    (("requirements/cuda.txt",), True),
    (("requirements/test.txt",), False),
    (("docs/csrc/readme.md",), False),
])
def test_which_patches_touch_kernels(tmp_path: Path, files: tuple[str, ...],
                                     kernel: bool) -> None:
    patch = write_patch(tmp_path / "p.patch", *files)
    assert planning.touched_paths(patch) == set(files)
    assert planning.touches_kernels(patch) is kernel
