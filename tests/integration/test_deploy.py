"""deploy to a second Docker engine: a dockerd this module starts on its own socket, data
root, exec root and bridge (no iptables), and stops by its PID at the end. It starts with no
images, so the fixture's release gets there by a pull from the embedded registry on
127.0.0.1 (the engine pulls over the host's network) or streamed from the local engine.

Its bridge is one of its own: `--bridge none` would make it delete the host's docker0, the
first engine's bridge (dockerd removes docker0 when its bridge is disabled).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from sparkbake.config.versions import Config
from sparkbake.oci import docker_engine, local_registry
from tests.conftest import Project, free_port, missing, plain_console

pytestmark = pytest.mark.docker

START_TIMEOUT = 60


@dataclasses.dataclass(frozen=True)
class Engine:
    url: str
    client: docker_engine.Client
    pid: int
    tcp_url: str  # the same engine on loopback TCP (no TLS: loopback only, tests only)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the dockerd this module started (its PID only) and wait for it."""
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


def _wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> docker_engine.Client:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(docker.errors.DockerException):
            client: docker_engine.Client = docker.DockerClient(base_url=url, timeout=600)
            client.ping()
            return client
        time.sleep(0.5)
    tail = log.read_text(errors="replace").strip().splitlines()[-3:]
    pytest.fail(f"the second dockerd did not answer at {url}: {' / '.join(tail)}")


def _links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


@contextlib.contextmanager
def _bridge() -> Iterator[str]:
    """A bridge interface of the second engine's own, removed afterwards."""
    name = f"sbd{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], check=False)


@pytest.fixture(scope="module")
def engine(docker_client: docker_engine.Client) -> Iterator[Engine]:
    """A second dockerd; short paths under /tmp, as unix socket paths are limited."""
    program = shutil.which("dockerd")
    if program is None or shutil.which("ip") is None or os.geteuid() != 0:
        missing("dockerd and ip run as root (apt-get install -y docker.io iproute2)")
    kept = _links() & {"docker0"}  # the first engine's bridge, if it has one
    home = Path(tempfile.mkdtemp(prefix="sbd-", dir="/tmp"))
    url = f"unix://{home}/docker.sock"
    tcp_url = f"tcp://127.0.0.1:{free_port()}"
    with _bridge() as bridge, (home / "dockerd.log").open("wb") as log:
        args = [program, "--host", url, "--host", tcp_url, "--data-root", str(home / "data"),
                "--exec-root", str(home / "exec"), "--pidfile", str(home / "docker.pid"),
                "--bridge", bridge, "--iptables=false", "--ip6tables=false", "--ip-masq=false"]
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            client = _wait_until_up(url, process, home / "dockerd.log")
            assert kept <= _links()
            yield Engine(url, client, process.pid, tcp_url)
            client.close()
        finally:
            _stop(process)
            shutil.rmtree(home, ignore_errors=True)
    assert kept <= _links()


@pytest.fixture
def node(engine: Engine) -> Iterator[Engine]:
    """The second engine, empty before the test and emptied after it."""
    assert engine.client.images.list(all=True) == []
    yield engine
    for image in engine.client.images.list(all=True):
        engine.client.images.remove(image.id, force=True)


@pytest.fixture(scope="module")
def registry_config(built_fixture: Project,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Config]:
    """An embedded registry of this module's own (its data outside the shared project)."""
    config = dataclasses.replace(built_fixture.config(),
                                 work=tmp_path_factory.mktemp("deploy-registry"))
    yield config
    local_registry.stop(config, plain_console())  # the fallback test may have stopped it already


@pytest.fixture(scope="module")
def release(built_fixture: Project, registry_config: Config) -> dict[str, Any]:
    """The fixture tag smoked and published to this module's registry: its release record."""
    port = free_port()
    local_registry.start(registry_config, plain_console(), port)
    assert built_fixture.sparkbake("smoke", "fixture") == 0
    assert built_fixture.sparkbake("publish", "fixture", "--registry", f"127.0.0.1:{port}") == 0
    record: dict[str, Any] = json.loads(
        (built_fixture.root / "build" / "releases" / "fixture.json").read_text())
    return record


def last_report(project: Project) -> dict[str, Any]:
    reports = sorted((project.root / "build" / "deploys").glob("fixture-*.json"))
    report: dict[str, Any] = json.loads(reports[-1].read_text())
    return report


def assert_deployed(node: Engine, release: dict[str, Any], host: dict[str, Any]) -> None:
    """The node runs the released image under the published names and smoke passed there."""
    assert host["result"] == "deployed" and host["host"] == node.url
    assert host["image_id"] == release["image_id"]
    for ref in release["images"]:
        assert node.client.images.get(ref).id == release["image_id"]
    checks = {c["name"]: c["status"] for c in host["smoke"]["checks"]}
    assert host["smoke"]["passed"] is True and host["smoke"]["counts"]["failed"] == 0
    assert checks["manifest"] == "passed" and checks["kernels"] == "passed"
    record = Path(host["smoke"]["record"])  # the node's record, beside the deploy report
    assert json.loads(record.read_text())["image_id"] == release["image_id"]
    assert record.with_suffix(".log").is_file()
    assert "/build/deploys/fixture-" in str(record)


def test_deploy_pulls_the_published_digest_on_the_node(
        built_fixture: Project, release: dict[str, Any], node: Engine,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.url) == 0
    assert f"deployed fixture ({release['image_id'][:19]}) to {node.url} (pull)" in \
        capsys.readouterr().err
    report = last_report(built_fixture)
    assert report["result"] == "deployed" and report["digest"] == release["digest"]
    assert report["hosts"][0]["method"] == "pull"
    assert release["pinned"] in node.client.images.get(release["image_id"]).attrs["RepoDigests"]
    assert_deployed(node, release, report["hosts"][0])


