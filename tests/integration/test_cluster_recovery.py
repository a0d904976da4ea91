"""A cluster as it fails: a node whose engine does not answer (tcp://127.0.0.1:9, where
nothing listens) beside one that does, up's record gone, two ups of one tag, and Ctrl-C
during up. Containers of this engine labelled as up labels its nodes stand in for them; where
up itself runs, a stub image takes the image's part (its preflight passes, the page caches'
command does nothing, a node serves nothing), so up waits for a /health that never comes."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.nodes import cluster
from sparkbake.nodes.cluster import Cluster, ClusterNode
from sparkbake.nodes.engines import Node
from sparkbake.oci import docker_engine
from sparkbake.oci.engine_client import Container
from tests.conftest import Project
from tests.polling import until

pytestmark = pytest.mark.docker

TAG = "fixture"
LOCAL = Node(cluster.LOCAL_ENGINE)
LOST = Node("tcp://127.0.0.1:9")  # nothing listens there: an engine that does not answer
SERVES = "echo serving rank $NODE_RANK; exec sleep 600"
# the stub's entrypoint: the preflight (--print) passes, at once or after a while (PREFLIGHTS);
# the page caches' `sh -c ...` does nothing; a node logs a line and sleeps
STUB = 'case "$1" in --print) {preflight};; sh) exit 0;; esac; ' + SERVES
PREFLIGHTS = {"quick": "exit 0", "slow": "exec sleep 600"}


def labelled(client: docker_engine.Client) -> list[str]:
    return sorted(box.name for box in cluster.containers_of(client, TAG))


def start_node(client: docker_engine.Client, image: str, rank: int) -> None:
    client.containers.run(image, ["sh", "-c", SERVES], detach=True,
                          name=f"sparkbake-{TAG}-rank{rank}", environment={"NODE_RANK": rank},
                          labels={cluster.LABEL: TAG, cluster.RANK_LABEL: str(rank)})


def write_record(project: Project, *engines: Node) -> Path:
    nodes = tuple(ClusterNode(rank, project.root / f"node{rank}.env", engine, {})
                  for rank, engine in enumerate(engines))
    path = cluster.state_path(project.config(), TAG)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(Cluster(TAG, "stub", "http://127.0.0.1:9", nodes).to_json()))
    return path


@pytest.fixture
def engine(docker_client: docker_engine.Client) -> Iterator[docker_engine.Client]:
    """This engine; afterwards, no container of the tag on it."""
    yield docker_client
    for box in cluster.containers_of(docker_client, TAG):
        box.remove(force=True)


@pytest.fixture
def node_files(tmp_path: Path) -> list[Path]:
    """Two nodes' .env files that pass check-env together; the head's API on a free port
    where nothing answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    files = []
    for rank in (0, 1):
        path = tmp_path / ("head.env" if rank == 0 else "worker-1.env")
        path.write_text(f"MODEL=/model\nNNODES=2\nNODE_RANK={rank}\nMASTER_ADDR=10.0.0.1\n"
                        f"VLLM_HOST_IP=10.0.0.{rank + 1}\nAPI_PORT={port}\n")
        files.append(path)
    return files


