"""publish of a multi-platform tag against a real docker-registry: each platform's image by
digest, then the OCI index of exactly those, then the release tag; skopeo reads it back.
The images are the tiny ones of test_publish, one per platform (linux/amd64, linux/arm64)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparkbake import planning
from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.errors import PublishError
from sparkbake.oci import docker_engine, image_layout
from tests.conftest import plain_console, printed, versions_yaml
from tests.faultproxy import Faults, fault_proxy
from tests.integration.test_publish import RUN, Local, Project, client, local, skopeo_digest

pytestmark = pytest.mark.docker

__all__ = ["client", "local"]  # the fixtures this module shares

RELEASE = "multi-1.0"
PLATFORMS = {"linux/amd64": "12.0a", "linux/arm64": "12.1a"}
TAGS = f"""\
  {RELEASE}:
    upstream: tree
    series: []
    platforms: {json.dumps(PLATFORMS)}
"""


@pytest.fixture
def project(client: docker_engine.Client, local: Local, tmp_path: Path) -> Project:
    repository = f"127.0.0.1:{local.port}/sparkbake-multi-{RUN}-{uuid.uuid4().hex[:6]}"
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "setup.py").write_text("# a stand-in upstream tree\n")
    (tmp_path / "versions.yaml").write_text(versions_yaml(repository=repository, tags=TAGS))
    config = config_mod.load(tmp_path / "versions.yaml")
    first = config.tag(f"{RELEASE}-amd64")
    return Project(client, config, planning.make(config, first), local.port)


def build_both(project: Project, smoked: tuple[str, ...] = ("amd64", "arm64")) -> None:
    for arch in ("amd64", "arm64"):
        project.build(f"payload for {arch}", tag=f"{RELEASE}-{arch}")
        if arch in smoked:
            project.smoke(tag=f"{RELEASE}-{arch}")


def publish(project: Project, registry_host: str | None = None, force: bool = False,
            ) -> dict[str, object]:
    from sparkbake.publish import release_index

    tags = project.config.targets(RELEASE)
    return printed(release_index.publish_release(project.client, project.config,
                                                 Settings.of_process(), RELEASE, tags,
                                                 registry_host, force, console=plain_console()))


def raw(ref: str) -> dict[str, object]:
    out = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw",
                          f"docker://{ref}"], capture_output=True, text=True, check=True)
    loaded: dict[str, object] = json.loads(out.stdout)
    return loaded


def test_the_release_is_an_index_of_each_platforms_smoked_digest(project: Project) -> None:
    build_both(project)
    record = publish(project)
    repository = str(record["repository"])
    index = raw(f"{repository}:{RELEASE}")
    assert index["mediaType"] == image_layout.INDEX_TYPE
    platforms: list[dict[str, Any]] = record["platforms"]  # type: ignore[assignment]
    manifests: list[dict[str, Any]] = index["manifests"]  # type: ignore[assignment]
    listed = [(m["platform"]["architecture"], m["digest"]) for m in manifests]
    assert listed == [("amd64", platforms[0]["digest"]), ("arm64", platforms[1]["digest"])]
    assert skopeo_digest(f"{repository}:{RELEASE}") == record["digest"]
    for platform in platforms:  # each by its own per-build tag, as smoked
        assert platform["smoke"]["result"] == "passed"
        [staging] = platform["images"]
        assert skopeo_digest(staging) == platform["digest"]
    saved = json.loads((project.config.build_dir / "releases" / f"{RELEASE}.json").read_text())
    assert saved["digest"] == record["digest"] and len(saved["platforms"]) == 2


def test_a_platform_without_a_passing_smoke_stops_it_before_anything_goes(
        project: Project) -> None:
    build_both(project, smoked=("amd64",))
    with pytest.raises(PublishError) as raised:
        publish(project)
    assert raised.value.exit_code == 7
    assert f"{RELEASE}-arm64" in raised.value.message
    probe = subprocess.run(["skopeo", "inspect", "--tls-verify=false",
                            f"docker://{project.config.tag(RELEASE + '-amd64').repository}:"
                            f"{RELEASE}"], capture_output=True, text=True, check=False)
    assert probe.returncode != 0  # no release tag, and nothing of amd64 sent either
    assert not (project.config.build_dir / "releases" / f"{RELEASE}.json").exists()


def test_publishing_again_sends_nothing_and_another_index_needs_force(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    build_both(project)
    first = publish(project)
    capsys.readouterr()
    again = publish(project)
    assert again["digest"] == first["digest"]
    assert "is already this release" in capsys.readouterr().err
    project.build("a new arm64 payload", tag=f"{RELEASE}-arm64")
    project.smoke(tag=f"{RELEASE}-arm64")
    with pytest.raises(PublishError, match="already points at"):
        publish(project)
    moved = publish(project, force=True)
    assert moved["digest"] != first["digest"]


def test_an_interrupted_publish_leaves_the_release_tag_and_a_rerun_completes(
        project: Project, local: Local) -> None:
    build_both(project)
    faults = Faults([("PUT", f"/manifests/{RELEASE}$", "drop")])
    with fault_proxy(f"http://127.0.0.1:{local.port}", faults) as port, \
            pytest.raises(PublishError):
        publish(project, registry_host=f"127.0.0.1:{port}")
    assert faults.done  # it was cut at the release tag's push
    repository = project.config.tag(f"{RELEASE}-amd64").repository
    probe = subprocess.run(["skopeo", "inspect", "--tls-verify=false",
                            f"docker://{repository}:{RELEASE}"],
                           capture_output=True, text=True, check=False)
    assert probe.returncode != 0  # the release tag did not move
    record = publish(project)
    assert skopeo_digest(f"{repository}:{RELEASE}") == record["digest"]


def test_a_registry_that_refuses_the_index_gets_no_release_tag(
        project: Project, local: Local) -> None:
    build_both(project)
    faults = Faults([("PUT", "/manifests/multi-1.0-[0-9a-f]{12}$", "415")])
    with fault_proxy(f"http://127.0.0.1:{local.port}", faults) as port, \
            pytest.raises(PublishError) as raised:
        publish(project, registry_host=f"127.0.0.1:{port}")
    assert faults.done and raised.value.exit_code == 7
    assert "refused the image index of the release" in raised.value.message
    assert "the release tag was not touched" in raised.value.message
    assert "OCI image indexes" in raised.value.remedy
    repository = project.config.tag(f"{RELEASE}-amd64").repository
    probe = subprocess.run(["skopeo", "inspect", "--tls-verify=false",
                            f"docker://{repository}:{RELEASE}"],
                           capture_output=True, text=True, check=False)
    assert probe.returncode != 0
    assert not (project.config.build_dir / "releases" / f"{RELEASE}.json").exists()