def test_deploy_reaches_a_node_over_tcp(
        built_fixture: Project, release: dict[str, Any], node: Engine) -> None:
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.tcp_url) == 0
    host = last_report(built_fixture)["hosts"][0]
    assert host["host"] == node.tcp_url and host["method"] == "pull"
    assert_deployed(dataclasses.replace(node, url=node.tcp_url), release, host)


def test_deploy_streams_the_image_and_smokes_it_on_the_node(
        built_fixture: Project, release: dict[str, Any], node: Engine,
        docker_client: docker_engine.Client) -> None:
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.url, "--stream") == 0
    host = last_report(built_fixture)["hosts"][0]
    assert host["method"] == "stream" and "pull_failed" not in host
    assert node.client.images.get(release["images"][0]).id == \
        docker_client.images.get(built_fixture.plan().tag.image_ref).id  # the local one
    assert node.client.images.get(release["image_id"]).attrs["RepoDigests"] == []  # not pulled
    assert_deployed(node, release, host)


def test_an_unreachable_node_is_exit_8_naming_it_before_any_work(
        built_fixture: Project, release: dict[str, Any], node: Engine,
        capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"tcp://127.0.0.1:{free_port()}"
    before = sorted((built_fixture.root / "build" / "deploys").glob("*.json"))
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts",
                                   f"{node.url},{dead}") == 8
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2].startswith(f"sparkbake: error: node {dead}: no Docker engine answers")
    assert err[-1].strip().startswith("->")
    assert node.client.images.list(all=True) == []  # the reachable node was left alone
    assert sorted((built_fixture.root / "build" / "deploys").glob("*.json")) == before


def test_a_tag_without_a_release_is_refused(built_fixture: Project,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert built_fixture.sparkbake("deploy", "fixture-plain", "--hosts",
                                   "unix:///nonexistent.sock") == 2
    assert "no release record of fixture-plain" in capsys.readouterr().err


def test_a_node_that_cannot_reach_the_registry_gets_the_image_streamed(
        built_fixture: Project, release: dict[str, Any], node: Engine,
        registry_config: Config) -> None:
    assert local_registry.stop(registry_config,
                               plain_console()) is True  # the registry is gone (last test)
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", node.url) == 0
    host = last_report(built_fixture)["hosts"][0]
    assert host["method"] == "stream"
    assert f"cannot pull {release['pinned']}" in host["pull_failed"]
    assert_deployed(node, release, host)


# --- a node over ssh:// ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ssh_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An sshd this module starts on a loopback port, with keys of its own, in front of the
    first engine (the node runs `docker system dial-stdio`, which reaches its default
    socket). Returns the node's URL and a folder with an `ssh` that reads this module's
    ssh config (OpenSSH reads ~/.ssh from the passwd entry, not from $HOME)."""
    sshd, keygen, client = "/usr/sbin/sshd", shutil.which("ssh-keygen"), shutil.which("ssh")
    if not Path(sshd).is_file() or keygen is None or client is None or os.geteuid() != 0:
        missing("sshd and ssh run as root (apt-get install -y openssh-server)")
    home = tmp_path_factory.mktemp("ssh")
    for key in ("host_key", "client_key"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(home / key)],
                       check=True)
    (home / "authorized_keys").write_text((home / "client_key.pub").read_text())
    port = free_port()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    log = (home / "sshd.log").open("wb")
    process = subprocess.Popen(
        [sshd, "-D", "-e", "-f", "/dev/null", "-o", f"ListenAddress=127.0.0.1:{port}",
         "-o", f"HostKey={home / 'host_key'}", "-o", f"AuthorizedKeysFile={home}/authorized_keys",
         "-o", "PermitRootLogin=prohibit-password", "-o", "StrictModes=no", "-o", "UsePAM=no",
         "-o", f"PidFile={home / 'sshd.pid'}"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    host_key = (home / "host_key.pub").read_text().split()[:2]
    (home / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_key)}\n")
    (home / "config").write_text(
        f"Host sparkbake-node\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
        f"  IdentityFile {home / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {home / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n")
    shim = home / "bin"
    shim.mkdir()
    (shim / "ssh").write_text(f'#!/bin/sh\nexec {client} -F {home / "config"} "$@"\n')
    (shim / "ssh").chmod(0o755)
    try:
        for _ in range(50):  # until sshd answers
            probe = subprocess.run([str(shim / "ssh"), "sparkbake-node", "true"],
                                   capture_output=True, check=False, timeout=30)
            if probe.returncode == 0:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"sshd did not answer: {(home / 'sshd.log').read_text()[-2000:]}")
        # the port in the URL: the docker SDK passes `-p 22` when it has none, over the config
        yield f"ssh://sparkbake-node:{port}", shim
    finally:
        _stop(process)
        log.close()


def test_deploy_reaches_a_node_over_ssh(
        built_fixture: Project, release: dict[str, Any], ssh_node: tuple[str, Path],
        docker_client: docker_engine.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    url, shim = ssh_node
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    assert built_fixture.sparkbake("deploy", "fixture", "--hosts", url) == 0
    host = last_report(built_fixture)["hosts"][0]
    assert host["result"] == "deployed" and host["host"] == url
    assert host["image_id"] == release["image_id"]
    assert host["smoke"]["passed"] is True
    for ref in release["images"]:  # the engine behind the ssh node is the first one
        assert docker_client.images.get(ref).id == release["image_id"]
