"""publish to registries as users run them. One set up the usual way: docker-registry with
TLS by a private CA and an htpasswd login, on this host's own (not loopback) address,
trusted the way Docker is told (certs.d/HOST:PORT/ca.crt) and logged in through a credential
helper on PATH; skopeo, given the same CA and login, is the judge of what it serves. And one
behind a proxy that drops a blob upload's connection and answers the next with 503: publish
sends again."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from sparkbake.errors import PublishError
from sparkbake.oci import docker_engine
from tests.conftest import free_port
from tests.faultproxy import Faults, fault_proxy
from tests.integration.test_publish import Local, Project, client, local, project
from tests.tlscerts import Certs, make_certs
from tests.tokenserver import ISSUER, SERVICE, Issued, token_server

pytestmark = pytest.mark.docker

__all__ = ["client", "local", "project"]  # the fixtures this module shares

USER, PASSWORD = "sparky", "s3cret-pass"


def host_address() -> str:
    """This host's first address that is not loopback: a registry there is secure to Docker."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True)
    addresses = [a for a in found.stdout.split() if "." in a and not a.startswith("127.")]
    assert addresses, "needs an IPv4 address besides loopback"
    return addresses[0]


@dataclass(frozen=True)
class TlsRegistry:
    host: str  # address:port
    certs: Certs


@pytest.fixture(scope="module")
def tls_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRegistry]:
    root = tmp_path_factory.mktemp("tls-registry")
    address, port = host_address(), free_port()
    certs = make_certs(root / "certs", names=("registry.sparkbake.test",),
                       addresses=(address, "127.0.0.1"))
    with warnings.catch_warnings():  # crypt: the one bcrypt here, deprecated after 3.12
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        hashed = crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH))
    (root / "htpasswd").write_text(f"{USER}:{hashed}\n")
    (root / "config.yml").write_text(json.dumps({
        "version": 0.1, "storage": {"filesystem": {"rootdirectory": str(root / "data")}},
        "http": {"addr": f"{address}:{port}",
                 "tls": {"certificate": str(certs.cert), "key": str(certs.key)}},
        "auth": {"htpasswd": {"realm": "sparkbake-test", "path": str(root / "htpasswd")}}}))
    log = (root / "registry.log").open("wb")
    server = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(f"https://{address}:{port}/v2/", certs.ca)
        yield TlsRegistry(f"{address}:{port}", certs)
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def _wait_for(url: str, ca: Path) -> None:
    for _ in range(100):
        try:
            if requests.get(url, verify=str(ca), timeout=2).status_code == 401:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the TLS registry did not come up at {url}")


@pytest.fixture
def docker_client_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's Docker client config, certs.d (a rootless engine's place) and PATH."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "docker").mkdir()
    (tmp_path / "bin").mkdir()
    return tmp_path


def trust_ca(home: Path, registry: TlsRegistry) -> Path:
    folder = home / "xdg" / "docker" / "certs.d" / registry.host
    folder.mkdir(parents=True)
    (folder / "ca.crt").write_bytes(registry.certs.ca.read_bytes())
    return folder


def login_by_helper(home: Path, host: str, password: str) -> None:
    """credHelpers names docker-credential-sbtest for the registry, as `docker login` keeps
    it on a desktop or with `pass`."""
    helper = home / "bin" / "docker-credential-sbtest"
    answer = json.dumps({"Username": USER, "Secret": password})
    helper.write_text(f"#!/bin/sh\nread server\necho '{answer}'\n")
    helper.chmod(0o755)
    (home / "docker" / "config.json").write_text(json.dumps(
        {"credHelpers": {host: "sbtest"}}))


