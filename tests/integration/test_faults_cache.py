"""A damaged cache is found, not shipped (issue 23's fault sweep, trust by content): a flipped
byte in a layer blob of build/oci, a truncated base blob in the per-host layer cache, a
corrupted wheel, truncated records, and a wheel rebuilt with other bytes. Each is detected,
made again or refused, and the next build gives the clean digest.

One project (a copy of the built fixture, with its own repository and its own host cache, so
that the damage stays here) is baked once; each test damages it, checks what the commands
say, and leaves it clean for the next.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkbake.bake import baselayers, runtime_image
from sparkbake.config.settings import Settings
from sparkbake.core.folders import Folders
from sparkbake.errors import PublishError, ReproducibilityError
from sparkbake.hashing import file_sha256
from sparkbake.oci import docker_engine, image_layout
from sparkbake.wheels import container_build
from tests.conftest import Project, free_port, plain_console

pytestmark = pytest.mark.docker

REPOSITORY = "localhost:5000/sparkbake-faults"


@dataclass(frozen=True)
class Baked:
    """The project and the digest its clean build gives."""

    project: Project
    clean: str
    cache: Path  # its host cache (SPARKBAKE_CACHE)

    @property
    def oci(self) -> image_layout.Layout:
        return image_layout.Layout(self.project.root / "build" / "oci", console=plain_console())

    def manifest(self) -> image_layout.Manifest:
        return self.oci.read_manifest(self.clean)

    def wheels(self) -> Path:
        return Folders.of(self.project.config()).wheel_set(self.project.plan().wheels_key)


def seed_host_cache(cache: Path, client: docker_engine.Client, base: str) -> None:
    """Copies (never links: the damage stays here) of the base's blobs from this host's
    layer cache, where it has them: an export of the base takes a minute."""
    shared = image_layout.Layout(Settings.of_process().cache_dir / "layers",
                                 console=plain_console())
    record = baselayers.record_path(shared, str(client.images.get(base).id))
    if not record.is_file():
        return
    listing = json.loads(record.read_text())
    mine = image_layout.Layout(cache / "layers", console=plain_console())
    cache.mkdir()
    for digest in (listing["config"], *listing["layers"]):
        copy = Path(shutil.copy(shared.blob(digest), cache / "copy"))
        if file_sha256(copy) != digest.split(":")[1]:
            return  # the bake exports the base itself
        mine.add_file(copy, digest, image_layout.LAYER_TYPE)
        copy.unlink()  # the next copy is a new file, not one written through the link
    (mine.root / "bases").mkdir()
    shutil.copy(record, mine.root / "bases" / record.name)


@pytest.fixture(scope="module")
def baked(built_fixture: Project, docker_client: docker_engine.Client, debian_base: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Baked]:
    root = tmp_path_factory.mktemp("faults") / "project"
    shutil.copytree(built_fixture.root, root, symlinks=True)
    project = Project(root)
    text = project.config_path.read_text()
    project.config_path.write_text(text.replace("localhost:5000/sparkbake-fixture", REPOSITORY))
    cache = root.parent / "host-cache"
    # the layout made anew, linked into this host cache; the wheels as every later rebuild
    # makes them, from the kernel cache (a compiled build's wheels.json names its nvcc)
    for made in ("build/oci", "build/layers", f"wheels/{project.plan().wheels_key}"):
        shutil.rmtree(root / made)
    seed_host_cache(cache, docker_client, debian_base)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPARKBAKE_CACHE", str(cache))
        assert project.sparkbake("build-image", "fixture") == 0
        found = runtime_image.find(Folders.of(project.config()), project.plan(),
                                   console=plain_console())
        assert found is not None
        yield Baked(project, found.image.digest, cache)
    docker_client.images.remove(project.plan().tag.image_ref, force=True)


def build(baked: Baked, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """build-image --json: its facts (stages: name -> state) and what it printed besides."""
    capsys.readouterr()
    assert baked.project.sparkbake("build-image", "fixture", "--json") == 0
    out = capsys.readouterr()
    facts = json.loads(out.out)
    facts["stages"] = {s["name"]: s["state"] for s in facts["stages"]}
    return facts, out.err


def flip_byte(path: Path, keep_mtime: bool = False) -> None:
    """One byte changed in place, through every link of the file, as a disk would."""
    before = path.stat()
    os.chmod(path, 0o644)
    with path.open("r+b") as handle:
        handle.seek(before.st_size // 2)
        byte = handle.read(1)
        handle.seek(before.st_size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    if keep_mtime:  # a damage the hot path's stamp cannot see: a full hash must
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def assert_clean(baked: Baked, facts: dict[str, Any]) -> None:
    """The build gave the clean digest, and every blob of it is its digest's bytes."""
    assert facts["digest"] == baked.clean
    manifest = baked.manifest()
    for blob in (manifest.config, *manifest.layers):
        assert file_sha256(baked.oci.blob(blob.digest)) == blob.digest.split(":")[1]