def test_down_acts_on_the_nodes_that_answer_and_names_the_one_that_does_not(
        project: Project, engine: docker_engine.Client, debian_base: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    record = write_record(project, LOCAL, LOST)
    start_node(engine, debian_base, 0)
    assert project.sparkbake("down", TAG) == 6
    assert labelled(engine) == []  # the head's container went all the same
    err = capsys.readouterr().err.splitlines()
    assert err[-3].startswith("worker 1 (node1.env on tcp://127.0.0.1:9): not reached: no "
                              "Docker engine answers (")
    assert err[-2:] == ["sparkbake: error: 1 engine(s) did not answer: tcp://127.0.0.1:9",
                        "  -> rerun `sparkbake down fixture` once they answer; the record is "
                        "kept for them"]
    assert record.is_file()


def test_status_and_logs_answer_for_every_node_on_stdout_and_name_the_lost_one(
        project: Project, engine: docker_engine.Client, debian_base: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    write_record(project, LOCAL, LOST)
    start_node(engine, debian_base, 0)
    until(lambda: all(b"serving" in box.logs() for box in cluster.containers_of(engine, TAG)),
          "the head's container logs its line", 30)
    assert project.sparkbake("status", TAG) == 6
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == ("rank 0  head (node0.env on unix:///var/run/docker.sock)  "
                      "sparkbake-fixture-rank0: running")
    assert rows[1].startswith("rank 1  worker 1 (node1.env on tcp://127.0.0.1:9)  "
                             "sparkbake-fixture-rank1: not reached (no Docker engine answers (")
    assert rows[2] == "fixture: 1/2 node(s) running; head http://127.0.0.1:9/health: no answer"
    assert project.sparkbake("logs", TAG) == 6
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "== rank 0, head (node0.env on unix:///var/run/docker.sock): sparkbake-fixture-rank0",
        "serving rank 0",
        "== rank 1, worker 1 (node1.env on tcp://127.0.0.1:9): sparkbake-fixture-rank1",
        "(its engine does not answer)"]
    assert err.splitlines()[-2] == \
        "sparkbake: error: 1 engine(s) did not answer: tcp://127.0.0.1:9"


def test_down_finds_the_containers_by_label_when_the_record_is_gone(
        project: Project, engine: docker_engine.Client, debian_base: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    for rank in (0, 1):
        start_node(engine, debian_base, rank)
    assert project.sparkbake("down", TAG, "--node", "1") == 0
    assert labelled(engine) == ["sparkbake-fixture-rank0"]
    assert project.sparkbake("down", TAG) == 0
    assert labelled(engine) == []
    assert capsys.readouterr().err.splitlines()[-1] == \
        "fixture: 1 container(s) found by label removed, no container left"
    assert project.sparkbake("down", TAG) == 2  # nothing of it anywhere it looks
    assert capsys.readouterr().err.splitlines()[-2].endswith(
        "build/clusters/fixture.json is missing), and no container of it is on "
        "unix:///var/run/docker.sock")


def test_up_refuses_to_start_over_the_tags_containers_and_names_them(
        project: Project, engine: docker_engine.Client, debian_base: str,
        node_files: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    for rank in (0, 1):
        start_node(engine, debian_base, rank)
    assert project.sparkbake("up", TAG, *map(str, node_files), "--image", debian_base) == 2
    assert capsys.readouterr().err.splitlines()[-2:] == [
        "sparkbake: error: fixture already has containers: sparkbake-fixture-rank0 on "
        "unix:///var/run/docker.sock, sparkbake-fixture-rank1 on unix:///var/run/docker.sock",
        "  -> take them down first: sparkbake down fixture"]
    assert not cluster.state_path(project.config(), TAG).exists()


def test_up_of_one_file_of_two_nodes_is_refused_before_any_engine(
        project: Project, node_files: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("up", TAG, str(node_files[0]), "--hosts", LOST.url) == 2
    out, err = capsys.readouterr()  # the findings as check-env prints them, then the error
    assert f"{node_files[0]}:2: error: NNODES=2, but no file has rank 1 [rank-missing]" in out
    assert err.splitlines()[-2] == "sparkbake: error: check-env for fixture: 1 error(s) " \
                                   "between the files"


@contextlib.contextmanager
def stub(client: docker_engine.Client, base: str, preflight: str) -> Iterator[str]:
    """The stub image, its preflight quick or slow; removed afterwards."""
    name = f"sparkbake-test/cluster-stub:{preflight}"
    script = STUB.format(preflight=PREFLIGHTS[preflight])
    dockerfile = f"FROM {base}\nENTRYPOINT {json.dumps(['sh', '-c', script, 'stub'])}\n"
    subprocess.run(["docker", "build", "-q", "-t", name, "-"], input=dockerfile.encode(),
                   check=True, capture_output=True)
    try:
        yield name
    finally:
        client.images.remove(name, force=True)


@pytest.fixture
def quick_stub(docker_client: docker_engine.Client, debian_base: str) -> Iterator[str]:
    with stub(docker_client, debian_base, "quick") as name:
        yield name


@pytest.fixture
def slow_stub(docker_client: docker_engine.Client, debian_base: str) -> Iterator[str]:
    with stub(docker_client, debian_base, "slow") as name:
        yield name


@pytest.fixture
def cpu_project(project: Project) -> Project:
    """The fixture tag as a CPU tag: its nodes' containers ask for no GPU."""
    text = project.config_path.read_text()
    project.config_path.write_text(text.replace("    dir: upstream\n",
                                                "    dir: upstream\n    device: cpu\n", 1))
    return project


class Up:
    """`sparkbake up` as its own process, its stderr in a file."""

    def __init__(self, project: Project, files: list[Path], image: str, log: Path) -> None:
        self.log = log
        with log.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "sparkbake", "--config", str(project.config_path), "up",
                 TAG, *map(str, files), "--image", image, "--timeout", "300"],
                stdout=subprocess.DEVNULL, stderr=err)

    @property
    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def own(self, client: docker_engine.Client) -> list[Container]:
        """This run's short-lived containers (its preflight, its page caches' one)."""
        run = f"{docker_engine.RUN_LABEL}={socket.gethostname()}:{self.process.pid}"
        return client.containers.list(all=True, filters={"label": run})

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)


@pytest.fixture
def ups(engine: docker_engine.Client) -> Iterator[list[Up]]:
    """The ups a test starts; any still running afterwards is killed, its containers gone."""
    started: list[Up] = []
    yield started
    for up in started:
        if up.process.poll() is None:
            up.process.kill()
            up.process.wait()
        for box in up.own(engine):
            box.remove(force=True)


def test_a_second_up_of_the_tag_is_refused_while_one_runs_and_ctrl_c_names_what_runs(
        cpu_project: Project, engine: docker_engine.Client, quick_stub: str,
        node_files: list[Path], ups: list[Up], tmp_path: Path) -> None:
    ups.append(Up(cpu_project, node_files, quick_stub, tmp_path / "first.err"))
    until(lambda: "==> wait for http://127.0.0.1:" in ups[0].said or
          ups[0].process.poll() is not None, "the first up waits", 90)
    assert ups[0].process.poll() is None, ups[0].said
    record = cluster.state_path(cpu_project.config(), TAG).read_text()
    ups.append(Up(cpu_project, node_files, quick_stub, tmp_path / "second.err"))
    assert ups[1].process.wait(timeout=60) == 2
    assert ups[1].said.splitlines()[-2:] == [
        f"sparkbake: error: fixture: another up of it runs (pid {ups[0].process.pid} on "
        f"{socket.gethostname()})",
        "  -> let it finish, then `sparkbake status fixture`; or stop it (an up that was "
        "killed holds no lock)"]
    assert cluster.state_path(cpu_project.config(), TAG).read_text() == record  # the first's
    assert ups[0].interrupt() == 130
    assert ups[0].said.splitlines()[-2:] == [
        "sparkbake: error: fixture: up interrupted; still running: sparkbake-fixture-rank0 "
        "on unix:///var/run/docker.sock, sparkbake-fixture-rank1 on unix:///var/run/docker.sock",
        "  -> sparkbake down fixture removes them"]
    assert labelled(engine) == ["sparkbake-fixture-rank0", "sparkbake-fixture-rank1"]
    assert cpu_project.sparkbake("down", TAG) == 0
    assert labelled(engine) == []


def test_ctrl_c_in_a_short_lived_container_of_up_leaves_no_container(
        cpu_project: Project, engine: docker_engine.Client, slow_stub: str,
        node_files: list[Path], ups: list[Up], tmp_path: Path) -> None:
    ups.append(Up(cpu_project, node_files, slow_stub, tmp_path / "up.err"))
    until(lambda: "==> preflight on head" in ups[0].said and bool(ups[0].own(engine)),
          "the head's preflight runs", 90)
    assert ups[0].interrupt() == 130
    assert ups[0].said.splitlines()[-2:] == [
        "sparkbake: error: fixture: up interrupted; none of its containers runs",
        "  -> start it again: sparkbake up fixture NODE.env ..."]
    assert ups[0].own(engine) == [] and labelled(engine) == []
    assert not cluster.state_path(cpu_project.config(), TAG).exists()
