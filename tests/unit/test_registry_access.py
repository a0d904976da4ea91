"""Registries reached as Docker reaches them: its certs.d trust, HTTPS first with its fallback
for insecure registries, and the login its client config keeps (credential helpers too).
Real TLS servers on 127.0.0.1 and real helper programs on PATH."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.config.settings import Settings
from sparkbake.deploy import rollout
from sparkbake.errors import EngineError, PublishError
from sparkbake.oci import registry_access
from sparkbake.oci.registry_login import RegistryLogin, registry_login
from tests.conftest import settings_of
from tests.tlscerts import Certs, make_certs, v2_server

NOWHERE = ()  # no insecure CIDRs: every registry is secure


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def docker_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's own Docker client config and credential helpers, in this process's
    environment (Settings.of_process); its certs.d: `settings`."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "docker").mkdir()
    (tmp_path / "bin").mkdir()
    yield tmp_path


def settings(docker_dirs: Path) -> Settings:
    """certs.d where a rootless engine keeps it, under docker_dirs; the system's CAs (no
    REQUESTS_CA_BUNDLE); the host's cache in docker_dirs too."""
    return settings_of(XDG_CONFIG_HOME=str(docker_dirs / "xdg"),
                       SPARKBAKE_CACHE=str(docker_dirs / "cache"))


def certs_d(docker_dirs: Path, host: str) -> Path:
    folder = docker_dirs / "xdg" / "docker" / "certs.d" / host
    folder.mkdir(parents=True)
    return folder


def helper(docker_dirs: Path, name: str, body: str) -> None:
    """A docker-credential-<name> program: `get` reads the server on stdin."""
    program = docker_dirs / "bin" / f"docker-credential-{name}"
    program.write_text(f"#!/bin/sh\nread server\n{body}\n")
    program.chmod(0o755)


def client_config(docker_dirs: Path, **config: object) -> None:
    (docker_dirs / "docker" / "config.json").write_text(json.dumps(config))


# --- logins ---------------------------------------------------------------------------------


def test_a_login_kept_by_a_credential_helper_is_found(docker_dirs: Path) -> None:
    helper(docker_dirs, "sbtest", 'echo "{\\"Username\\":\\"u\\",\\"Secret\\":\\"p-$server\\"}"')
    client_config(docker_dirs, credHelpers={"reg.example:5443": "sbtest"})
    assert registry_login("reg.example:5443", Settings.of_process()) == \
        RegistryLogin("u", "p-reg.example:5443", identity_token=False)
    assert registry_login("other.example", Settings.of_process()) is None


def test_the_creds_store_serves_every_registry_and_a_token_user_is_an_identity_token(
        docker_dirs: Path) -> None:
    helper(docker_dirs, "store", 'echo "{\\"Username\\":\\"<token>\\",\\"Secret\\":\\"rt\\"}"')
    client_config(docker_dirs, credsStore="store")
    found = registry_login("ghcr.io", Settings.of_process())
    assert found is not None and (found.secret, found.identity_token) == ("rt", True)


def test_auths_in_the_config_are_used_when_no_helper_is_named(docker_dirs: Path) -> None:
    client_config(docker_dirs, auths={"ghcr.io": {"auth": "dXNlcjpwYXNz"},
                                      "https://index.docker.io/v1/": {"auth": "aHViOnB3"}})
    assert registry_login("ghcr.io", Settings.of_process()) == \
        RegistryLogin("user", "pass", identity_token=False)
    found = registry_login("docker.io", Settings.of_process())
    assert found is not None and found.username == "hub"


def test_a_helper_that_is_missing_is_one_clear_line(docker_dirs: Path) -> None:
    client_config(docker_dirs, credHelpers={"reg.example": "absent"})
    with pytest.raises(EngineError) as raised:
        registry_login("reg.example", Settings.of_process())
    assert raised.value.message.startswith("the Docker credential helper for reg.example "
                                           "failed: ")
    assert "docker login reg.example" in raised.value.remedy


# --- trust and scheme -----------------------------------------------------------------------