def test_a_flipped_byte_in_a_layer_blob_is_refused_by_verify_and_publish_then_rebuilt(
        baked: Baked, capsys: pytest.CaptureFixture[str]) -> None:
    files, python, kernels = (baked.oci.blob(layer.digest)
                              for layer in baked.manifest().layers[-1:-4:-1])
    flip_byte(files, keep_mtime=True)
    capsys.readouterr()
    assert baked.project.sparkbake("verify", "fixture") == ReproducibilityError.exit_code
    err = capsys.readouterr().err
    assert f"damaged cache entry {files}" in err and "not the bytes of their digest" in err
    assert "rebuilding" not in err and not files.exists()  # refused before any rebuild
    assert baked.project.sparkbake("build-image", "fixture") == 0
    flip_byte(python, keep_mtime=True)
    registry = f"127.0.0.1:{free_port()}"  # refused before any byte goes out
    capsys.readouterr()
    assert baked.project.sparkbake("publish", "fixture", "--registry", registry,
                                   "--skip-smoke") == PublishError.exit_code
    err = capsys.readouterr().err
    assert f"damaged cache entry {python}" in err and "nothing was pushed" in err
    assert not python.exists()
    flip_byte(kernels)  # the hot path sees this one
    facts, err = build(baked, capsys)
    assert f"damaged cache entry {kernels}" in err
    assert facts["stages"]["bake"] != "cached"
    assert_clean(baked, facts)


@pytest.mark.required("prove-faults")
def test_a_truncated_base_blob_in_the_host_cache_is_exported_again(
        baked: Baked, capsys: pytest.CaptureFixture[str]) -> None:
    shared = image_layout.Layout(baked.cache / "layers", console=plain_console())
    base = baked.manifest().layers[0]
    assert baked.oci.blob(base.digest).stat().st_ino == shared.blob(base.digest).stat().st_ino
    os.chmod(shared.blob(base.digest), 0o644)
    os.truncate(shared.blob(base.digest), base.size // 2)
    facts, err = build(baked, capsys)
    assert f"damaged cache entry {baked.oci.blob(base.digest)}" in err
    assert f"damaged cache entry {shared.blob(base.digest)}" in err  # exported again
    assert_clean(baked, facts)
    assert file_sha256(shared.blob(base.digest)) == base.digest.split(":")[1]


@pytest.mark.required("prove-faults")
def test_a_corrupted_wheel_is_built_again_before_the_bake_takes_it(
        baked: Baked, capsys: pytest.CaptureFixture[str]) -> None:
    report = json.loads((baked.wheels() / container_build.REPORT).read_text())
    wheel = baked.wheels() / report["wheels"][0]["file"]
    flip_byte(wheel)
    facts, err = build(baked, capsys)
    assert f"damaged cache entry {baked.wheels()}" in err and wheel.name in err
    assert facts["stages"]["wheels"] != "cached"
    assert file_sha256(wheel) == report["wheels"][0]["sha256"]
    assert_clean(baked, facts)


@pytest.mark.required("prove-faults")
def test_a_rebuilt_wheel_with_other_bytes_is_not_left_behind_a_cached_image(
        baked: Baked, capsys: pytest.CaptureFixture[str]) -> None:
    """Keys follow content: the same inputs with other wheel bytes are another image."""
    path = baked.wheels() / container_build.REPORT
    report = json.loads(path.read_text())
    wheel = baked.wheels() / report["wheels"][0]["file"]
    os.chmod(wheel, 0o644)
    with zipfile.ZipFile(wheel, "a") as archive:  # the same files, other bytes
        archive.comment = b"rebuilt elsewhere"
    report["wheels"][0]["sha256"] = file_sha256(wheel)
    path.write_text(json.dumps(report, indent=2))
    facts, _ = build(baked, capsys)
    assert facts["stages"]["bake"] != "cached"
    assert facts["digest"] != baked.clean
    shutil.rmtree(baked.wheels())  # the wheels as the tree builds them: the clean image
    facts, _ = build(baked, capsys)
    assert facts["stages"]["bake"] != "cached"
    assert_clean(baked, facts)


@pytest.mark.required("prove-faults")
def test_truncated_records_are_made_again(baked: Baked,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    build_dir = baked.project.root / "build"
    python = baked.manifest().layers[-2].digest
    layer_record = next(path for path in (build_dir / "layers").glob("python-*.json")
                        if json.loads(path.read_text())["digest"] == python)
    records = [baked.wheels() / container_build.REPORT, build_dir / "oci" / "index.json",
               layer_record]
    for record in records:
        record.write_text(record.read_text()[:40])
    facts, err = build(baked, capsys)
    for record in records[1:]:
        assert f"damaged cache entry {record}" in err
    assert f"damaged cache entry {baked.wheels()}: wheels.json is not a JSON record" in err
    assert_clean(baked, facts)
