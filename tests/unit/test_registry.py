"""Pure logic of publish and the embedded registry: no Docker engine, no network."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkbake import config as config_mod
from sparkbake import embedded_registry, registry, resources
from sparkbake import plan as plan_mod
from sparkbake.errors import EngineError, PublishError, UsageError

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def _config(tmp_path: Path) -> config_mod.Config:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "setup.py").write_text("# upstream\n")
    (tmp_path / "versions.yaml").write_text(f"""\
schema: 1
defaults:
  repository: localhost:5000/sparkbake-unit
  platform: linux/arm64
  cuda_arch: "12.1a"
  builder: deb
  runtime: deb
bases:
  deb:
    debootstrap: {{suite: bookworm}}
upstreams:
  tree:
    dir: {tmp_path / "tree"}
tags:
  production-1.0-unit:
    upstream: tree
    series: []
""")
    return config_mod.load(tmp_path / "versions.yaml")


def _plan(tmp_path: Path) -> plan_mod.Plan:
    config = _config(tmp_path)
    return plan_mod.make(config, config.tag("1.0-unit"))


# --- push stream --------------------------------------------------------------------------


def test_push_stream_returns_the_aux_digest_and_prints_layer_states_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    stream: list[Any] = [
        {"status": "The push refers to repository [localhost:5000/x]"},
        {"status": "Preparing", "progressDetail": {}, "id": "70e856b14743"},
        {"status": "Pushing", "progressDetail": {"current": 1}, "id": "70e856b14743"},
        {"status": "Pushing", "progressDetail": {"current": 2}, "id": "70e856b14743"},
        {"status": "Retrying in 5 seconds", "id": "70e856b14743"},
        {"status": "Retrying in 4 seconds", "id": "70e856b14743"},
        {"status": "Pushed", "progressDetail": {}, "id": "70e856b14743"},
        json.dumps({"status": f"t: digest: {DIGEST_B} size: 528"}),
        {"progressDetail": {}, "aux": {"Tag": "t", "Digest": DIGEST_A, "Size": 528}},
    ]
    assert registry.push_stream(stream, "localhost:5000/x:t") == DIGEST_A
    printed = capsys.readouterr().err.splitlines()
    assert printed.count("70e856b14743: Pushing") == 1
    assert printed.count("70e856b14743: Retrying in 5 seconds") == 1
    assert not any("Retrying in 4" in line for line in printed)


def test_push_stream_takes_the_digest_from_the_status_line_without_aux() -> None:
    stream = [{"status": f"t: digest: {DIGEST_B} size: 528"}]
    assert registry.push_stream(stream, "r:t") == DIGEST_B


@pytest.mark.parametrize("chunk", [
    {"errorDetail": {"message": "error parsing HTTP 405 response body:\n Method not allowed"},
     "error": "error parsing HTTP 405 response body:\n Method not allowed"},
    {"errorDetail": {"message": "denied: requested access to the resource is denied"}},
    {"error": "received unexpected HTTP status: 500 Internal Server Error"},
])
def test_push_stream_raises_on_an_error_inside_the_stream(chunk: dict[str, Any]) -> None:
    stream = [{"status": "Preparing", "id": "abc"}, chunk, {"aux": {"Digest": DIGEST_A}}]
    with pytest.raises(PublishError) as caught:
        registry.push_stream(stream, "localhost:5000/x:t")
    assert caught.value.exit_code == 7
    assert "pushing localhost:5000/x:t failed" in str(caught.value)
    assert len(str(caught.value).splitlines()) <= 2


def test_push_stream_without_a_digest_is_an_error() -> None:
    with pytest.raises(PublishError, match="no digest"):
        registry.push_stream([{"status": "Pushed", "id": "abc"}], "r:t")


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
    assert registry.retarget(repository, target) == expected


@pytest.mark.parametrize("bad", ["http://127.0.0.1:5000", "host/path", "", "host:port"])
def test_retarget_rejects_what_is_not_host_and_port(bad: str) -> None:
    with pytest.raises(UsageError):
        registry.retarget("localhost:5000/x", bad)


def test_split_repository_knows_hosts_from_paths() -> None:
    assert registry.split_repository("localhost/x") == ("localhost", "x")
    assert registry.split_repository("ghcr.io/a/b") == ("ghcr.io", "a/b")
    assert registry.split_repository("a/b") == (None, "a/b")
    assert registry.split_repository("b") == (None, "b")


def test_remote_for_uses_plain_http_on_loopback_only() -> None:
    local = registry.remote_for("127.0.0.1:5000/sparkbake-demo")
    assert (local.base_url, local.path) == ("http://127.0.0.1:5000", "sparkbake-demo")
    assert registry.remote_for("localhost:5000/a/b").base_url == "http://localhost:5000"
    remote = registry.remote_for("ghcr.io/me/vllm")
    assert (remote.base_url, remote.path) == ("https://ghcr.io", "me/vllm")
    hub = registry.remote_for("vllm")
    assert (hub.base_url, hub.path) == ("https://registry-1.docker.io", "library/vllm")


# --- overwrite refusal --------------------------------------------------------------------


def test_local_digests_keeps_only_the_target_repository() -> None:
    attrs = {"RepoDigests": [f"127.0.0.1:5000/x@{DIGEST_A}", f"127.0.0.1:6000/x@{DIGEST_B}"]}
    assert registry.local_digests(attrs, "127.0.0.1:5000/x") == {DIGEST_A}
    assert registry.local_digests({"RepoDigests": None}, "127.0.0.1:5000/x") == set()


def test_check_overwrite_accepts_a_new_tag_or_the_same_image() -> None:
    registry.check_overwrite("r:t", None, set(), force=False)
    registry.check_overwrite("r:t", DIGEST_A, {DIGEST_A}, force=False)


def test_check_overwrite_refuses_another_image_naming_both_digests() -> None:
    with pytest.raises(PublishError) as caught:
        registry.check_overwrite("r:t", DIGEST_A, {DIGEST_B}, force=False)
    text = str(caught.value)
    assert DIGEST_A in text and DIGEST_B in text and "--force" in text
    with pytest.raises(PublishError, match="not pushed there yet"):
        registry.check_overwrite("r:t", DIGEST_A, set(), force=False)


def test_check_overwrite_moves_the_tag_when_forced() -> None:
    registry.check_overwrite("r:t", DIGEST_A, {DIGEST_B}, force=True)


# --- smoke gate ---------------------------------------------------------------------------


def test_check_smoke_wants_a_passing_record_of_these_inputs(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    record = tmp_path / "smoke.json"
    with pytest.raises(PublishError, match="no smoke record") as caught:
        registry.check_smoke(record, plan)
    assert "nox -s smoke -- production-1.0-unit" in str(caught.value)
    record.write_text("{not json")
    with pytest.raises(PublishError, match="unreadable"):
        registry.check_smoke(record, plan)
    record.write_text(json.dumps({"inputs": "0" * 64, "passed": True}))
    with pytest.raises(PublishError, match="not of the current image"):
        registry.check_smoke(record, plan)
    record.write_text(json.dumps({"inputs": plan.inputs, "passed": False}))
    with pytest.raises(PublishError, match="did not pass"):
        registry.check_smoke(record, plan)
    record.write_text(json.dumps({"inputs": plan.inputs, "passed": True, "checks": []}))
    assert registry.check_smoke(record, plan)["passed"] is True


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
        embedded_registry.start(config, port)
    assert caught.value.exit_code == 8
    assert "apt-get install -y docker-registry" in str(caught.value)


def test_stop_and_status_without_a_registry(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (config.build_dir / "registry").mkdir(parents=True)
    (config.build_dir / "registry" / "registry.pid").write_text("999999999\n")
    assert embedded_registry.stop(config) is False
    assert not (config.build_dir / "registry" / "registry.pid").exists()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert "nothing answers" in embedded_registry.status(config, port)
