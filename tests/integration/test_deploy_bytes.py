"""Only changed bytes travel on publish and deploy of the fixture: a first publish to a fresh
registry sends every blob and a node without the image pulls every layer; a repeat of either
moves nothing and says so. The node and the registry are test_deploy's fixtures, run for this
module too (a second dockerd of its own, its own embedded registry)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Project
from tests.integration import test_deploy
from tests.integration.test_deploy import Engine, last_report

pytestmark = pytest.mark.docker

engine = test_deploy.engine
node = test_deploy.node
registry_config = test_deploy.registry_config
release = test_deploy.release


def layer_sizes(release: dict[str, Any]) -> list[int]:
    """The sizes of the release's layer blobs (its blobs but the config, the image ID)."""
    return [b["size"] for b in release["transfer"]["blobs"] if b["digest"] != release["image_id"]]


def test_a_first_publish_sends_every_blob_and_a_first_pull_every_layer(
        built_fixture: Project, release: dict[str, Any], node: Engine,
        capsys: pytest.CaptureFixture[str]) -> None:
    blobs = release["transfer"]["blobs"]
    assert release["transfer"]["sent"] == {"blobs": len(blobs),
                                           "bytes": sum(b["size"] for b in blobs)}
    assert release["transfer"]["present"] == {"blobs": 0, "bytes": 0}
    capsys.readouterr()
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.url) == 0
    host = last_report(built_fixture)["hosts"][0]
    layers = layer_sizes(release)
    assert host["method"] == "pull"
    assert host["pulled"] == {"layers": len(layers), "bytes": sum(layers)}
    assert host["present"] == {"layers": 0, "bytes": 0}
    assert f"deploy: {node.url}: pulled {len(layers)} of {len(layers)} layers (" in \
        capsys.readouterr().err


def test_a_repeat_publish_and_deploy_of_the_digest_move_nothing_and_say_so(
        built_fixture: Project, release: dict[str, Any], node: Engine,
        capsys: pytest.CaptureFixture[str]) -> None:
    registry = release["repository"].split("/")[0]
    capsys.readouterr()
    assert built_fixture.sparkbake("publish", "fixture", "--registry", registry) == 0
    again = json.loads((built_fixture.root / "build" / "releases" / "fixture.json").read_text())
    assert again["digest"] == release["digest"]
    assert again["transfer"]["sent"] == {"blobs": 0, "bytes": 0}
    assert again["transfer"]["present"] == release["transfer"]["sent"]
    assert f"nothing to send: the registry has every blob of {release['digest']}" in \
        capsys.readouterr().err
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.url) == 0
    assert last_report(built_fixture)["hosts"][0]["method"] == "pull"
    capsys.readouterr()
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.url) == 0
    host = last_report(built_fixture)["hosts"][0]
    assert host["method"] == "present" and host["result"] == "deployed"
    layers = layer_sizes(release)
    assert host["pulled"] == {"layers": 0, "bytes": 0}
    assert host["present"] == {"layers": len(layers), "bytes": sum(layers)}
    err = capsys.readouterr().err
    assert f"deploy: {node.url}: {release['image_id'][:19]} already present (" in err
    assert "nothing pulled" in err


def test_a_stream_counts_the_bytes_it_sent(
        built_fixture: Project, release: dict[str, Any], node: Engine,
        capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.url, "--stream") == 0
    host = last_report(built_fixture)["hosts"][0]
    assert host["method"] == "stream"
    assert host["streamed"]["bytes"] > sum(layer_sizes(release))  # docker save: whole tars
    assert f"deploy: {node.url}: streamed " in capsys.readouterr().err
