"""deploy --require-signature onto a node that already holds the signed release as a relay
left it: a copy whose every layer was compressed again, pulled from another repository, so
its manifest digest is not the signed one. deploy finds it present, checks it by the config
digest and DiffIDs the signed manifest names, says so, records the identity in its report
and smokes it there. The node is test_deploy's second engine, emptied after the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkbake.attest import signing
from tests.conftest import Project
from tests.integration.test_deploy import (
    Engine,
    assert_deployed,
    engine,
    last_report,
    node,
    registry_config,
    release,
)
from tests.integration.test_relay_identity import relayed

pytestmark = pytest.mark.docker

__all__ = ["engine", "node", "registry_config", "release"]  # the fixtures this module shares


def test_deploy_verifies_a_relayed_copy_by_its_config_and_says_so(
        built_fixture: Project, release: dict[str, Any], node: Engine, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    key = signing.generate(tmp_path / "signing.key", None)[0]
    registry = release["repository"].partition("/")[0]
    assert built_fixture.sparkbake("publish", "fixture", "--registry", registry,
                                   "--sign-key", str(key)) == 0
    copy = relayed(release["pinned"], tmp_path)
    for chunk in node.client.api.pull(copy, stream=True, decode=True):
        assert "error" not in chunk, chunk
    capsys.readouterr()
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.url,
                                   "--require-signature", f"{key}.pub") == 0
    err = capsys.readouterr().err
    layers = len(node.client.images.get(copy).attrs["RootFS"]["Layers"])
    assert f"(verified by its config digest {release['image_id'][:19]} and {layers} layer " \
        f"DiffIDs (its manifest was rewritten: held as {copy.partition('@')[2][:19]}))" in err
    host = last_report(built_fixture)["hosts"][0]
    assert host["method"] == "present" and host["identity"] == "config digest and DiffIDs"
    assert_deployed(node, release, host)
