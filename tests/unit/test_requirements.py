"""A tag's extras and pins: read from the upstream's PKG-INFO, checked against its
requirements, and part of the runtime lock's stamp."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.config import versions
from sparkbake.errors import ConfigError
from sparkbake.lock import pins, requirements
from tests.conftest import DEBIAN_BASE_WITH_PYTHON, settings_of, versions_yaml

UPSTREAMS = "  tree:\n    dir: tree\n    runtime_requirements: requirements/cuda.txt\n"
KEYS_LINE = 20  # the line of the keys tag_with adds to tag t, in versions.yaml
PKG_INFO = """\
Metadata-Version: 2.4
Name: vllm
Version: 0.33.0
Provides-Extra: bench
Requires-Dist: pandas; extra == "bench"
Requires-Dist: scipy; python_version >= "3.10" and extra == "bench"
Provides-Extra: b12x
Requires-Dist: b12x==1.5.1; extra == "b12x"
Provides-Extra: video
Requires-Dist: regex

A description that mentions extra == "b12x" is not a header.
"""
COMMON = "regex\ntorch == 2.14.0 # the release\n"
CUDA = """\
-r common.txt
flashinfer-python==0.7.2.post1
numba == 0.65.0; platform_machine == "x86_64"
"""


def tag_with(tmp_path: Path, keys: str) -> versions.Tag:
    tree = tmp_path / "tree"
    (tree / "requirements").mkdir(parents=True, exist_ok=True)
    (tree / "PKG-INFO").write_text(PKG_INFO)
    (tree / "requirements" / "common.txt").write_text(COMMON)
    (tree / "requirements" / "cuda.txt").write_text(CUDA)
    (tmp_path / "versions.yaml").write_text(versions_yaml(
        platform="linux/arm64", bases=DEBIAN_BASE_WITH_PYTHON, upstreams=UPSTREAMS,
        tags=f"  t:\n    upstream: tree\n    series: []\n{keys}\n"))
    return versions.load(tmp_path / "versions.yaml").tag("t")


def test_the_extras_come_from_pkg_info_without_their_extra_clause(tmp_path: Path) -> None:
    tag_with(tmp_path, "")
    assert requirements.extras_of(tmp_path / "tree") == {
        "bench": ["pandas", 'scipy; python_version >= "3.10"'],
        "b12x": ["b12x==1.5.1"], "video": []}


def test_an_extra_clause_joined_by_or_is_decided_not_cut_out(tmp_path: Path) -> None:
    """A requirement of two extras is each one's; one that an extra or another condition
    asks for is always the extra's; a nested clause keeps its parentheses."""
    (tmp_path / "PKG-INFO").write_text(
        "Metadata-Version: 2.4\nName: pkg\nVersion: 1.0\n"
        "Provides-Extra: audio\nProvides-Extra: video\n"
        'Requires-Dist: av; extra == "audio" or extra == "video"\n'
        'Requires-Dist: soxr; python_version < "3.12" or extra == "audio"\n'
        'Requires-Dist: pyav; (extra == "video" or extra == "audio") and '
        'sys_platform == "linux"\n'
        'Requires-Dist: numba; extra == "video" and (python_version < "3.12" or '
        'platform_machine != "arm64")\n'
        'Requires-Dist: regex; extra != "audio"\n')
    assert requirements.extras_of(tmp_path) == {
        "audio": ["av", "soxr", 'pyav; sys_platform == "linux"'],
        "video": ["av", 'pyav; sys_platform == "linux"',
                  'numba; (python_version < "3.12" or platform_machine != "arm64")']}


def test_the_lock_input_lists_the_extras_requirements_and_the_pins(tmp_path: Path) -> None:
    tag = tag_with(tmp_path, "    extras: [b12x]\n    pins: [nvidia-cuda-nvcc==13.0.88, "
                             "torch==2.14.0]")
    text = requirements.input_text(tag, tmp_path / "tree", "requirements/cuda.txt", "aarch64")
    assert text == ("b12x==1.5.1  # extra b12x\nnvidia-cuda-nvcc==13.0.88  # pin\n"
                    "torch==2.14.0  # pin\n")
    assert [a.name for a in requirements.asked(tag, tmp_path / "tree")] == \
        ["b12x", "nvidia-cuda-nvcc", "torch"]


