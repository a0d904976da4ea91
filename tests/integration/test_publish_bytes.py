"""Only changed bytes travel on publish: against the real embedded registry, with the tiny
images of test_publish (its fixtures; here of two layers, a base layer shared by the tags).
What was sent is judged by the blobs' sizes in build/oci."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkbake.oci import image_layout
from tests.conftest import plain_console
from tests.integration import test_publish
from tests.integration.test_publish import NEXT, TAG, Project, skopeo_digest

# test_publish's fixtures, run for this module too: the engine, its own registry, a project
client = test_publish.client
local = test_publish.local
project = test_publish.project

pytestmark = pytest.mark.docker


def blob_sizes(project: Project, digest: str) -> dict[str, int]:
    """The image's blobs (config and layers) in build/oci: digest -> size."""
    doc = image_layout.Layout(project.config.build_dir / "oci",
                              console=plain_console()).read_json(digest)
    return {str(b["digest"]): int(b["size"]) for b in [doc["config"], *doc["layers"]]}


def sent_digests(record: dict[str, Any]) -> set[str]:
    return {b["digest"] for b in record["transfer"]["blobs"] if b["sent"]}


def test_a_first_publish_sends_every_blob_and_a_repeat_sends_none(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    project.build("payload", base="base " * 1000)
    project.smoke()
    capsys.readouterr()
    first = project.publish()
    sizes = blob_sizes(project, first["digest"])
    assert len(sizes) == 3
    assert first["transfer"]["sent"] == {"blobs": 3, "bytes": sum(sizes.values())}
    assert first["transfer"]["present"] == {"blobs": 0, "bytes": 0}
    assert sent_digests(first) == set(sizes)
    assert "publish: 3 of 3 blobs sent (" in capsys.readouterr().err
    again = project.publish()
    assert again["digest"] == first["digest"]
    assert again["transfer"]["sent"] == {"blobs": 0, "bytes": 0}
    assert again["transfer"]["present"] == {"blobs": 3, "bytes": sum(sizes.values())}
    assert json.loads(project.release.read_text())["transfer"] == again["transfer"]
    err = capsys.readouterr().err
    assert f"nothing to send: the registry has every blob of {first['digest']}" in err
    assert f"verified 127.0.0.1:{project.port}/" in err  # still verified, as before
    assert skopeo_digest(f"{project.plan.tag.repository}:{TAG}") == first["digest"]


def test_a_second_tag_sharing_the_base_layer_sends_only_its_new_blobs(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    base = "shared base layer " * 2000
    project.build("first", base=base)
    project.smoke()
    first = project.publish()
    project.build("second", base=base, tag=NEXT)
    project.smoke(tag=NEXT)
    capsys.readouterr()
    second = project.publish(tag=NEXT)
    old, new = blob_sizes(project, first["digest"]), blob_sizes(project, second["digest"])
    shared = set(old) & set(new)
    assert len(shared) == 1  # the base layer; the configs and the payloads differ
    fresh = {digest: size for digest, size in new.items() if digest not in shared}
    assert sent_digests(second) == set(fresh)
    assert second["transfer"]["sent"] == {"blobs": 2, "bytes": sum(fresh.values())}
    assert second["transfer"]["present"] == {"blobs": 1, "bytes": new[shared.pop()]}
    assert "publish: 2 of 3 blobs sent (" in capsys.readouterr().err
    assert skopeo_digest(f"{project.plan.tag.repository}:{NEXT}") == second["digest"]
