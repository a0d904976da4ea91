"""The real vLLM path without a Spark: the production series built around the kernels of
vLLM's own x86_64 release wheel (tag vllm-reuse-sm90 of the repository's versions.yaml).

Nothing compiles. The tag is built twice from clean, wheels and image, in two work folders
at two times, and both must come out bit for bit the same. A slow module (about 20 minutes
and 25 GB of disk at its peak: a builder with torch, the runtime wheelhouse of about 4 GB
and an image of about 10 GB, written twice); the images are not loaded into the engine.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbake import config, docker_api, oci, pipeline, verify, wheels
from sparkbake import plan as plan_mod
from sparkbake.errors import BuildError
from sparkbake.hashing import file_sha256

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
TAG = "vllm-reuse-sm90"
NEW_MODULE = "vllm/models/deepseek_v4/common/dcp_gather.py"  # added by the ckv-gather series
KERNEL = "vllm/_C_stable_libtorch.abi3.so"


@dataclasses.dataclass(frozen=True)
class Build:
    folder: Path  # wheels/<wheels key>
    report: dict[str, Any]  # its wheels.json
    image: oci.Descriptor  # the image's manifest
    layout: Path


@pytest.fixture(scope="module")
def builds(docker_client: docker_api.Client,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Build]]:
    """The tag built twice, each from an empty build/ and wheels/; removed afterwards."""
    loaded = config.load(REPO / "versions.yaml")
    done, works = [], []
    for name in ("first", "second"):
        work = tmp_path_factory.mktemp(name)
        works.append(work)
        scratch = dataclasses.replace(loaded, work=work)
        baked = pipeline.rebuild(scratch, scratch.tag(TAG))
        plan = plan_mod.make(scratch, scratch.tag(TAG))
        folder = work / "wheels" / plan.wheels_key
        shutil.rmtree(work / "wheels" / "runtime")  # 4 GB each: checked by hash, not needed
        done.append(Build(folder, json.loads((folder / wheels.REPORT).read_text()),
                          baked.image, baked.layout))
    yield done
    for work in works:
        shutil.rmtree(work, ignore_errors=True)


def test_two_clean_builds_give_the_same_image(builds: list[Build]) -> None:
    first, second = builds
    assert first.layout != second.layout
    report = verify.compare(verify.Side(oci.Layout(first.layout), first.image),
                            verify.Side(oci.Layout(second.layout), second.image))
    assert report["equal"], json.dumps(report, indent=2)[:4000]
    assert first.image.digest == second.image.digest


def the_wheel(folder: Path, report: dict[str, Any]) -> Path:
    (wheel,) = report["wheels"]
    return folder / str(wheel["file"])


def test_two_clean_builds_give_the_same_wheel(builds: list[Build]) -> None:
    first, second = builds
    assert file_sha256(the_wheel(first.folder, first.report)) == \
        file_sha256(the_wheel(second.folder, second.report))


def test_no_compiler_ran_and_the_kernels_are_the_release_wheels(builds: list[Build]) -> None:
    folder, report = builds[0].folder, builds[0].report
    assert report["kernels"]["reused"] is True
    assert report["compile_cache"]["stats"]["compile_requests"] == 0  # sccache saw no compile
    seed = config.load(REPO / "versions.yaml").tag(TAG).kernels
    assert seed is not None
    (release,) = (folder.parent / "kernels").glob(f"*/{seed.wheel}")
    assert file_sha256(release) == seed.sha256
    with zipfile.ZipFile(release) as published, \
            zipfile.ZipFile(the_wheel(folder, report)) as built:
        assert built.read(KERNEL) == published.read(KERNEL)


def test_the_wheel_carries_the_patched_python(builds: list[Build]) -> None:
    folder, report = builds[0].folder, builds[0].report
    loaded = config.load(REPO / "versions.yaml")
    plan = plan_mod.make(loaded, loaded.tag(TAG))
    tree = folder.parents[1] / "build" / "patched" / plan.patch_key / "tree"
    with zipfile.ZipFile(the_wheel(folder, report)) as built:
        assert built.read(NEW_MODULE) == (tree / NEW_MODULE).read_bytes()
        assert b"VLLM_DSV4_DCP_PREFIX_CACHE" in built.read("vllm/envs.py")


def test_the_arch_check_names_a_release_library_without_hopper_code(
        builds: list[Build]) -> None:
    report = builds[0].report
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
