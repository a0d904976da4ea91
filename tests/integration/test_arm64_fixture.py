"""linux/arm64 on this host: the fixture tag `fixture-arm64` (tests/data/versions.yaml) made
end to end for the Spark's platform, with its base made by debootstrap under qemu, its
builder and nvcc run emulated, and its bake's file work done natively."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.oci import docker_engine, emulation
from tests.conftest import Project, copy_project

pytestmark = pytest.mark.docker

TAG = "fixture-arm64"
ELF_AARCH64 = 183


@pytest.fixture(scope="module")
def built_arm64(docker_client: docker_engine.Client,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    project = copy_project(tmp_path_factory.mktemp("arm64") / "project")
    assert project.sparkbake("build-image", TAG) == 0
    yield project
    docker_client.images.remove(project.plan(TAG).tag.image_ref, force=True)


def test_the_kernel_is_an_aarch64_library_with_sm_121a_sass(built_arm64: Project) -> None:
    plan = built_arm64.plan(TAG)
    folder = built_arm64.root / "wheels" / plan.wheels_key
    (wheel,) = folder.glob("*.whl")
    assert wheel.name.endswith("-linux_aarch64.whl")
    with zipfile.ZipFile(wheel) as archive:
        (library,) = [n for n in archive.namelist() if n.endswith(".so")]
        header = archive.read(library)[:20]
    assert int.from_bytes(header[18:20], "little") == ELF_AARCH64
    report = (folder / "wheels.json").read_text()
    assert '"sm_121a"' in report


def test_the_image_runs_aarch64_and_imports_its_kernel(
        built_arm64: Project, docker_client: docker_engine.Client) -> None:
    ref = built_arm64.plan(TAG).tag.image_ref
    attrs = docker_engine.image_attrs(docker_client, ref)
    assert attrs["Architecture"] == "arm64"
    ran = docker_engine.run_container(
        docker_client, ref, ["-c", "import platform, tinykern; print(platform.machine(), "
                                   "tinykern.__name__)"],
        entrypoint=["/opt/venv/bin/python"], network=False, quiet=True)
    assert ran.exit_code == 0, ran.output
    assert ran.output.strip().splitlines()[-1] == "aarch64 tinykern"


def test_smoke_passes_under_emulation(built_arm64: Project) -> None:
    assert built_arm64.sparkbake("smoke", TAG) == 0


def test_no_binfmt_handler_is_exit_8_saying_how_to_install_one(
        project: Project, docker_client: docker_engine.Client, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(emulation, "BINFMT", tmp_path)  # a host where none is registered
    assert project.sparkbake("wheels", TAG) == 8
    err = capsys.readouterr().err
    assert f"linux/arm64 needs emulation on this linux/amd64 host, and {tmp_path}/" \
           "qemu-aarch64 is not an enabled qemu handler" in err
    assert "apt-get install qemu-user-static" in err