def test_an_extra_the_upstream_lacks_names_the_ones_it_has(tmp_path: Path) -> None:
    tag = tag_with(tmp_path, "    extras: [b12x, b12z]")
    with pytest.raises(ConfigError) as caught:
        requirements.asked(tag, tmp_path / "tree")
    assert caught.value.exit_code == 2
    assert caught.value.message == (
        f"{tmp_path / 'versions.yaml'}:{KEYS_LINE}: tag t: upstream tree has no extra 'b12z'; "
        "its extras: b12x, bench, video")


def test_a_pin_that_conflicts_with_the_upstream_names_both(tmp_path: Path) -> None:
    tag = tag_with(tmp_path, "    pins: [torch==2.13.0]")
    with pytest.raises(ConfigError) as caught:
        requirements.input_text(tag, tmp_path / "tree", "requirements/cuda.txt", "aarch64")
    assert caught.value.exit_code == 2
    assert caught.value.message == (
        f"{tmp_path / 'versions.yaml'}:{KEYS_LINE}: tag t: the pin torch==2.13.0 conflicts with "
        "requirements/common.txt:2: torch==2.14.0")


def test_a_requirement_whose_marker_excludes_the_platform_does_not_conflict(
        tmp_path: Path) -> None:
    tag = tag_with(tmp_path, "    pins: [numba==0.61.0]")
    assert requirements.input_text(tag, tmp_path / "tree", "requirements/cuda.txt",
                                   "aarch64") == "numba==0.61.0  # pin\n"
    with pytest.raises(ConfigError, match=r"conflicts with requirements/cuda\.txt:3"):
        requirements.input_text(tag, tmp_path / "tree", "requirements/cuda.txt", "x86_64")


def test_a_pin_must_be_an_exact_version(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"versions\.yaml:{KEYS_LINE}: 'torch>=2' is not a "
                                          r"valid name in pins"):
        tag_with(tmp_path, "    pins: [torch>=2]")


def test_a_package_pinned_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pins names a package twice"):
        tag_with(tmp_path, "    pins: [torch==2.14.0, Torch==2.14.0]")


def test_the_runtime_lock_is_stale_when_the_extras_or_pins_change(tmp_path: Path) -> None:
    tag = tag_with(tmp_path, "    extras: [b12x]")
    loaded, tree = versions.load(tmp_path / "versions.yaml"), tmp_path / "tree"
    path = pins.runtime_lock_path(loaded, tag)
    assert path is not None
    path.parent.mkdir(parents=True)
    origin = f"# from: requirements/cuda.txt={pins._sha(tree / 'requirements/cuda.txt')}"
    path.write_text(f"# runtime lock\n{origin}\n")
    with pytest.raises(ConfigError, match="for other extras or pins than tag t's"):
        pins.require_runtime_lock(loaded, tag, tree, settings=settings_of())
    stamp = requirements.stamp(
        tag, requirements.input_text(tag, tree, "requirements/cuda.txt", "aarch64"))
    assert stamp.startswith(" extras=b12x asked=")
    path.write_text(f"# runtime lock\n{origin}{stamp}\n")
    assert pins.require_runtime_lock(loaded, tag, tree, settings=settings_of()) == path


def test_a_requires_dist_line_pip_cannot_read_names_the_file_and_the_line(
        tmp_path: Path) -> None:
    (tmp_path / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: up\nVersion: 1.0\nProvides-Extra: b12x\n"
        "Requires-Dist: b12x-kernels>=1; extra ==\n")
    with pytest.raises(ConfigError) as caught:
        requirements.extras_of(tmp_path)
    assert caught.value.message.startswith(
        f"{tmp_path / 'PKG-INFO'}: Requires-Dist 'b12x-kernels>=1; extra ==' is not a "
        "requirement (")
    assert caught.value.remedy == "check the upstream's metadata"
    assert caught.value.exit_code == 2
