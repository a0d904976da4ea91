"""verify-release --rebuild against the embedded registry: the fixture's image published
signed rebuilds from its versions.yaml to the registry's digest, bit for bit, in a scratch
folder that leaves the project's build/ and wheels/ as they were; a signed image whose
provenance matches the versions.yaml but whose layers were not built from it fails with
exit 7, naming the first layer that differs. One clean build of the fixture each."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from sparkbake import planning
from sparkbake.__main__ import main
from sparkbake.attest import signing
from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.oci import docker_engine, image_layout
from sparkbake.publish import push
from tests.conftest import Project, copy_project, plain_console, printed
from tests.integration.test_publish import Local, client, local
from tests.integration.test_publish import Project as FakeBaker

pytestmark = pytest.mark.docker

__all__ = ["client", "local"]  # the fixtures this module shares

TAG = "fixture"


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return signing.generate(tmp_path / "signing.key", None)[0]


def publish_signed(client: docker_engine.Client, project: Project, local: Local,
                   key: Path) -> dict[str, Any]:
    """The project's baked image of TAG pushed to the embedded registry, signed."""
    config = project.config()
    plan = planning.make(config, config.tag(TAG))
    return printed(push.publish(client, config, Settings.of_process(), plan,
                                f"127.0.0.1:{local.port}", False, skip_smoke=True,
                                key=signing.signing_key(key, None), console=plain_console()))


def verify_rebuild(record: dict[str, Any], key: Path, project: Project) -> int:
    return main(["verify-release", f"{record['repository']}:{TAG}", "--key", f"{key}.pub",
                 "--against", str(project.config_path), "--rebuild"])


def test_a_signed_release_rebuilds_to_the_registrys_digest_leaving_the_caches(
        built_fixture: Project, client: docker_engine.Client, local: Local, key: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = copy_project(tmp_path / "project")  # built_fixture's image; its build/ unedited
    shutil.copytree(built_fixture.root / "build" / "oci", project.root / "build" / "oci")
    record = publish_signed(client, project, local, key)
    before = sorted(p.name for p in (project.root / "build").iterdir())
    capsys.readouterr()
    assert verify_rebuild(record, key, project) == 0
    err = capsys.readouterr().err
    assert f"verify-release: rebuilding {TAG} from clean in " in err
    assert [line.split()[:2] for line in err.splitlines() if line.startswith("bake ")] == \
        [["bake", "ran"]]  # built, not found in a cache
    assert f"rebuilt {TAG}: {record['digest']} = the registry's (bit for bit)\n" in err
    assert not (project.root / "wheels").exists()
    assert sorted(p.name for p in (project.root / "build").iterdir()) == [*before, "verify"]
    assert list((project.root / "build" / "verify").iterdir()) == []


@pytest.mark.required("repro-builds")
def test_a_signed_image_not_built_from_its_pins_fails_naming_the_first_layer(
        client: docker_engine.Client, local: Local, key: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny image labelled with the fixture's inputs, published signed: its provenance
    matches the versions.yaml, its layers are not what the versions.yaml builds."""
    project = copy_project(tmp_path / "project")
    text = project.config_path.read_text().replace("sparkbake-fixture", "sparkbake-forged")
    project.config_path.write_text(text)  # its own engine tag: the fixture's stays
    config = config_mod.load(project.config_path)
    FakeBaker(client, config, planning.make(config, config.tag(TAG)), local.port).build(
        "forged", tag=TAG)
    record = publish_signed(client, project, local, key)
    capsys.readouterr()
    assert verify_rebuild(record, key, project) == 7
    err = capsys.readouterr().err
    assert f"matches {project.config_path} for {TAG}" in err  # the rebuild came after
    error = err[err.index("sparkbake: error:"):].splitlines()
    assert len(error) == 2
    assert f"rebuilt {TAG}: sha256:" in error[0]
    assert f", not the registry's {record['digest']}: layer 0 (" in error[0]
    forged = image_layout.Layout(config.build_dir / "oci",
                                 console=plain_console()).read_json(record["digest"])["layers"]
    assert f") is {forged[0]['digest']} there, sha256:" in error[0]
    assert error[0].endswith(" rebuilt")
    assert f"verify {TAG} --against {record['digest']}" in error[1]
