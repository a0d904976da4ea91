"""The real vLLM 0.33.0 tree's CMake downloads: every one found with its pin, resolution
against a local mirror (git's url.<mirror>.insteadOf), and `lock` of a production tag
stopping with exit 8 and every unreachable server named (GitHub is not reachable here)."""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.fetch import cmake_sources, sourcelock
from tests import cpu_image
from tests.conftest import plain_console
from tests.gitdaemon import git_daemon
from tests.integration.test_sources import entries, write_config

ROOT = Path(__file__).parents[2]
FOUND = {  # name: (repository, ref as the tree pins it, its own *_SRC_DIR variables, form)
    "cutlass": ("https://github.com/nvidia/cutlass.git", "v4.7.1", "VLLM_CUTLASS_SRC_DIR"),
    "deepgemm": ("https://github.com/vllm-project/DeepGEMM.git", "0820030756945b2d",
                 "DEEPGEMM_SRC_DIR"),
    "deepselect": ("https://github.com/vllm-project/DeepSelect.git", "d96d33afe1fab0d6",
                   "DEEPSELECT_SRC_DIR"),
    "flashkda": ("https://github.com/vllm-project/FlashKDA.git", "17a037d98da546de",
                 "FLASH_KDA_SRC_DIR"),
    "flashmla": ("https://github.com/vllm-project/FlashMLA", "e2afa5fd8c220fbd",
                 "FLASH_MLA_SRC_DIR"),
    "fmha_sm100": ("https://github.com/vllm-project/MSA.git", "968061ab16cb1499",
                   "FMHA_SM100_SRC_DIR"),
    "qutlass": ("https://github.com/IST-DASLab/qutlass.git", "e74319e3405ce6d7",
                "QUTLASS_SRC_DIR"),
    "tml_fa4": ("https://github.com/vllm-project/tml-fa4.git", "75765e76a9c2c012",
                "TML_FA4_SRC_DIR"),
    "triton_kernels": ("https://github.com/triton-lang/triton.git", "v3.5.1",
                       "TRITON_KERNELS_SRC_DIR"),
    "vllm-flash-attn": ("https://github.com/vllm-project/flash-attention.git",
                        "b273a02621d3c94b", "VLLM_FLASH_ATTN_SRC_DIR"),
}


MIRROR = cpu_image.MIRROR


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned sdist's tree, fetched."""
    root = tmp_path_factory.mktemp("vllm")
    assert main(["--config", str(write_config(root)), "fetch", "vllm"]) == 0
    [key] = entries(root)
    return root / "build" / "sources" / key / "tree"


@pytest.fixture(scope="module")
def found(tree: Path) -> cmake_sources.Discovery:
    """The tree's declarations with versions.yaml's cmake_skip."""
    skip = versions.load(ROOT / "versions.yaml").upstreams["vllm-0.33.0"].cmake_skip
    return cmake_sources.discover(tree, dict(skip))


def test_the_cpu_builds_one_download_is_x86s_onednn_and_the_mirror_gives_its_commit(
        tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    skip = versions.load(ROOT / "versions.yaml").upstreams["vllm-0.33.0-cpu"].cmake_skip
    cpu = cmake_sources.discover(tree, dict(skip))
    assert [(d.name, d.url, d.ref, d.where) for d in cpu.declarations] == [
        ("oneDNN", "https://github.com/oneapi-src/oneDNN.git", "v3.13",
         "cmake/cpu_extension.cmake:382")]
    assert len(cpu.left_out) == 12  # CUTLASS, the nine external projects, aarch64's two
    committed = (ROOT / "locks" / "sources" / "vllm-0.33.0-cpu.json").read_text()
    with git_daemon(tmp_path) as mirror:
        owner = mirror.base / "oneapi-src"
        owner.mkdir()
        with tarfile.open(MIRROR) as archive:
            archive.extractall(owner, filter="data")
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{mirror.url('')}.insteadOf")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")
        commit, moving = sourcelock.resolve_ref(cpu.declarations[0], console=plain_console())
    assert (commit, moving) == ("0e2a5bfeef1bfbffc3137464606540233086ce9b", True)
    assert f'"pin": "{commit}"' in committed


def test_every_download_of_the_cuda_build_is_found_with_its_pin(
        found: cmake_sources.Discovery) -> None:
    assert {d.name: (d.url, d.ref[:16], *d.env) for d in found.declarations} == FOUND
    assert all(d.kind == "git" and d.written for d in found.declarations)
    pinned = {d.name for d in found.declarations if sourcelock.COMMIT.fullmatch(d.ref)}
    assert set(FOUND) - pinned == {"cutlass", "triton_kernels"}  # tags: resolved by lock
    forms = {d.name for d in found.declarations if d.form == "populate"}
    assert forms == {"deepgemm", "qutlass"}  # FetchContent_Populate: their env variables
    by_name = {d.name: d for d in found.declarations}
    assert by_name["deepgemm"].submodules == ("third-party/cutlass", "third-party/deep_jit")
    assert by_name["flashkda"].submodules == ("cutlass",)
    assert by_name["cutlass"].written == "${CUTLASS_REVISION}"
    assert by_name["triton_kernels"].written == "${TRITON_KERNELS_TAG}"


def test_the_cpu_builds_downloads_are_left_out_and_said_why(
        found: cmake_sources.Discovery) -> None:
    assert sorted((s.name, s.file) for s in found.left_out) == [
        ("arm_compute", "cmake/cpu_extension.cmake"), ("oneDNN", "cmake/cpu_extension.cmake"),
        ("oneDNN", "cmake/cpu_extension.cmake")]
    assert all("CPU build" in s.reason for s in found.left_out)


def test_tags_resolve_against_a_local_mirror(found: cmake_sources.Discovery, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    by_name = {d.name: d for d in found.declarations}
    with git_daemon(tmp_path) as mirror:
        cutlass = mirror.publish("nvidia/cutlass.git", {"README.md": "cutlass\n"},
                                 tags=("v4.7.1",))
        triton = mirror.publish("triton-lang/triton.git", {"README.md": "triton\n"},
                                branch="release/3.5.x", tags=("v3.5.1",))
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{mirror.url('')}.insteadOf")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")
        assert sourcelock.resolve_ref(by_name["cutlass"],
                                      console=plain_console()) == (cutlass, True)
        assert sourcelock.resolve_ref(by_name["triton_kernels"],
                                      console=plain_console()) == (triton, True)
        flashmla = by_name["flashmla"]
        assert sourcelock.resolve_ref(flashmla,
                                      console=plain_console()) == (flashmla.ref,
                                                                   False)  # no server asked


def test_lock_of_a_production_tag_names_every_unreachable_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(ROOT / "versions.yaml", tmp_path / "versions.yaml")
    for folder in ("patches", "locks"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    code = main(["--config", str(tmp_path / "versions.yaml"), "lock",
                 "production-3.73-vision"])
    err = capsys.readouterr().err
    assert code == 8
    assert "cannot reach the servers of 10 CMake dependencies: " in err
    named = re.search(r"CMake dependencies: (.*) \(the package locks are made: (.*)\)", err)
    assert named is not None
    assert set(named[1].split(", ")) == {url for url, *_ in FOUND.values()}
    # the package index was asked first: the builder and runtime locks are made all the same
    assert named[2].split(", ") == ["locks/cuda-devel.vllm-0.33.0.arm64.txt",
                                    "locks/runtime/cuda-runtime.vllm-0.33.0.arm64.txt"]
    assert not (tmp_path / "locks" / "sources" / "vllm-0.33.0.json").exists()
