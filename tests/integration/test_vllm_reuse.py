"""The real vLLM path without a Spark: the production series built around the kernels of
vLLM's own x86_64 release wheel (tag vllm-reuse-sm90 of the repository's versions.yaml).

Nothing compiles; the wheel is built twice from clean, in two work folders, and must come
out byte-identical. Costs a builder with torch (about 4 GB of downloads, once per engine).
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sparkbake import config, docker_api, pipeline, wheels
from sparkbake import plan as plan_mod
from sparkbake.errors import BuildError
from sparkbake.hashing import file_sha256

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
TAG = "vllm-reuse-sm90"
NEW_MODULE = "vllm/models/deepseek_v4/common/dcp_gather.py"  # added by the ckv-gather series
KERNEL = "vllm/_C_stable_libtorch.abi3.so"


@pytest.fixture(scope="module")
def builds(docker_client: docker_api.Client,
           tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, dict[str, Any]]]:
    """The tag's wheels stage run twice, each from an empty build/ and wheels/."""
    loaded = config.load(REPO / "versions.yaml")
    done = []
    for name in ("first", "second"):
        work = tmp_path_factory.mktemp(name)
        scratch = dataclasses.replace(loaded, work=work)
        assert pipeline.run_until(scratch, scratch.tag(TAG), stage="wheels") == 0
        plan = plan_mod.make(scratch, scratch.tag(TAG))
        folder = work / "wheels" / plan.wheels_key
        done.append((folder, json.loads((folder / wheels.REPORT).read_text())))
    return done


def the_wheel(folder: Path, report: dict[str, Any]) -> Path:
    (wheel,) = report["wheels"]
    return folder / str(wheel["file"])


def test_two_clean_builds_give_the_same_wheel(
        builds: list[tuple[Path, dict[str, Any]]]) -> None:
    (first, report), (second, again) = builds
    assert first != second
    assert file_sha256(the_wheel(first, report)) == file_sha256(the_wheel(second, again))
    assert report["wheels"][0]["sha256"] == again["wheels"][0]["sha256"]


def test_no_compiler_ran_and_the_kernels_are_the_release_wheels(
        builds: list[tuple[Path, dict[str, Any]]]) -> None:
    folder, report = builds[0]
    assert report["kernels"]["reused"] is True
    assert report["compile_cache"]["stats"]["compile_requests"] == 0  # sccache saw no compile
    seed = config.load(REPO / "versions.yaml").tag(TAG).kernels
    assert seed is not None
    (release,) = (folder.parent / "kernels").glob(f"*/{seed.wheel}")
    assert file_sha256(release) == seed.sha256
    with zipfile.ZipFile(release) as published, \
            zipfile.ZipFile(the_wheel(folder, report)) as built:
        assert built.read(KERNEL) == published.read(KERNEL)


def test_the_wheel_carries_the_patched_python(
        builds: list[tuple[Path, dict[str, Any]]]) -> None:
    folder, report = builds[0]
    loaded = config.load(REPO / "versions.yaml")
    plan = plan_mod.make(loaded, loaded.tag(TAG))
    tree = folder.parents[1] / "build" / "patched" / plan.patch_key / "tree"
    with zipfile.ZipFile(the_wheel(folder, report)) as built:
        assert built.read(NEW_MODULE) == (tree / NEW_MODULE).read_bytes()
        assert b"VLLM_DSV4_DCP_PREFIX_CACHE" in built.read("vllm/envs.py")


def test_the_arch_check_names_a_release_library_without_hopper_code(
        builds: list[tuple[Path, dict[str, Any]]]) -> None:
    _, report = builds[0]
    sass = {k["path"]: k["sass"] for k in report["wheels"][0]["kernels"]}
    assert "sm_90a" in sass["vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"]
    tag = config.load(REPO / "versions.yaml").tag(TAG)
    assert tag.kernels is not None
    undeclared = dataclasses.replace(tag, kernels=dataclasses.replace(
        tag.kernels, other_arch=tuple(p for p in tag.kernels.other_arch
                                      if "deepselect" not in p)))
    with pytest.raises(BuildError, match=r"vllm/_deepselect_C\.abi3\.so has no SASS a sm_90a "
                                         r"device loads \(has: sm_100\)"):
        wheels.check_sass(undeclared, report)
