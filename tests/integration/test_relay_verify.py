"""verify-release run on a relay's copy of a signed release, and verify-release --hosts --json.

A copy whose manifest a relay rewrote (test_relay_identity's: every layer compressed again,
the same config and DiffIDs, another manifest digest) has no signature. verify-release on it
names the signed release whose config it holds, found through this project's release records
or through its config's tag label in its own repository, and the check to run instead, in
one line and its remedy, exit 7; a copy with one layer changed (another config) is still
just not signed. With --hosts and --json, each node's check is in the JSON, with the identity
it held by. Repositories here start with sbs4-; pulled names are removed after each test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.attest import signing
from sparkbake.oci import docker_engine
from tests.integration.test_publish import Local, client, local
from tests.integration.test_relay_identity import (
    NODE,
    Signed,
    publish_signed,
    pull,
    pulled,
    relayed,
)

pytestmark = pytest.mark.docker

__all__ = ["client", "local", "pulled"]  # the fixtures this module shares

PREFIX = "sbs4"


@pytest.fixture
def signed(client: docker_engine.Client, local: Local, tmp_path: Path) -> Signed:
    return publish_signed(client, local, tmp_path, PREFIX)


def verify(signed: Signed, reference: str, *args: str, project: bool = True) -> int:
    config = ["--config", str(signed.project.config.path)] if project else []
    return main([*config, "verify-release", reference, "--key", str(signed.pub), *args])


def copy_line(signed: Signed, copy: str) -> str:
    return (f"sparkbake: error: {copy} is not signed: it holds the config "
            f"{signed.config[:19]} of the signed release {signed.pinned}, under another "
            "manifest (a relay's copy: no signature covers it)\n")


def test_a_relayed_copy_names_the_signed_release_of_the_projects_record(
        signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = relayed(signed.pinned, tmp_path, prefix=PREFIX)
    assert verify(signed, copy) == 7
    err = capsys.readouterr().err
    assert copy_line(signed, copy) in err
    assert ("  -> verify the release and, by its config digest and DiffIDs, the image each "
            f"node holds: `sparkbake --config {signed.project.config.path} verify-release "
            f"{signed.pinned} --key {signed.pub} --hosts URL,URL --image {copy}`\n") in err


def test_a_copy_beside_the_release_is_found_by_its_configs_tag_label(
        signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No project here: the config's dev.sparkbake.tag names the release in the copy's own
    repository."""
    copy = relayed(signed.pinned, tmp_path, prefix=PREFIX, beside=True)
    assert verify(signed, copy, project=False) == 7
    assert copy_line(signed, copy) in capsys.readouterr().err


def test_an_unknown_or_changed_copy_is_just_not_signed(
        signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without the project and in another repository, no release is known to compare; with
    one layer changed, its config is another: the old line, no release named."""
    for copy, project in ((relayed(signed.pinned, tmp_path / "a", prefix=PREFIX), False),
                          (relayed(signed.pinned, tmp_path / "b", True, PREFIX), True)):
        assert verify(signed, copy, project=project) == 7
        err = capsys.readouterr().err
        digest = copy.rpartition("@")[2]
        assert f"sparkbake: error: {copy} is not signed (no {signing.signature_tag(digest)})\n" \
            in err, err
        assert signed.pinned not in err


def test_hosts_json_gives_each_nodes_check_and_its_identity(
        client: docker_engine.Client, signed: Signed, pulled: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    copy = relayed(signed.pinned, tmp_path, prefix=PREFIX)
    pull(client, copy, pulled)
    digest = signed.pinned.partition("@")[2]
    assert verify(signed, signed.pinned, "--hosts", NODE, "--image", copy, "--json") == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert shown["reference"] == signed.pinned
    assert shown["nodes"] == [{
        "node": NODE, "image": copy, "reference": signed.pinned,
        "identity": "config digest and DiffIDs", "image_id": signed.config,
        "manifests": [copy.rpartition("@")[2]], "layers": 2, "signed": digest}]
    pull(client, signed.pinned, pulled)
    assert verify(signed, signed.pinned, "--hosts", NODE, "--json") == 0
    [node] = json.loads(capsys.readouterr().out)[0]["nodes"]
    assert (node["image"], node["identity"], node["signed"]) == (
        signed.pinned, "manifest digest", digest)
    assert verify(signed, signed.pinned, "--json") == 0
    assert "nodes" not in json.loads(capsys.readouterr().out)[0]
