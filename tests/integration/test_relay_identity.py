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
import json
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
    return publish_signed(client, local, tmp_path)


def publish_signed(client: docker_engine.Client, local: Local, tmp_path: Path,
                   prefix: str = "sbs3") -> Signed:
    """The fixture's release built, smoked and published signed to the embedded registry,
    in a repository named with prefix."""
    repository = f"127.0.0.1:{local.port}/{prefix}-relay-{RUN}-{uuid.uuid4().hex[:6]}"
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


def relayed(pinned: str, work: Path, change_layer: bool = False, prefix: str = "sbs3",
            beside: bool = False) -> str:
    """A copy of the release pinned in another repository (PREFIX-relay-copy-*; with beside,
    its own, as tag `relayed`) with every layer compressed again (and, with change_layer,
    its last layer's contents changed): its repository@digest."""
    repository, _, digest = pinned.partition("@")
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
    copy = repository if beside else \
        f"{repository.partition('/')[0]}/{prefix}-relay-copy-{uuid.uuid4().hex[:8]}"
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
    copy = relayed(signed.pinned, tmp_path)
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


def test_the_signed_digest_pulled_verifies_by_its_manifest_digest(
        client: docker_engine.Client, signed: Signed, pulled: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    pull(client, signed.pinned, pulled)
    assert main(["verify-release", signed.pinned, "--key", str(signed.pub),
                 "--hosts", NODE]) == 0
    assert f"verified node {NODE}: {signed.pinned} = {signed.pinned} by its manifest digest " \
        f"{signed.pinned.partition('@')[2][:19]}\n" in capsys.readouterr().err


def test_image_without_hosts_is_a_usage_error(signed: Signed,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify-release", signed.pinned, "--key", str(signed.pub),
                 "--image", "relay/app:1"]) == 2
    assert "sparkbake: error: --image names the image on the nodes of --hosts: add --hosts " \
        "URL,URL\n" in capsys.readouterr().err


def test_a_copy_with_one_layer_changed_is_refused_in_one_line(
        client: docker_engine.Client, signed: Signed, pulled: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    copy = relayed(signed.pinned, tmp_path, change_layer=True)
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


def deploy_signed(signed: Signed) -> int:
    return main(["--config", str(signed.project.config.path), "deploy", TAG,
                 "--hosts", "tcp://127.0.0.1:9", "--require-signature", str(signed.pub)])


def test_deploy_checks_the_record_against_the_config_the_signed_manifest_names(
        signed: Signed, capsys: pytest.CaptureFixture[str]) -> None:
    assert deploy_signed(signed) == 8  # the signature and the record hold; no node answers
    assert "node tcp://127.0.0.1:9: no Docker engine answers" in capsys.readouterr().err
    path = signed.project.release
    record = json.loads(path.read_text())
    other = f"sha256:{'e' * 64}"
    path.write_text(json.dumps({**record, "image_id": other}))
    assert deploy_signed(signed) == 7
    assert f"sparkbake: error: the release record of {TAG} names image {other[:19]}, but the " \
        f"signed {signed.pinned} names config {signed.config[:19]}\n" in capsys.readouterr().err


def up_signed(signed: Signed, image: str, tmp_path: Path) -> int:
    head = tmp_path / "head.env"
    head.write_text("NNODES=1\nNODE_RANK=0\n")
    return main(["--config", str(signed.project.config.path), "up", TAG, str(head),
                 "--image", image, "--require-signature", str(signed.pub)])


def test_up_checks_a_relayed_copy_by_its_config_before_the_files(
        client: docker_engine.Client, signed: Signed, pulled: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    copy = relayed(signed.pinned, tmp_path)
    pull(client, copy, pulled)
    code = up_signed(signed, copy, tmp_path)
    err = capsys.readouterr().err
    assert f"verified node {NODE}: {copy} = {signed.pinned} by its config digest " \
        f"{signed.config[:19]} and 2 layer DiffIDs" in err
    assert code == 2  # then check-env refuses this stand-in file: the check came first
    assert f"sparkbake: error: check-env for {TAG}: 1 of 1 file(s) with preflight errors" in err


def test_up_refuses_a_tag_never_published_with_require_signature(
        signed: Signed, local: Local, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repository = f"127.0.0.1:{local.port}/sbs3-relay-unpublished-{uuid.uuid4().hex[:6]}"
    config = registry_config(tmp_path / "other", repository)
    head = tmp_path / "head.env"
    head.write_text("NNODES=1\n")
    assert main(["--config", str(config.path), "up", TAG, str(head),
                 "--require-signature", str(signed.pub)]) == 7
    assert f"sparkbake: error: {repository}:{TAG} is not in its registry: no signed release " \
        "to check the nodes' image against\n" in capsys.readouterr().err


def test_up_refuses_a_copy_with_one_layer_changed_before_anything_runs(
        client: docker_engine.Client, signed: Signed, pulled: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    copy = relayed(signed.pinned, tmp_path, change_layer=True)
    pull(client, copy, pulled)
    changed = docker_engine.image_attrs(client, copy)["Id"]
    assert up_signed(signed, copy, tmp_path) == 7
    assert f"sparkbake: error: node {NODE}: {copy}: layer 2 of 2 has DiffID " in \
        capsys.readouterr().err
    assert not [box.id for box in client.containers.list(all=True)
                if box.attrs.get("Image") == changed]  # no preflight, no start