def test_publish_over_tls_with_dockers_trust_and_a_credential_helpers_login(
        project: Project, tls_registry: TlsRegistry, docker_client_config: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    certs_dir = trust_ca(docker_client_config, tls_registry)
    login_by_helper(docker_client_config, tls_registry.host, PASSWORD)
    project.build("over tls")
    project.smoke()
    capsys.readouterr()
    record = project.publish(registry_host=tls_registry.host)
    assert record["repository"].startswith(f"{tls_registry.host}/sparkbake-test-")
    assert "plain HTTP" not in capsys.readouterr().err
    served = subprocess.run(
        ["skopeo", "inspect", "--cert-dir", str(certs_dir), "--creds", f"{USER}:{PASSWORD}",
         "--format", "{{.Digest}}", f"docker://{record['repository']}:{record['tag']}"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert served == record["digest"]
    again = project.publish(registry_host=tls_registry.host)  # nothing new to send
    assert again["transfer"]["sent"] == {"blobs": 0, "bytes": 0}


def test_an_unknown_ca_is_one_line_and_nothing_is_published(
        project: Project, tls_registry: TlsRegistry, docker_client_config: Path) -> None:
    login_by_helper(docker_client_config, tls_registry.host, PASSWORD)
    project.build("unknown ca")
    project.smoke()
    with pytest.raises(PublishError) as raised:
        project.publish(registry_host=tls_registry.host)
    assert raised.value.exit_code == 7
    assert raised.value.message.startswith(
        f"registry {tls_registry.host}: TLS verification failed with the trust of ")
    assert f"/etc/docker/certs.d/{tls_registry.host}/ca.crt" in raised.value.remedy
    assert not project.release.exists()


def test_a_wrong_password_is_one_line_and_nothing_is_published(
        project: Project, tls_registry: TlsRegistry, docker_client_config: Path) -> None:
    trust_ca(docker_client_config, tls_registry)
    login_by_helper(docker_client_config, tls_registry.host, "not-the-password")
    project.build("wrong password")
    project.smoke()
    with pytest.raises(PublishError) as raised:
        project.publish(registry_host=tls_registry.host)
    assert raised.value.exit_code == 7
    assert raised.value.message.startswith(
        f"{tls_registry.host} refused the login of {USER} at ")
    assert f"docker login {tls_registry.host}" in raised.value.remedy
    assert not project.release.exists()


def test_the_engine_lists_loopback_among_its_insecure_registries(
        client: docker_engine.Client) -> None:
    cidrs, _ = docker_engine.insecure_registries(client)
    assert "127.0.0.0/8" in cidrs


def test_a_blob_upload_is_sent_again_after_a_dropped_connection_and_a_5xx(
        project: Project, local: Local, capsys: pytest.CaptureFixture[str]) -> None:
    """The first upload's connection dropped (no answer to name the step by), the next
    answered 503: both sent again."""
    faults = Faults([("PUT", "/blobs/uploads/", "drop"), ("PUT", "/blobs/uploads/", "503")])
    with fault_proxy(f"http://127.0.0.1:{local.port}", faults) as port:
        project.build("flaky")
        project.smoke()
        capsys.readouterr()
        record = project.publish(registry_host=f"127.0.0.1:{port}")
    assert faults.pending == [] and len(faults.done) == 2
    err = capsys.readouterr().err
    assert "failed (the connection dropped); again in 1 s" in err
    assert "failed (HTTP 503); again in 2 s" in err
    repository = record["repository"].replace(f":{port}/", f":{local.port}/")
    served = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format",
                             "{{.Digest}}", f"docker://{repository}:{record['tag']}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert served == record["digest"]


@pytest.fixture
def token_registry(tmp_path: Path) -> Iterator[tuple[str, Issued]]:
    """docker-registry on 127.0.0.1 asking for tokens of this module's token server."""
    certs = make_certs(tmp_path / "signing", names=("tokens.sparkbake.test",))
    issued = Issued(USER, PASSWORD, certs.cert, certs.key)
    port = free_port()
    with token_server(issued) as token_port:
        (tmp_path / "config.yml").write_text(json.dumps({
            "version": 0.1,
            "storage": {"filesystem": {"rootdirectory": str(tmp_path / "data")}},
            "http": {"addr": f"127.0.0.1:{port}"},
            "auth": {"token": {"realm": f"http://127.0.0.1:{token_port}/token",
                               "service": SERVICE, "issuer": ISSUER,
                               "rootcertbundle": str(certs.ca)}}}))
        with (tmp_path / "registry.log").open("wb") as log:
            server = subprocess.Popen(["docker-registry", "serve", str(tmp_path / "config.yml")],
                                      stdout=log, stderr=subprocess.STDOUT)
            try:
                _wait_for_plain(f"http://127.0.0.1:{port}/v2/")
                yield f"127.0.0.1:{port}", issued
            finally:
                server.terminate()
                server.wait(timeout=10)


def _wait_for_plain(url: str) -> None:
    for _ in range(100):
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, timeout=2).status_code == 401:
                return
        time.sleep(0.1)
    raise AssertionError(f"the token registry did not come up at {url}")


def test_a_token_registry_gets_a_new_token_for_the_push_and_after_one_expired(
        project: Project, token_registry: tuple[str, Issued],
        docker_client_config: Path) -> None:
    host, issued = token_registry
    login_by_helper(docker_client_config, host, PASSWORD)
    issued.expired_first = 1  # the first token is refused as expired: a new one is fetched
    project.build("by token")
    project.smoke()
    record = project.publish(registry_host=host)
    name = str(record["repository"]).split("/", 1)[1]
    assert issued.scopes[0] == issued.scopes[1] == f"repository:{name}:pull"
    # the push asked for more (the registry names the two actions in either order)
    assert {f"repository:{name}:pull,push", f"repository:{name}:push,pull"} & set(issued.scopes)
    served = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--creds",
                             f"{USER}:{PASSWORD}", "--format", "{{.Digest}}",
                             f"docker://{record['repository']}:{record['tag']}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert served == record["digest"]
