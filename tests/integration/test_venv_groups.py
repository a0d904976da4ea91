"""The runtime packages' layers by group, for real: a runtime lock of one small real package
per group (nvidia-nvtx: torch and CUDA; cuda-pathfinder: the JIT toolchain; idna: the rest)
baked into /opt/venv of the fixture's Debian base; then the lock moves cuda-pathfinder, and
only the JIT group's layer is written again: the others keep their digests, and the bake
from the cache gives the layers a clean bake gives."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.bake import venvlayers
from sparkbake.bake.layercache import LayerCache
from sparkbake.bases import BaseImage
from sparkbake.config.platforms import AMD64
from sparkbake.hashing import file_sha256
from sparkbake.lock.wheelhouse import platform_tags
from sparkbake.oci import docker_engine, image_layout
from tests.conftest import plain_console

pytestmark = pytest.mark.docker

PLATFORM = AMD64
SOURCE_DATE = 1735689600
TAG_WHEEL = "six==1.17.0"  # stands for the tag's built wheel: the upstream's part
LOCKED = ("nvidia-nvtx==13.0.85", "idna==3.10")
MOVED = ("cuda-pathfinder==1.9.1", "cuda-pathfinder==1.3.0")  # a JIT group package, moved
RUNTIME = ("runtime-torch", "runtime-jit", "runtime-rest")


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real wheels, from the package index, for the base's Python and platform."""
    folder = tmp_path_factory.mktemp("downloads")
    for requirements in ((TAG_WHEEL, *LOCKED, MOVED[0]), MOVED[1:]):  # a version per call
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--python-version=3.11", "--implementation=cp",
                        *(f"--platform={tag}" for tag in platform_tags(PLATFORM)),
                        "--dest", str(folder), *requirements],
                       check=True, capture_output=True, timeout=300)
    return folder


def wheel_of(downloads: Path, requirement: str) -> Path:
    name, version = requirement.split("==")
    return next(downloads.glob(f"{name.replace('-', '_')}-{version}-*.whl"))


def wheelhouse(downloads: Path, folder: Path, locked: tuple[str, ...]) -> tuple[Path, Path]:
    """A runtime lock of locked (their hashes) and its wheelhouse, named by the lock's hash
    as `lock.wheelhouse` names one."""
    lock = folder / "runtime-lock.txt"
    lock.write_text("# runtime lock\n" + "".join(
        f"{r} \\\n    --hash=sha256:{file_sha256(wheel_of(downloads, r))}\n"
        for r in sorted(locked)))
    house = folder / "wheels" / file_sha256(lock)[:16]
    house.mkdir(parents=True)
    for requirement in locked:
        (house / wheel_of(downloads, requirement).name).hardlink_to(
            wheel_of(downloads, requirement))
    return lock, house


@pytest.fixture(scope="module")
def runtime_base(debian_base: str, docker_client: docker_engine.Client) -> BaseImage:
    return BaseImage("debian", debian_base, str(docker_client.images.get(debian_base).id))


class Baker:
    """venvlayers.make_layers of the tag wheel over a runtime lock, in a work folder of its own
    each time, into one layer cache (or a fresh one: a clean bake)."""

    def __init__(self, client: docker_engine.Client, base: BaseImage, downloads: Path,
                 folder: Path) -> None:
        self.client, self.base, self.downloads, self.folder = client, base, downloads, folder
        self.tag_wheels = folder / "tag"
        self.tag_wheels.mkdir()
        (self.tag_wheels / wheel_of(downloads, TAG_WHEEL).name).hardlink_to(
            wheel_of(downloads, TAG_WHEEL))
        self.count = 0

    def bake(self, locked: tuple[str, ...], cache: str) -> venvlayers.VenvLayers:
        self.count += 1
        work = self.folder / f"bake-{self.count}"
        work.mkdir()
        lock, house = wheelhouse(self.downloads, work, locked)
        asked = tuple(r.split("==")[0] for r in locked)
        packages = venvlayers.VenvPackages("sparkbake-groups:test", PLATFORM, self.tag_wheels,
                                           ("six",), house, lock, asked, "k" * 64, "t" * 64)
        layer_cache = LayerCache(self.folder / cache / "layers",
                                 image_layout.Layout(self.folder / cache / "oci",
                                                     console=plain_console()))
        (work / "scratch").mkdir()
        return venvlayers.make_layers(self.client, self.base, packages, layer_cache,
                                      work / "scratch", SOURCE_DATE, work / "bake.log", workers=2,
                                      console=plain_console())


def digests(baked: venvlayers.VenvLayers) -> list[str]:
    return [layer.digest for layer, _ in baked.added]


@pytest.fixture(scope="module")
def baker(docker_client: docker_engine.Client, runtime_base: BaseImage, downloads: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Baker:
    return Baker(docker_client, runtime_base, downloads, tmp_path_factory.mktemp("groups"))


@pytest.fixture(scope="module")
def bakes(baker: Baker) -> Iterator[dict[str, venvlayers.VenvLayers]]:
    before, after = ((*LOCKED, moved) for moved in MOVED)
    yield {"cold": baker.bake(before, "cache"), "moved": baker.bake(after, "cache"),
           "again": baker.bake(after, "cache"), "back": baker.bake(before, "cache"),
           "clean": baker.bake(after, "clean")}


def test_each_group_is_a_layer_its_history_line_naming_the_group_and_the_lock(
        bakes: dict[str, venvlayers.VenvLayers]) -> None:
    lines = [what for _, what in bakes["cold"].added]
    assert len(lines) == 5  # three groups, then the upstream's libraries and Python
    titles = ("torch and CUDA", "JIT kernels and toolchain", "the rest")
    for line, title in zip(lines, titles, strict=False):
        assert line.startswith(f"sparkbake: /opt/venv: runtime packages: {title} (runtime "
                               "lock "), line
    assert bakes["cold"].cached == ()


def test_a_lock_change_in_one_group_writes_that_groups_layer_alone(
        bakes: dict[str, venvlayers.VenvLayers]) -> None:
    cold, moved = digests(bakes["cold"]), digests(bakes["moved"])
    assert [old == new for old, new in zip(cold, moved, strict=True)] == [
        True, False, True, True, True]
    assert bakes["moved"].cached == ("runtime-torch", "runtime-rest", "kernels", "python")


def test_a_bake_from_the_cache_gives_the_layers_of_a_clean_bake(
        bakes: dict[str, venvlayers.VenvLayers]) -> None:
    assert digests(bakes["moved"]) == digests(bakes["clean"])
    assert bakes["clean"].cached == ()
    assert digests(bakes["again"]) == digests(bakes["clean"])  # every group cached: fast path
    assert bakes["again"].cached == (*RUNTIME, "kernels", "python")


def test_the_bake_of_a_lock_does_not_depend_on_what_was_baked_before(
        bakes: dict[str, venvlayers.VenvLayers]) -> None:
    """Back to the first lock after the second: its layers under its own runtime key, the
    ones its first bake wrote (a group is never rewritten under another lock's name)."""
    assert digests(bakes["back"]) == digests(bakes["cold"])
    assert bakes["back"].cached == (*RUNTIME, "kernels", "python")
