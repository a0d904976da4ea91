"""The real vLLM images are reproducible: the production series around the kernels of vLLM's
own release wheels, for x86_64 (vllm-reuse-sm90) and for the Spark (arm64,
production-3.73-vision-seeded), each built twice from clean, wheels and image, in two work
folders at two times, must come out bit for bit the same.

Nothing compiles. A slow module, run by `nox -s repro-vllm`, not by `nox -s tests` (CI builds
the arm64 tag once, in test_production_arm64.py): about 10 minutes and 25 GB of disk per
tag (the runtime wheelhouse of about 4 GB and an image of about 10 GB, written twice); the
images are not loaded into the engine.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.errors import BuildError
from sparkbake.hashing import file_sha256
from sparkbake.oci import docker_engine, image_layout
from sparkbake.pipeline import commands, verify
from sparkbake.run import Run
from sparkbake.wheels import container_build
from sparkbake.wheels.report import WheelsReport, read_report
from tests.conftest import plain_console

pytestmark = [pytest.mark.docker, pytest.mark.required("repro-vllm")]

REPO = Path(__file__).resolve().parents[2]
NEW_MODULE = "vllm/models/deepseek_v4/common/dcp_gather.py"  # added by the ckv-gather series
KERNEL = "vllm/_C_stable_libtorch.abi3.so"


@dataclasses.dataclass(frozen=True)
class Build:
    folder: Path  # wheels/<wheels key>
    report: WheelsReport  # its wheels.json
    image: image_layout.Descriptor  # the image's manifest
    layout: Path


@pytest.fixture(scope="module", params=["vllm-reuse-sm90", "production-3.73-vision-seeded"])
def tag_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def builds(docker_client: docker_engine.Client, tag_name: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Build]]:
    """The tag built twice, each from an empty build/ and wheels/; removed afterwards."""
    loaded = versions.load(REPO / "versions.yaml")
    done, works = [], []
    for name in ("first", "second"):
        work = tmp_path_factory.mktemp(name)
        works.append(work)
        scratch = dataclasses.replace(loaded, work=work)
        baked = commands.rebuild(Run.of(scratch, Settings.of_process(), plain_console()),
                                 scratch.tag(tag_name))
        plan = planning.make(scratch, scratch.tag(tag_name))
        folder = work / "wheels" / plan.wheels_key
        shutil.rmtree(work / "wheels" / "runtime")  # 4 GB each: checked by hash, not needed
        done.append(Build(folder, read_report(folder), baked.image, baked.layout))
    yield done
    for work in works:
        shutil.rmtree(work, ignore_errors=True)


def test_two_clean_builds_give_the_same_image(builds: list[Build]) -> None:
    first, second = builds
    assert first.layout != second.layout
    report = verify.compare(verify.Side(image_layout.Layout(first.layout, console=plain_console()),
                                        first.image),
                            verify.Side(image_layout.Layout(second.layout,
                                                            console=plain_console()), second.image))
    assert report.equal, json.dumps(verify.report_json(report), indent=2)[:4000]
    assert first.image.digest == second.image.digest


def the_wheel(folder: Path, report: WheelsReport) -> Path:
    (wheel,) = report.wheels
    return folder / wheel.file


def test_two_clean_builds_give_the_same_wheel(builds: list[Build]) -> None:
    first, second = builds
    assert file_sha256(the_wheel(first.folder, first.report)) == \
        file_sha256(the_wheel(second.folder, second.report))


def test_no_compiler_ran_and_the_kernels_are_the_release_wheels(builds: list[Build],
                                                                 tag_name: str) -> None:
    folder, report = builds[0].folder, builds[0].report
    assert report.kernels is not None and report.kernels.reused is True
    seed = versions.load(REPO / "versions.yaml").tag(tag_name).kernels
    assert seed is not None
    assert report.nvcc == f"none: kernels from {seed.wheel}"  # no builder, no compiler
    (release,) = (folder.parent / "kernels").glob(f"*/{seed.wheel}")
    assert file_sha256(release) == seed.sha256
    with zipfile.ZipFile(release) as published, \
            zipfile.ZipFile(the_wheel(folder, report)) as built:
        assert built.read(KERNEL) == published.read(KERNEL)


def test_the_wheel_carries_the_patched_python(builds: list[Build], tag_name: str) -> None:
    folder, report = builds[0].folder, builds[0].report
    loaded = versions.load(REPO / "versions.yaml")
    plan = planning.make(loaded, loaded.tag(tag_name))
    tree = folder.parents[1] / "build" / "patched" / plan.patch_key / "tree"
    with zipfile.ZipFile(the_wheel(folder, report)) as built:
        assert built.read(NEW_MODULE) == (tree / NEW_MODULE).read_bytes()
        assert b"VLLM_DSV4_DCP_PREFIX_CACHE" in built.read("vllm/envs.py")


def test_the_arch_check_names_a_release_library_without_code_for_the_arch(
        builds: list[Build], tag_name: str) -> None:
    report = builds[0].report
    sass = {k.path: k.sass for k in report.wheels[0].kernels}
    assert "sm_90a" in sass["vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"]
    tag = versions.load(REPO / "versions.yaml").tag(tag_name)
    assert tag.kernels is not None
    undeclared = dataclasses.replace(tag, kernels=dataclasses.replace(
        tag.kernels, other_arch=tuple(p for p in tag.kernels.other_arch
                                      if "deepselect" not in p)))
    with pytest.raises(BuildError, match=r"vllm/_deepselect_C\.abi3\.so has no SASS a "
                                         rf"{tag.sm_arch} device loads \(has: sm_100\)"):
        container_build.check_sass(undeclared, report, console=plain_console())
