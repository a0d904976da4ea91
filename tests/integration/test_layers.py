"""Layers by rate of change, on the fixture: after a Python-only patch change the bake takes
the runtime packages' and the kernels' layers from its cache, writes only the upstream's
Python and sparkbake's own layers anew, and gives the image a clean bake gives."""

from __future__ import annotations

import contextlib
import io
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sparkbake.config.settings import Settings
from sparkbake.oci import docker_engine, image_layout
from sparkbake.pipeline import commands
from sparkbake.run import Run
from tests.conftest import Project, copy_project, plain_console
from tests.integration.test_pipeline import PYTHON_PATCH, python_in

pytestmark = pytest.mark.docker

REPOSITORY = "sparkbake-layers"
# the layers the bake adds, bottom first, by what the config's history says of them
PARTS = ("runtime packages: the rest (no runtime lock)", "compiled libraries", "Python",
         "/opt/sparkbake")


@dataclass(frozen=True)
class Bake:
    digest: str
    layers: list[str]  # blob digests, the base's first
    history: list[str]
    log: str  # the bake stage's log
    err: str  # what the console showed
    seconds: float


def baked(project: Project, log: str, err: str, seconds: float) -> Bake:
    store = image_layout.Layout(project.root / "build" / "oci", console=plain_console())
    found = store.find("fixture")
    assert found is not None
    manifest = store.read_json(found.digest)
    config = store.read_json(manifest["config"]["digest"])
    return Bake(found.digest, [layer["digest"] for layer in manifest["layers"]],
                [h.get("created_by", "") for h in config["history"]], log, err, seconds)


def build(project: Project) -> Bake:
    """build-image; what the bake printed is its log, build/logs/fixture/bake.log."""
    err = io.StringIO()  # module-scoped fixtures have no capsys
    start = time.monotonic()
    with contextlib.redirect_stderr(err):
        assert project.sparkbake("build-image", "fixture") == 0, err.getvalue()
    return baked(project, project.log("fixture", "bake"), err.getvalue(),
                 time.monotonic() - start)


@pytest.fixture(scope="module")
def layered(built_fixture: Project, docker_client: docker_engine.Client,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """The fixture under its own repository (the shared image stays), with the kernel cache
    of built_fixture so that no compiler runs."""
    project = copy_project(tmp_path_factory.mktemp("layers") / "project")
    config = project.config_path
    config.write_text(config.read_text().replace("sparkbake-fixture", REPOSITORY))
    shutil.copytree(built_fixture.root / "wheels" / "kernels",
                    project.root / "wheels" / "kernels")
    yield project
    for image in docker_client.images.list(f"localhost:5000/{REPOSITORY}"):
        for ref in image.tags:
            docker_client.images.remove(ref)


@pytest.fixture(scope="module")
def bakes(layered: Project) -> tuple[Bake, Bake]:
    """A cold bake of the fixture, then a bake after a one-line change to its Python patch."""
    cold = build(layered)
    patch = layered.root / "patches" / "tinykern" / PYTHON_PATCH
    patch.write_text(patch.read_text().replace('return "tinykern-fixture"',
                                               'return "tinykern-fixture-2"'))
    warm = build(layered)
    print(f"build-image: cold {cold.seconds:.1f} s; after a Python-only change "
          f"{warm.seconds:.1f} s", *(line for bake in (cold, warm)
                                     for line in bake.log.splitlines() if "<== bake" in line))
    return cold, warm


def split(bake: Bake) -> tuple[list[str], list[str]]:
    """The base's layer digests, and the four the bake adds."""
    return bake.layers[:-len(PARTS)], bake.layers[-len(PARTS):]


def test_after_a_python_only_change_only_the_python_and_sparkbake_layers_change(
        bakes: tuple[Bake, Bake]) -> None:
    (cold_base, cold), (warm_base, warm) = map(split, bakes)
    assert cold_base == warm_base
    runtime, kernels, python, files = (old == new for old, new in zip(cold, warm, strict=True))
    assert (runtime, kernels, python, files) == (True, True, False, False)


def test_a_first_build_image_shows_a_line_per_stage_then_the_summary(
        bakes: tuple[Bake, Bake], layered: Project) -> None:
    cold, _ = bakes
    lines = cold.err.splitlines()
    assert [line.split()[:2] for line in lines[:4]] == [
        ["fetch", "ran"], ["patch", "ran"], ["wheels", "ran"], ["bake", "ran"]]
    assert lines[4].split() == ["stage", "state", "time", "key"]
    assert [line.split()[0] for line in lines[5:9]] == ["fetch", "patch", "wheels", "bake"]
    bake_key = lines[8].split()[-1]  # the image's inputs: the bake's key
    assert lines[9].endswith(f"inputs {bake_key[:12]})") and len(bake_key) == 16
    assert lines[9].startswith(f"image: {layered.plan().tag.image_ref} = sha256:")
    assert len(lines) == 10  # nothing of git, pip or the containers: that is in the logs
    assert "+ git" in layered.log("fixture", "patch")


def test_the_history_says_what_each_layer_is(bakes: tuple[Bake, Bake]) -> None:
    for bake in bakes:
        made = bake.history[-len(PARTS):]
        assert all(part in line for part, line in zip(PARTS, made, strict=True)), made
        assert all(line.startswith("sparkbake: /opt/") for line in made)


def test_the_second_bake_takes_runtime_packages_and_kernels_from_its_cache(
        bakes: tuple[Bake, Bake]) -> None:
    cold, warm = bakes
    assert "runtime packages cached" not in cold.log
    # the fixture has no runtime lock: its runtime packages (the skeleton's pip) are the rest
    assert all(f"/opt/venv layer {part}: written" in cold.log
               for part in ("runtime-rest", "kernels", "python"))
    assert "runtime packages cached (every group): installing tinykern alone" in warm.log
    assert "/opt/venv layer runtime-rest: cached" in warm.log
    assert "/opt/venv layer kernels: cached" in warm.log
    # kept under the wheel's ELF members by the cold bake: pip left the library out
    left_out = "the compiled libraries' layer is cached for these wheels"
    assert left_out not in cold.log and left_out in warm.log
    assert "/opt/venv layer python: written" in warm.log


def test_the_image_runs_the_changed_python_over_the_cached_layers(
        bakes: tuple[Bake, Bake], layered: Project, docker_client: docker_engine.Client) -> None:
    out = python_in(docker_client, layered.plan().tag.image_ref,
                    "import tinykern as t, pip; print(t.abi_version(), t.patched())")
    assert out == "2 tinykern-fixture-2"


def test_a_bake_from_the_cache_is_the_image_a_clean_bake_makes(
        bakes: tuple[Bake, Bake], layered: Project) -> None:
    _, warm = bakes
    shutil.rmtree(layered.root / "build" / "layers")  # the layer cache, not the stages'
    config = layered.config()
    clean = commands.rebuild(Run.of(config, Settings.of_process(), plain_console()),
                             config.tag("fixture"))
    assert clean.image.digest == warm.digest
