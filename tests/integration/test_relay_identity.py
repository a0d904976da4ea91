"""A signed release copied as a relay copies it, with its manifest rewritten, and checked on
a node (this host's engine) by verify-release --hosts against the embedded docker-registry.

The relay's copy is made with the project's own OCI code: the release pulled from the
registry, each layer compressed again at another gzip level (the same DiffIDs, other blob
digests, so another manifest digest, which no signature covers), pushed to another
repository and pulled by the engine. It verifies by its config digest and DiffIDs, and says
so. A copy with one layer changed (and its config's DiffID with it) is refused in one line,
exit 7. Every repository and engine name here starts with sbs3-; the pulled names are
removed after each test, the images by the run's label at the end (test_publish's client).
"""

from __future__ import annotations

import contextlib
import gzip
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker.errors
import pytest

from sparkbake import planning
from sparkbake.__main__ import main
from sparkbake.attest import signing
from sparkbake.config.settings import Settings
from sparkbake.oci import docker_engine, image_layout, layers, registry_access
from sparkbake.publish import push
from tests.conftest import plain_console, printed
from tests.integration.test_publish import RUN, TAG, Local, Project, client, local, registry_config

pytestmark = pytest.mark.docker

__all__ = ["client", "local"]  # the fixtures this module shares

NODE = "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class Signed:
    """The published release: its pinned reference, the key's public half, its config."""

    pinned: str
    pub: Path
    config: str
    project: Project


@pytest.fixture
def signed(client: docker_engine.Client, local: Local, tmp_path: Path) -> Signed:
    repository = f"127.0.0.1:{local.port}/sbs3-relay-{RUN}-{uuid.uuid4().hex[:6]}"
    config = registry_config(tmp_path, repository)
    project = Project(client, config, planning.make(config, config.tag(TAG)), local.port)
    image_id = project.build("relayed payload", base="relayed base")
    project.smoke()
    key = signing.generate(tmp_path / "signing.key", None)[0]
    record = printed(push.publish(client, config, Settings.of_process(), project.plan, None,
                                  False, key=signing.signing_key(key, None),
                                  console=plain_console()))
    return Signed(record["pinned"], Path(f"{key}.pub"), image_id, project)


@pytest.fixture
def pulled(client: docker_engine.Client) -> Iterator[list[str]]:
    """The names the test pulls onto the engine, removed after it."""
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(name)


def relayed(signed: Signed, work: Path, change_layer: bool = False) -> str:
    """A copy of the release in another repository with every layer compressed again (and,
    with change_layer, its last layer's contents changed): its repository@digest."""
    repository, _, digest = signed.pinned.partition("@")
    layout = image_layout.Layout(work / "oci", plain_console())
    session = registry_access.open_session(repository, Settings.of_process(),
                                           console=plain_console())
    session.pull(digest, layout)
    manifest = layout.read_manifest(digest)
    blobs = [_recompressed(layout, blob) for blob in manifest.layers]
    config = manifest.config
    if change_layer:
        made = layers.from_files({"payload": (b"another payload", 0o644)}, work / "l.tgz", 0)
        blobs[-1] = layout.add_file(made.path, made.digest, layers.MEDIA_TYPE)
        document = layout.read_config_doc(config.digest)
        document["rootfs"]["diff_ids"][-1] = made.diff_id
        config = layout.add_bytes(image_layout.canonical(document), image_layout.CONFIG_TYPE)
    image = layout.add_bytes(image_layout.canonical(image_layout.manifest(config, blobs)),
                             image_layout.MANIFEST_TYPE)
    copy = repository.replace("sbs3-relay-", "sbs3-relay-copy-")
    copied = registry_access.open_session(copy, Settings.of_process(), console=plain_console())
    new_digest, _ = copied.push(layout, image, ["relayed"])
    assert new_digest != digest
    return f"{copy}@{new_digest}"


def _recompressed(layout: image_layout.Layout,
                  blob: image_layout.Descriptor) -> image_layout.Descriptor:
    """The layer's tar compressed at gzip level 1: the same DiffID, another blob digest."""
    again = gzip.compress(gzip.decompress(layout.read(blob.digest)), compresslevel=1, mtime=0)
    added = layout.add_bytes(again, blob.media_type)
    assert added.digest != blob.digest
    return added


def pull(client: docker_engine.Client, ref: str, pulled: list[str]) -> dict[str, object]:
    pulled.append(ref)
    for chunk in client.api.pull(ref, stream=True, decode=True):
        assert "error" not in chunk, chunk
    return docker_engine.image_attrs(client, ref)


def test_a_recompressed_copy_verifies_by_its_config_and_says_so(
        client: docker_engine.Client, signed: Signed, pulled: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    copy = relayed(signed, tmp_path)
    attrs = pull(client, copy, pulled)
    assert attrs["Id"] == signed.config
    assert copy in attrs["RepoDigests"]  # type: ignore[operator]
    assert main(["verify-release", signed.pinned, "--key", str(signed.pub),
                 "--hosts", NODE, "--image", copy]) == 0
    err = capsys.readouterr().err
    rewritten = copy.rpartition("@")[2]
    assert (f"verified node {NODE}: {copy} = {signed.pinned} by its config digest "
            f"{signed.config[:19]} and 2 layer DiffIDs (its manifest was rewritten: held as "
            f"{rewritten[:19]})") in err
    # without --image: found by the config digest the signed manifest names
    assert main(["verify-release", signed.pinned, "--key", str(signed.pub),
                 "--hosts", NODE]) == 0
    assert f"verified node {NODE}: {signed.config} = {signed.pinned} by its config digest" \
        in capsys.readouterr().err


def test_a_copy_with_one_layer_changed_is_refused_in_one_line(
        client: docker_engine.Client, signed: Signed, pulled: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    copy = relayed(signed, tmp_path, change_layer=True)
    attrs = pull(client, copy, pulled)
    assert attrs["Id"] != signed.config
    assert main(["verify-release", signed.pinned, "--key", str(signed.pub),
                 "--hosts", NODE, "--image", copy]) == 7
    err = capsys.readouterr().err
    changed, was = (str(a["RootFS"]["Layers"][-1])  # type: ignore[index]
                    for a in (attrs, docker_engine.image_attrs(client, signed.config)))
    assert f"sparkbake: error: node {NODE}: {copy}: layer 2 of 2 has DiffID {changed[:19]} " \
        f"where the signed {signed.pinned} has {was[:19]}\n" in err


def test_a_node_without_the_image_is_named(signed: Signed,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = signed.pinned.replace("sbs3-relay-", "sbs3-relay-absent-")
    assert main(["verify-release", signed.pinned, "--key", str(signed.pub),
                 "--hosts", NODE, "--image", missing]) == 7
    assert f"sparkbake: error: node {NODE} holds no {missing}\n" in capsys.readouterr().err
