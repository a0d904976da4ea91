"""Pure logic of publish and the embedded registry: no Docker engine, no network."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from sparkbake import records, resources
from sparkbake.__main__ import main
from sparkbake.config import versions as config_mod
from sparkbake.errors import EngineError, PublishError, UsageError
from sparkbake.oci import distribution, local_registry, ports, registry_access
from sparkbake.oci.registry_login import RegistryLogin
from sparkbake.publish import push, smoke_gate
from sparkbake.publish.record import ReleaseSmoke
from tests.conftest import plain_console, settings_of, versions_yaml

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def _config(tmp_path: Path) -> config_mod.Config:
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "setup.py").write_text("# upstream\n")
    (tmp_path / "versions.yaml").write_text(
        versions_yaml(tags="  production-1.0-unit: {upstream: tree, series: []}\n"))
    return config_mod.load(tmp_path / "versions.yaml")


# --- names and addresses ------------------------------------------------------------------


@pytest.mark.parametrize(("repository", "target", "expected"), [
    ("localhost:5000/sparkbake-demo", None, "localhost:5000/sparkbake-demo"),
    ("localhost:5000/sparkbake-demo", "127.0.0.1:5555", "127.0.0.1:5555/sparkbake-demo"),
    ("localhost/team/img", "reg.example.org", "reg.example.org/team/img"),
    ("ghcr.io/me/vllm", "10.0.0.2:5000", "10.0.0.2:5000/me/vllm"),
    ("sparkbake-demo", "127.0.0.1:5000", "127.0.0.1:5000/sparkbake-demo"),
    ("me/vllm", "[::1]:5000", "[::1]:5000/me/vllm"),
])
def test_retarget_replaces_only_the_registry_host(repository: str, target: str | None,
                                                  expected: str) -> None:
    assert registry_access.retarget(repository, target) == expected


@pytest.mark.parametrize("bad", ["http://127.0.0.1:5000", "host/path", "", "host:port"])
def test_retarget_rejects_what_is_not_host_and_port(bad: str) -> None:
    with pytest.raises(UsageError):
        registry_access.retarget("localhost:5000/x", bad)


def test_split_repository_knows_hosts_from_paths() -> None:
    assert registry_access.split_repository("localhost/x") == ("localhost", "x")
    assert registry_access.split_repository("ghcr.io/a/b") == ("ghcr.io", "a/b")
    assert registry_access.split_repository("a/b") == (None, "a/b")
    assert registry_access.split_repository("b") == (None, "b")


def test_locate_names_the_api_host_and_docker_hubs_library() -> None:
    assert registry_access.locate("127.0.0.1:5000/sparkbake-demo") == (
        "127.0.0.1:5000", "127.0.0.1:5000", "sparkbake-demo")
    assert registry_access.locate("ghcr.io/me/vllm") == ("ghcr.io", "ghcr.io", "me/vllm")
    assert registry_access.locate("vllm") == ("docker.io", "registry-1.docker.io", "library/vllm")
    assert registry_access.locate("me/vllm") == ("docker.io", "registry-1.docker.io", "me/vllm")


# --- overwrite refusal --------------------------------------------------------------------


def test_check_overwrite_accepts_a_new_tag_or_the_same_image() -> None:
    push.check_overwrite("r:t", None, set(), force=False, console=plain_console())
    push.check_overwrite("r:t", DIGEST_A, {DIGEST_A}, force=False, console=plain_console())


def test_check_overwrite_refuses_another_image_naming_both_digests() -> None:
    with pytest.raises(PublishError) as caught:
        push.check_overwrite("r:t", DIGEST_A, {DIGEST_B}, force=False, console=plain_console())
    text = str(caught.value)
    assert DIGEST_A in text and DIGEST_B in text and "--force" in text
    with pytest.raises(PublishError, match="not pushed there yet"):
        push.check_overwrite("r:t", DIGEST_A, set(), force=False, console=plain_console())


def test_check_overwrite_moves_the_tag_when_forced() -> None:
    push.check_overwrite("r:t", DIGEST_A, {DIGEST_B}, force=True, console=plain_console())


# --- smoke gate ---------------------------------------------------------------------------


def smoke_record(image_id: str, passed: bool, checks: list[dict[str, Any]]) -> str:
    """A smoke record of the image, as `smoke` writes it (older ones lack suite, gpu, model)."""
    return json.dumps({"tag": "t", "image": "r:t", "image_id": image_id, "inputs": "4" * 64,
                       "passed": passed, "checks": checks, "time": "2026-01-01T00:00:00+00:00"})


def test_check_smoke_wants_a_passing_record_of_this_image_id(tmp_path: Path) -> None:
    tag, record = "production-1.0-unit", tmp_path / "smoke.json"
    with pytest.raises(PublishError, match="no smoke record") as caught:
        smoke_gate.check_smoke(record, tag, DIGEST_A, settings=settings_of())
    assert "sparkbake smoke production-1.0-unit" in str(caught.value)
    assert "--skip-smoke" in str(caught.value)
    record.write_text("{not json")
    with pytest.raises(PublishError, match="unreadable"):
        smoke_gate.check_smoke(record, tag, DIGEST_A, settings=settings_of())
    record.write_text(json.dumps({"image_id": DIGEST_A, "passed": True}))  # not a whole record
    with pytest.raises(PublishError, match="unreadable"):
        smoke_gate.check_smoke(record, tag, DIGEST_A, settings=settings_of())
    record.write_text(smoke_record(DIGEST_B, True, []))
    with pytest.raises(PublishError, match="not of the image to publish") as caught:
        smoke_gate.check_smoke(record, tag, DIGEST_A, settings=settings_of())
    assert "checked sha256:bbbbbbbbbbbb, not sha256:aaaaaaaaaaaa" in str(caught.value)
    record.write_text(smoke_record(DIGEST_A, False, []))
    with pytest.raises(PublishError, match="did not pass"):
        smoke_gate.check_smoke(record, tag, DIGEST_A, settings=settings_of())
    record.write_text(smoke_record(DIGEST_A, True, []))
    assert smoke_gate.check_smoke(record, tag, DIGEST_A, settings=settings_of()).passed is True


def test_the_smoke_gate_summarises_a_pass_and_records_a_skip(tmp_path: Path) -> None:
    record = tmp_path / "smoke.json"
    checks = [{"name": "manifest", "status": "passed"}, {"name": "gpu", "status": "skipped"}]
    record.write_text(smoke_record(DIGEST_A, True, checks))
    passed = {"result": "passed", "image_id": DIGEST_A, "time": "2026-01-01T00:00:00+00:00",
              "checks": {"passed": 1, "skipped": 1}}
    assert records.to_json(smoke_gate.smoke_gate(record, "t", DIGEST_A, skip=False,
                                                 console=plain_console(),
                                                 settings=settings_of())) == passed
    skipped = {"result": "skipped", "override": "--skip-smoke", "found": "other image"}
    assert records.to_json(smoke_gate.smoke_gate(record, "t", DIGEST_B, skip=True,
                                                 console=plain_console(),
                                                 settings=settings_of())) == skipped
    assert smoke_gate.smoke_gate(tmp_path / "none", "t", DIGEST_A, skip=True,
                                 console=plain_console(),
                           settings=settings_of()).found == "missing"
    with pytest.raises(PublishError):
        smoke_gate.smoke_gate(record, "t", DIGEST_B, skip=False, console=plain_console(),
                        settings=settings_of())
    for summary in (passed, skipped):  # as the release record keeps it
        assert records.to_json(records.from_json(ReleaseSmoke, summary)) == summary


# --- the embedded registry ----------------------------------------------------------------


def test_registry_config_template_renders_valid_yaml() -> None:
    text = resources.render("registry-config.yml.j2", data_dir="/tmp/a b:c", port=5123,
                            readonly=True)
    doc = yaml.safe_load(text)
    assert doc["storage"]["filesystem"]["rootdirectory"] == "/tmp/a b:c"
    assert doc["http"]["addr"] == "127.0.0.1:5123"
    assert doc["storage"]["maintenance"]["readonly"]["enabled"] is True
    plain = yaml.safe_load(resources.render("registry-config.yml.j2", data_dir="/d", port=1,
                                            readonly=False))
    assert "maintenance" not in plain["storage"]


def test_start_without_docker_registry_names_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(EngineError) as caught:
        local_registry.start(config, plain_console(), port)
    assert caught.value.exit_code == 8
    assert "apt-get install -y docker-registry" in str(caught.value)


def test_stop_and_status_without_a_registry(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (config.build_dir / "registry").mkdir(parents=True)
    (config.build_dir / "registry" / "registry.pid").write_text("999999999\n")
    assert local_registry.stop(config, plain_console()) is False
    assert not (config.build_dir / "registry" / "registry.pid").exists()
    assert local_registry.status(config) == (
        False, "registry: none started from this project; start it with "
               "`sparkbake registry start`")


def test_a_port_another_process_holds_is_refused_naming_it(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        holder = f"{Path(sys.executable).name} (pid {os.getpid()})"  # this test's Python
        assert ports.holder(port) == holder
        with pytest.raises(EngineError) as caught:
            local_registry.start(config, plain_console(), port)
    assert caught.value.exit_code == 8
    assert caught.value.message == f"port {port} of 127.0.0.1 is held by {holder}"
    assert "--port N" in caught.value.remedy
    assert ports.holder(port) is None  # closed: free again
    assert not (config.build_dir / "registry" / "registry.pid").exists()


# --- registry logins ------------------------------------------------------------------------


def challenge(header: str) -> requests.Response:
    response = requests.Response()
    response.status_code = 401
    response.headers["WWW-Authenticate"] = header
    return response


def test_a_basic_challenge_is_answered_once_with_the_stored_login() -> None:
    remote = distribution.Remote("127.0.0.1:5000", "x", "http://127.0.0.1:5000", True)
    session = distribution.Session(remote, settings_of(), plain_console(),
                                   login=RegistryLogin("user", "pass", False))
    assert session._login(challenge('Basic realm="registry"')) is True
    assert session._auth() == {"Authorization": "Basic dXNlcjpwYXNz"}
    assert session._login(challenge('Basic realm="registry"')) is False  # no second try
    anonymous = distribution.Session(remote, settings_of(), plain_console())
    assert anonymous._login(challenge('Basic realm="registry"')) is False
    assert anonymous._auth() == {}


def test_registry_status_is_exit_8_when_none_answers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    assert main(["--config", str(config.path), "registry", "status"]) == 8
    assert "none started from this project" in capsys.readouterr().err
