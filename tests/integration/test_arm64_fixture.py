"""linux/arm64 on this host, and one release of two platforms: the fixture tag
`fixture-multi` (tests/data/versions.yaml) made end to end for linux/amd64 natively and for
the Spark's linux/arm64, with its base made by debootstrap under qemu, its builder and nvcc
run emulated, and its bake's file work done natively; then smoked on each platform and
published as one OCI index to a registry with TLS by a private CA and a login, through a
registry link cut at the release tag first."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.oci import docker_engine, image_layout, local_registry
from tests.conftest import Project, copy_project, free_port, plain_console
from tests.faultproxy import Faults, fault_proxy
from tests.integration.test_deploy import Engine, engine, node
from tests.integration.test_publish_tls import (
    PASSWORD,
    USER,
    TlsRegistry,
    docker_client_config,
    login_by_helper,
    tls_registry,
    trust_ca,
)

pytestmark = [pytest.mark.docker, pytest.mark.required("prove-release")]

__all__ = ["docker_client_config", "engine", "node", "tls_registry"]  # fixtures shared here

RELEASE = "fixture-multi"
TAG = "fixture-multi-arm64"
ELF_AARCH64 = 183


@pytest.fixture(scope="module")
def built_arm64(docker_client: docker_engine.Client,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """Both platforms of the release built (`build-image fixture-multi`)."""
    project = copy_project(tmp_path_factory.mktemp("arm64") / "project")
    assert project.sparkbake("build-image", RELEASE) == 0
    yield project
    for tag in (TAG, f"{RELEASE}-amd64"):
        docker_client.images.remove(project.plan(tag).tag.image_ref, force=True)


def test_the_kernel_is_an_aarch64_library_with_sm_121a_sass(built_arm64: Project) -> None:
    plan = built_arm64.plan(TAG)
    folder = built_arm64.root / "wheels" / plan.wheels_key
    (wheel,) = folder.glob("*.whl")
    assert wheel.name.endswith("-linux_aarch64.whl")
    with zipfile.ZipFile(wheel) as archive:
        (library,) = [n for n in archive.namelist() if n.endswith(".so")]
        header = archive.read(library)[:20]
    assert int.from_bytes(header[18:20], "little") == ELF_AARCH64
    report = (folder / "wheels.json").read_text()
    assert '"sm_121a"' in report


def test_the_image_runs_aarch64_and_imports_its_kernel(
        built_arm64: Project, docker_client: docker_engine.Client) -> None:
    ref = built_arm64.plan(TAG).tag.image_ref
    attrs = docker_engine.image_attrs(docker_client, ref)
    assert attrs["Architecture"] == "arm64"
    ran = docker_engine.run_container(
        docker_client, ref, ["-c", "import platform, tinykern; print(platform.machine(), "
                                   "tinykern.__name__)"],
        entrypoint=["/opt/venv/bin/python"], network=False)
    assert ran.exit_code == 0, ran.output
    assert ran.output.strip().splitlines()[-1] == "aarch64 tinykern"


@pytest.fixture(scope="module")
def smoked(built_arm64: Project) -> Project:
    """Both platforms smoked (`smoke fixture-multi`), arm64 under emulation."""
    assert built_arm64.sparkbake("smoke", RELEASE) == 0
    return built_arm64


def test_smoke_passes_on_each_platform_arm64_under_emulation(smoked: Project) -> None:
    for tag in (f"{RELEASE}-amd64", TAG):
        record = json.loads((smoked.root / "build" / "smoke" / f"{tag}.json").read_text())
        assert record["passed"] is True


def test_the_release_is_published_whole_after_a_cut_and_each_child_runs_on_its_platform(
        smoked: Project, tls_registry: TlsRegistry, docker_client_config: Path,
        docker_client: docker_engine.Client) -> None:
    built_arm64 = smoked
    certs = trust_ca(docker_client_config, tls_registry)
    login_by_helper(docker_client_config, tls_registry.host, PASSWORD)
    faults = Faults([("PUT", f"/manifests/{RELEASE}$", "drop")])
    with fault_proxy(f"https://{tls_registry.host}", faults, verify=str(tls_registry.certs.ca)) \
            as port:
        (docker_client_config / "docker" / "config.json").write_text(json.dumps(
            {"credHelpers": {tls_registry.host: "sbtest", f"127.0.0.1:{port}": "sbtest"}}))
        assert built_arm64.sparkbake("publish", RELEASE, "--registry", f"127.0.0.1:{port}") == 7
    assert faults.done == [f"drop PUT /v2/sparkbake-fixture/manifests/{RELEASE}"]
    repository = f"{tls_registry.host}/sparkbake-fixture"
    skopeo = ["skopeo", "inspect", "--cert-dir", str(certs), "--creds", f"{USER}:{PASSWORD}"]
    cut = subprocess.run([*skopeo, f"docker://{repository}:{RELEASE}"], capture_output=True,
                         check=False)
    assert cut.returncode != 0  # the link was cut at the release tag: it does not exist
    assert built_arm64.sparkbake("publish", RELEASE, "--registry", tls_registry.host) == 0
    record = json.loads((built_arm64.root / "build" / "releases" / f"{RELEASE}.json").read_text())
    index = json.loads(subprocess.run([*skopeo, "--raw", f"docker://{repository}:{RELEASE}"],
                                      capture_output=True, text=True, check=True).stdout)
    assert index["mediaType"] == image_layout.INDEX_TYPE
    assert [(m["platform"]["architecture"], m["digest"]) for m in index["manifests"]] == \
        [("amd64", record["platforms"][0]["digest"]), ("arm64", record["platforms"][1]["digest"])]
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
        local = f"sparkbake-child-{arch}:latest"
        subprocess.run(["skopeo", "copy", "--src-cert-dir", str(certs), "--src-creds",
                        f"{USER}:{PASSWORD}", "--override-arch", arch,
                        f"docker://{repository}@{record['digest']}", f"docker-daemon:{local}"],
                       capture_output=True, check=True)
        ran = docker_engine.run_container(
            docker_client, local, ["-c", "import platform; print(platform.machine())"],
            entrypoint=["/opt/venv/bin/python"], network=False)
        docker_client.images.remove(local, force=True)
        assert ran.output.strip().splitlines()[-1] == machine
    assert built_arm64.sparkbake("publish", RELEASE, "--registry", tls_registry.host) == 0
    again = json.loads((built_arm64.root / "build" / "releases" / f"{RELEASE}.json").read_text())
    assert again["digest"] == record["digest"]
    assert [p["transfer"]["sent"]["blobs"] for p in again["platforms"]] == [0, 0]


def test_deploy_pulls_the_index_and_the_node_holds_its_platforms_image(
        smoked: Project, node: Engine, tmp_path: Path) -> None:
    registry = dataclasses.replace(smoked.config(), work=tmp_path)
    port = free_port()
    local_registry.start(registry, plain_console(), port)
    try:
        assert smoked.sparkbake("publish", RELEASE, "--registry", f"127.0.0.1:{port}") == 0
        record = json.loads((smoked.root / "build" / "releases" / f"{RELEASE}.json").read_text())
        assert smoked.sparkbake("deploy", RELEASE, "--hosts", node.url) == 0
    finally:
        local_registry.stop(registry, plain_console())
    amd64 = record["platforms"][0]
    [report] = sorted((smoked.root / "build" / "deploys").glob(f"{RELEASE}-amd64-*.json"))
    [host] = json.loads(report.read_text())["hosts"]
    assert (host["result"], host["method"]) == ("deployed", "pull")
    assert host["image_id"] == amd64["image_id"]  # the node's engine took its platform's
    assert host["repo_digest"] == record["pinned"]  # ... from the release's index
    for ref in record["images"]:
        assert node.client.images.get(ref).id == amd64["image_id"]