def test_loopback_is_insecure_as_to_docker_and_the_engines_list_adds_names() -> None:
    assert registry_access.insecure("127.0.0.1:5000")
    assert registry_access.insecure("localhost:5443")
    assert registry_access.insecure("[::1]:5000")
    assert not registry_access.insecure("127.0.0.1:5000", NOWHERE)
    assert registry_access.insecure("reg.example:5000", NOWHERE, names=["reg.example:5000"])
    assert not registry_access.insecure("reg.invalid:5000")


def test_the_hosts_ca_from_certs_d_verifies_its_https(docker_dirs: Path, certs: Certs) -> None:
    with v2_server(certs) as port:
        host = f"127.0.0.1:{port}"
        (certs_d(docker_dirs, host) / "ca.crt").write_bytes(certs.ca.read_bytes())
        found = registry_access.endpoint(host, host, settings(docker_dirs), is_insecure=False)
    assert (found.base_url, found.note) == (f"https://{host}", None)
    assert isinstance(found.trust.verify, str)
    bundle = Path(found.trust.verify).read_text()
    assert certs.ca.read_text() in bundle and bundle.count("BEGIN CERTIFICATE") > 1  # + system


def test_an_unknown_ca_is_refused_unless_the_registry_is_insecure(
        docker_dirs: Path, certs: Certs) -> None:
    with v2_server(certs) as port:
        host = f"127.0.0.1:{port}"
        with pytest.raises(PublishError) as raised:
            registry_access.endpoint(host, host, settings(docker_dirs), is_insecure=False)
        found = registry_access.endpoint(host, host, settings(docker_dirs), is_insecure=True)
    assert raised.value.exit_code == 7
    assert raised.value.message.startswith(f"registry {host}: TLS verification failed with "
                                           "the trust of ")
    assert f"/etc/docker/certs.d/{host}/ca.crt" in raised.value.remedy
    assert (found.base_url, found.trust.verify) == (f"https://{host}", False)
    assert found.note == f"{host}: HTTPS without verification (an insecure registry to Docker)"


def test_plain_http_only_for_an_insecure_registry_and_then_said(docker_dirs: Path) -> None:
    with v2_server(None) as port:
        host = f"127.0.0.1:{port}"
        found = registry_access.endpoint(host, host, settings(docker_dirs), is_insecure=True)
        with pytest.raises(PublishError) as raised:
            registry_access.endpoint(host, host, settings(docker_dirs), is_insecure=False)
    assert (found.base_url, found.note) == (
        f"http://{host}", f"{host}: plain HTTP (no HTTPS there; an insecure registry to Docker)")
    assert raised.value.message == (
        f"registry {host} answers plain HTTP, and Docker speaks HTTP only to insecure "
        "registries")


def test_a_client_certificate_needs_its_key(docker_dirs: Path, certs: Certs) -> None:
    folder = certs_d(docker_dirs, "reg.example")
    (folder / "client.cert").write_bytes(certs.cert.read_bytes())
    with pytest.raises(PublishError, match=r"a client certificate without its key client\.key"):
        registry_access.trust("reg.example", settings(docker_dirs))
    (folder / "client.key").write_bytes(b"not a key\n")  # named here, not the registry's 400
    with pytest.raises(PublishError) as garbage:
        registry_access.trust("reg.example", settings(docker_dirs))
    assert garbage.value.message.startswith(
        f"{folder / 'client.cert'} and client.key: not a client certificate and its key (")
    (folder / "client.key").write_bytes(certs.key.read_bytes())
    found = registry_access.trust("reg.example", settings(docker_dirs))
    assert found.cert == (str(folder / "client.cert"), str(folder / "client.key"))
    assert found.source == str(folder)


def test_a_deploy_pull_carries_the_login_docker_pull_would_send(docker_dirs: Path) -> None:
    helper(docker_dirs, "sbtest", 'echo "{\\"Username\\":\\"u\\",\\"Secret\\":\\"p\\"}"')
    client_config(docker_dirs, credHelpers={"reg.example:5443": "sbtest"})
    ref = f"reg.example:5443/x@sha256:{'a' * 64}"
    assert rollout._auth(ref, settings=Settings.of_process()) == {
        "username": "u", "password": "p", "serveraddress": "reg.example:5443"}
    assert rollout._auth("other.example/x:1", settings=settings_of()) is None
