"""deploy's pure parts and its nodes: the --hosts list, the image ID check, an engine that
does not answer."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sparkbake import records
from sparkbake.__main__ import main
from sparkbake.deploy import rollout
from sparkbake.deploy.report import DeployReport
from sparkbake.errors import EngineError, PublishError, UsageError
from sparkbake.nodes import engines
from sparkbake.publish.record import Release
from tests.conftest import DATA, free_port

ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
DIGEST = "sha256:" + "d" * 64
RELEASE = Release(
    tag="t", repository="r", images=("r:t",), digest=DIGEST, pinned=f"r@{DIGEST}", smoke=None,
    manifest=None, transfer=None, image_id=ID_A, build=None, inputs="c" * 64, upstream={},
    series=(), env=None, labels={}, published="2026-01-01T00:00:00+00:00")
SMOKE = {"passed": True, "counts": {"passed": 1, "failed": 0, "skipped": 1},
         "checks": [{"name": "manifest", "status": "passed", "detail": "tag t", "seconds": 0.1},
                    {"name": "gpu", "status": "skipped", "detail": "no GPU", "seconds": 0.0}],
         "record": "/p/build/deploys/t-20260101T000000.000000Z/spark-1/build/smoke/t.json"}
ENGINE = {"name": "spark-1", "version": "28.0.1", "arch": "arm64", "gpu_runtime": True}
# a deploy report as deploy writes it: one node deployed, one failed, one not reached
REPORT: dict[str, Any] = {
    "tag": "t", "digest": DIGEST, "image_id": ID_A, "pinned": f"r@{DIGEST}", "stream": False,
    "gpu": "auto", "result": "failed", "started": "2026-01-01T00:00:00+00:00",
    "hosts": [
        {"host": "ssh://spark-1", "result": "deployed", "engine": ENGINE, "method": "pull",
         "pulled": {"layers": 2, "bytes": 300}, "present": {"layers": 1, "bytes": 50},
         "image_id": ID_A, "smoke": SMOKE, "seconds": 12.5},
        {"host": "ssh://spark-2", "result": "failed", "engine": ENGINE, "method": "stream",
         "pull_failed": "node ssh://spark-2 cannot pull r@sha256:dddd: denied",
         "streamed": {"bytes": 350}, "image_id": ID_A,
         "smoke": {"passed": False, "record": None}, "error": "on node ssh://spark-2: boom",
         "seconds": 3.0},
        {"host": "ssh://spark-3", "result": "not attempted"}],
    "finished": "2026-01-01T00:01:00+00:00",
}


def test_hosts_take_every_docker_host_url() -> None:
    parsed = engines.parse_hosts("ssh://spark-1, ssh://admin@spark-2:2222,tcp://10.0.0.3:2375,"
                               "unix:///run/docker.sock,spark-4,root@spark-5,tcp://[fd00::3]:2375")
    assert [n.url for n in parsed] == [
        "ssh://spark-1", "ssh://admin@spark-2:2222", "tcp://10.0.0.3:2375",
        "unix:///run/docker.sock", "ssh://spark-4", "ssh://root@spark-5", "tcp://[fd00::3]:2375"]
    assert [n.slug for n in parsed] == [
        "spark-1", "admin_spark-2_2222", "10.0.0.3_2375", "run_docker.sock", "spark-4",
        "root_spark-5", "fd00_3_2375"]


@pytest.mark.parametrize(("hosts", "says"), [
    ("", "names no node"),
    (" , ", "names no node"),
    ("http://spark-1", "is not a Docker host URL"),
    ("npipe:////./pipe/docker_engine", "is not a Docker host URL"),
    ("unix://docker.sock", "is not a unix:// address"),
    ("tcp://", "is not a tcp:// address"),
    ("tcp://user@spark-1:2375", "is not a tcp:// address"),
    ("ssh://spark 1", "is not a ssh:// address"),
    ("spark-1:2375", "is not a Docker host URL"),
    ("ssh://spark-1,spark-1", "more than once"),
])
def test_hosts_that_are_not_docker_hosts_are_exit_2(hosts: str, says: str) -> None:
    with pytest.raises(UsageError, match=says) as caught:
        engines.parse_hosts(hosts)
    assert caught.value.exit_code == 2


def test_an_image_id_that_is_not_the_released_one_is_exit_7() -> None:
    node = engines.Node("ssh://spark-2")
    release = RELEASE
    rollout.check_image_id(node, "repo:tag", release, ID_A)
    rollout.check_image_id(node, "repo:tag", release, DIGEST)  # the containerd image store's ID
    with pytest.raises(PublishError) as caught:
        rollout.check_image_id(node, "repo:tag", release, ID_B)
    assert caught.value.exit_code == 7
    text = str(caught.value)
    assert text.startswith("node ssh://spark-2: repo:tag is sha256:bbbbbbbbbbbb")
    assert "not the released image sha256:aaaaaaaaaaaa" in text
    with pytest.raises(PublishError, match="repo:tag is missing"):
        rollout.check_image_id(node, "repo:tag", release, None)


@pytest.mark.parametrize("scheme", ["tcp", "unix"])
def test_a_node_whose_engine_does_not_answer_is_exit_8_naming_it(scheme: str) -> None:
    url = f"tcp://127.0.0.1:{free_port()}" if scheme == "tcp" else "unix:///nonexistent/d.sock"
    with pytest.raises(EngineError) as caught:
        engines.connect(engines.Node(url))
    assert caught.value.exit_code == 8
    message, remedy = str(caught.value).splitlines()
    assert message.startswith(f"node {url}: no Docker engine answers (")
    assert f"its engine listens at {url}" in remedy


def test_the_ssh_remedy_names_the_command_to_try() -> None:
    with pytest.raises(EngineError) as caught:
        engines.connect(engines.Node("ssh://nobody@127.0.0.1:1"))
    assert "`ssh -p 1 nobody@127.0.0.1 docker info`" in str(caught.value)


@pytest.mark.parametrize(("args", "says"), [
    ([], "the following arguments are required: --hosts"),
    (["--hosts", "http://spark-1"], "is not a Docker host URL"),
    (["--hosts", "spark-1", "--gpu", "maybe"], "invalid choice: 'maybe'"),
])
def test_the_deploy_command_refuses_bad_usage_with_exit_2(
        args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(DATA / "versions.yaml"), "deploy", "fixture", *args]) == 2
    assert says in capsys.readouterr().err


def test_a_deploy_report_reads_back_as_written() -> None:
    report = records.from_json(DeployReport, REPORT)
    assert records.to_json(report) == REPORT
    assert list(records.to_json(report)) == list(REPORT)
    assert [list(h) for h in records.to_json(report)["hosts"]] == [list(h) for h in REPORT["hosts"]]
    assert report.hosts[2].engine is None and report.hosts[2].seconds is None
    assert report.hosts[1].transfer is not None and report.hosts[1].transfer.method == "stream"


def test_what_deploy_returns_adds_where_the_report_is() -> None:
    """--json prints the report with its path; the file itself has none."""
    printed = {**REPORT, "report": "/p/build/deploys/t-20260101T000000.000000Z.json"}
    report = records.from_json(DeployReport, printed)
    assert report.report == printed["report"]
    assert records.to_json(report) == printed
    assert "report" not in records.to_json(dataclasses.replace(report, report=None))
