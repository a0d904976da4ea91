"""gc against the real engine: the stale images of a versions.yaml's names go, current ones
and anyone else's stay. Every image here is a tiny one loaded by the test under names unique
to it (the engine is shared), and removed afterwards whatever happened."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest

from sparkbake import bases, planning
from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.config.platforms import AMD64
from sparkbake.config.versions import DebootstrapBase
from sparkbake.errors import EngineError
from sparkbake.oci import docker_engine
from tests.conftest import versions_yaml

STALE_INPUTS = "0" * 64


def layer_tar(marker: str) -> bytes:
    """One small file, so each image has a layer of its own."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        data = marker.encode()
        entry = tarfile.TarInfo("marker.txt")
        entry.size = len(data)
        tar.addfile(entry, io.BytesIO(data))
    return out.getvalue()


def load(client: docker_engine.Client, folder: Path, refs: list[str],
         labels: dict[str, str]) -> str:
    """docker load an image with these names (none: untagged) and labels; its id."""
    layer = layer_tar(json.dumps([refs, labels]))
    image_config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": {"Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }).encode()
    archive = folder / f"{uuid.uuid4().hex}.tar"
    with tarfile.open(archive, "w") as out:
        manifest = json.dumps([{"Config": "config.json", "RepoTags": refs or None,
                                "Layers": ["layer.tar"]}]).encode()
        for name, data in (("layer.tar", layer), ("config.json", image_config),
                           ("manifest.json", manifest)):
            entry = tarfile.TarInfo(name)
            entry.size = len(data)
            out.addfile(entry, io.BytesIO(data))
    docker_engine.load_image(client, archive, error=EngineError)
    return "sha256:" + hashlib.sha256(image_config).hexdigest()


@pytest.fixture
def made(docker_client: docker_engine.Client) -> Iterator[list[str]]:
    """The ids of the images a test loads: all removed at the end."""
    ids: list[str] = []
    yield ids
    for image_id in ids:
        with contextlib.suppress(docker.errors.ImageNotFound):  # gc removed it: as meant
            docker_client.images.remove(image_id, force=True)


def test_gc_removes_stale_sparkbake_images_and_keeps_current_and_foreign(
        docker_client: docker_engine.Client, made: list[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    unique = uuid.uuid4().hex[:8]
    repo, tag, base = f"localhost:5000/sparkbake-gc-{unique}", f"gc-{unique}", f"gcbase{unique}"
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "a.py").write_text("a = 1\n")
    (tmp_path / "versions.yaml").write_text(versions_yaml(
        repository=repo, bases=f"  {base}: {{debootstrap: {{suite: bookworm}}}}\n",
        builder=base, runtime=base, tags=f"  {tag}: {{upstream: tree, series: []}}\n"))
    monkeypatch.setenv("SPARKBAKE_CACHE", str(tmp_path / "host-cache"))
    loaded = versions.load(tmp_path / "versions.yaml")
    now = planning.make(loaded, loaded.tag(tag))
    ours = {"dev.sparkbake.tag": tag}
    runtime = loaded.tag(tag).runtime
    assert isinstance(runtime, DebootstrapBase)
    base_ref = bases.local_ref(runtime, AMD64)

    def image(refs: list[str], labels: dict[str, str]) -> str:
        made.append(load(docker_client, tmp_path, refs, {**labels, "test": unique}))
        return made[-1]

    kept = [image([f"{repo}:{tag}"], {**ours, "dev.sparkbake.inputs": now.inputs}),
            image([base_ref], {}),
            image([f"sparkbake-gc-foreign-{unique}:latest"], {}),
            image([], {"dev.sparkbake.tag": f"not-ours-{unique}",
                       "dev.sparkbake.inputs": STALE_INPUTS}),
            # our tag's name in its labels, but another checkout's bake loaded it
            image([], {**ours, "dev.sparkbake.inputs": STALE_INPUTS, "checkout": "other"})]
    loaded_here = image([], {**ours, "dev.sparkbake.inputs": STALE_INPUTS})
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "loaded-images.txt").write_text(f"{loaded_here}\n")
    gone = [image([f"{repo}:{tag}-old"], {**ours, "dev.sparkbake.inputs": STALE_INPUTS}),
            loaded_here,
            image([f"sparkbake-base/{base}:000000000000"], {}),
            image([f"sparkbake-builder/{base}:000000000000"], {})]
    shared = image([f"{repo}:{tag}-shared", f"elsewhere-{unique}/x:1"],
                   {**ours, "dev.sparkbake.inputs": STALE_INPUTS})

    assert main(["--config", str(tmp_path / "versions.yaml"), "gc", "--dry-run"]) == 0
    assert all(docker_engine.image_exists(docker_client, i) for i in [*kept, *gone, shared])
    assert main(["--config", str(tmp_path / "versions.yaml"), "gc"]) == 0

    assert [docker_engine.image_exists(docker_client, i) for i in kept] == [True] * len(kept)
    assert [docker_engine.image_exists(docker_client, i) for i in gone] == [False] * len(gone)
    assert docker_client.images.get(shared).attrs["RepoTags"] == [f"elsewhere-{unique}/x:1"]
