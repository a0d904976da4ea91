"""down, status and logs of a cluster's record, against containers of this engine labelled
as up labels its nodes (a sleeping Debian stands in for vLLM: these commands only find,
read and remove the containers)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sparkbake.nodes import cluster
from sparkbake.nodes.cluster import Cluster, ClusterNode
from sparkbake.nodes.engines import Node
from sparkbake.oci import docker_engine
from tests.conftest import Project

pytestmark = pytest.mark.docker

TAG = "fixture"


@pytest.fixture
def two_nodes(project: Project, docker_client: docker_engine.Client,
              debian_base: str) -> Iterator[Cluster]:
    """A record of two nodes on this engine, and their two containers running."""
    engine = Node(cluster.LOCAL_ENGINE)
    nodes = tuple(ClusterNode(rank, project.root / f"node{rank}.env", engine, {})
                  for rank in (0, 1))
    record = Cluster(TAG, debian_base, "http://127.0.0.1:9", nodes)
    path = cluster.state_path(project.config(), TAG)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record.to_json()))
    for node in nodes:
        docker_client.containers.run(
            debian_base, ["sleep", "600"], detach=True, name=node.container(TAG),
            labels={cluster.LABEL: TAG, cluster.RANK_LABEL: str(node.rank)})
    yield record
    for box in cluster.containers_of(docker_client, TAG):
        box.remove(force=True)


def names(client: docker_engine.Client) -> list[str]:
    return sorted(box.name for box in cluster.containers_of(client, TAG))


def test_down_node_removes_that_rank_alone_and_keeps_the_record(
        project: Project, two_nodes: Cluster, docker_client: docker_engine.Client,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("down", TAG, "--node", "1") == 0
    assert names(docker_client) == ["sparkbake-fixture-rank0"]
    assert "fixture: rank 1 down; the other nodes keep theirs" in capsys.readouterr().err
    assert cluster.state_path(project.config(), TAG).is_file()
    assert project.sparkbake("down", TAG) == 0  # then the rest, and the record with them
    assert names(docker_client) == []
    assert not cluster.state_path(project.config(), TAG).exists()


def test_down_of_a_rank_the_cluster_lacks_is_one_line_and_removes_nothing(
        project: Project, two_nodes: Cluster, docker_client: docker_engine.Client,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("down", TAG, "--node", "2") == 2
    assert capsys.readouterr().err.splitlines() == [
        "sparkbake: error: fixture has no rank 2", "  -> ranks: 0 to 1"]
    assert names(docker_client) == ["sparkbake-fixture-rank0", "sparkbake-fixture-rank1"]


def test_logs_of_one_rank_names_its_node(project: Project, two_nodes: Cluster,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("logs", TAG, "--rank", "1") == 0
    said = capsys.readouterr().out  # a result: `sparkbake logs TAG | grep` reads it
    assert "== rank 1, worker 1 (node1.env on unix:///var/run/docker.sock): " \
           "sparkbake-fixture-rank1" in said
    assert "rank 0" not in said


def test_status_counts_the_running_nodes_and_a_silent_head(
        project: Project, two_nodes: Cluster, docker_client: docker_engine.Client,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert project.sparkbake("status", TAG) == 6  # nothing answers on the head's API
    said = capsys.readouterr().out
    assert "fixture: 2/2 node(s) running; head http://127.0.0.1:9/health: no answer" in said
