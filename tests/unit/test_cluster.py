"""up's pure parts: the nodes of the files (head first, each with its engine), the head's
API address, each container's options, and the readout of logs and counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.config import versions
from sparkbake.errors import ConfigError
from sparkbake.nodes import cluster, cluster_readout
from sparkbake.nodes.engines import Node
from sparkbake.nodes.serve_stream import Ready

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "images" / "smoke" / "dsv4-4node" / "accept"
CONFIG = versions.load(REPO / "versions.yaml")
FILES = [SAMPLES / name for name in ("worker-2.env", "head.env", "worker-1.env", "worker-3.env")]
LOCAL = Node("unix:///var/run/docker.sock")


def test_the_nodes_come_head_first_each_on_its_files_engine() -> None:
    engines = [Node(f"ssh://spark-{i}") for i in (3, 1, 2, 4)]
    nodes = cluster.plan_nodes(FILES, engines, LOCAL)
    assert [(n.rank, n.env_file.name, n.engine.url) for n in nodes] == [
        (0, "head.env", "ssh://spark-1"), (1, "worker-1.env", "ssh://spark-2"),
        (2, "worker-2.env", "ssh://spark-3"), (3, "worker-3.env", "ssh://spark-4")]
    assert {n.engine for n in cluster.plan_nodes(FILES, [], LOCAL)} == {LOCAL}


def test_engines_and_files_must_pair() -> None:
    with pytest.raises(ConfigError, match=r"--hosts names 2 engine\(s\) for 4 \.env file"):
        cluster.plan_nodes(FILES, [LOCAL, Node("ssh://spark-2")], LOCAL)


@pytest.mark.parametrize(("engine", "api"), [
    ("unix:///var/run/docker.sock", "http://127.0.0.1:8300"),
    ("ssh://admin@spark-1:2222", "http://spark-1:8300"),
    ("tcp://10.0.0.3:2375", "http://10.0.0.3:8300"),
    ("ssh://[fd00::1]", "http://[fd00::1]:8300"),
    ("tcp://[::1]:23750", "http://[::1]:8300"),
    ("ssh://admin@[fd00::11]:2222", "http://[fd00::11]:8300"),
])
def test_the_heads_api_is_its_engines_host_at_its_port(engine: str, api: str) -> None:
    head = cluster.plan_nodes([SAMPLES / "head.env"], [Node(engine)], LOCAL)[0]
    assert cluster.api_url(head) == api


def test_a_spark_node_runs_on_the_host_network_with_its_gpu_fabric_model_and_cache() -> None:
    tag = CONFIG.tag("production-3.73-vision")
    worker = cluster.plan_nodes([SAMPLES / "worker-1.env"], [], LOCAL)[0]
    options = cluster.container_options(tag, worker)
    assert options["name"] == "sparkbake-production-3.73-vision-rank1"
    assert (options["network_mode"], options["ipc_mode"]) == ("host", "host")
    assert options["labels"] == {cluster.LABEL: tag.name, cluster.RANK_LABEL: "1"}
    env = options["environment"]
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"], env["NCCL_IB_HCA"]) == (
        "enp1s0f0np0", "enp1s0f0np0", "rocep1s0f0")
    assert options["volumes"] == {
        "/srv/models/DeepSeek-V4-Flash-Vision-Exp": {"bind": "/model", "mode": "ro"},
        "/srv/jit-cache": {"bind": "/var/cache/jit", "mode": "rw"}}
    assert options["device_requests"] and options["devices"] == [
        "/dev/infiniband:/dev/infiniband"]


def test_a_cpu_node_asks_for_no_gpu_and_no_rdma(tmp_path: Path) -> None:
    node_env = tmp_path / "head.env"
    node_env.write_text("MODEL=/model\nMODEL_HOST_PATH=/srv/tiny\nNODE_RANK=0\n")
    options = cluster.container_options(CONFIG.tag("cpu-3.73"),
                                        cluster.plan_nodes([node_env], [], LOCAL)[0])
    assert "device_requests" not in options and "devices" not in options
    assert "NCCL_SOCKET_IFNAME" not in options["environment"]


LOG = "\n".join([
    "(EngineCore pid=90) INFO 12-04 20:01:02 [kv_cache_utils.py:1311] GPU KV cache size: "
    "87,296 tokens",
    "(EngineCore pid=90) INFO 12-04 20:01:02 [kv_cache_utils.py:1316] Maximum concurrency "
    "for 8,192 tokens per request: 10.66x",
    "\x1b[1;36m(Worker pid=91)\x1b[0;0m INFO 12-04 20:01:01 [gpu_worker.py:400] Available KV "
    "cache memory: 1.0 GiB",
    "(Worker pid=92) INFO 12-04 20:01:01 [cpu_worker.py:261] Explicitly set (1.00/23.47) GiB "
    "for KV cache on node 0."])


def test_the_kv_cache_lines_are_read_from_their_message_on() -> None:
    assert cluster_readout.kv_cache_lines(LOG) == (
        "GPU KV cache size: 87,296 tokens", "Available KV cache memory: 1.0 GiB",
        "Explicitly set (1.00/23.47) GiB for KV cache on node 0.")
    assert cluster_readout.kv_cache_lines("INFO started\n") == ()


def test_the_acceptance_length_is_one_plus_accepted_per_draft() -> None:
    metrics = {cluster_readout.ACCEPTED: 540.0, cluster_readout.DRAFTS: 200.0}
    assert cluster_readout.acceptance_length(metrics) == pytest.approx(3.7)
    assert cluster_readout.acceptance_length({}) is None


def test_the_verdict_says_what_is_missing() -> None:
    nodes = [cluster_readout.NodeReadout(0, ("GPU KV cache size: 1 tokens",)),
             cluster_readout.NodeReadout(1, ())]
    line = cluster_readout.verdict("cpu-3.73", nodes, Ready(41.6, 42.7), 4, 5, "none")
    assert line == ("cpu-3.73: up, but serving fails on 2 node(s), ready 43 s after the head "
                    "started (/health 42 s, first token 43 s); serve checks 4/5 passed; KV "
                    "cache lines: missing on rank 1; acceptance: none")
    assert cluster_readout.last_lines("a\n\nb\nc\nd\n") == "b | c | d"


def test_the_printed_docker_run_carries_ups_options() -> None:
    tag = CONFIG.tag("production-3.73-vision")
    head = cluster.plan_nodes([SAMPLES / "head.env"], [], LOCAL)[0]
    words = cluster.docker_run(tag, head, tag.image_ref)
    options = cluster.container_options(tag, head)
    assert words[:5] == ["docker", "run", "-d", "--name", options["name"]]
    assert words[-1] == tag.image_ref
    pairs = {(words[i], words[i + 1]) for i in range(len(words) - 1)}
    assert {("--network", "host"), ("--ipc", "host"), ("--gpus", "all"),
            ("--env-file", "head.docker-env"), ("-e", "NCCL_IB_HCA=rocep1s0f0"),
            ("-v", "/srv/jit-cache:/var/cache/jit"),
            ("--label", f"{cluster.RANK_LABEL}=0")} <= pairs


def test_up_print_starts_the_workers_before_the_head(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbake.__main__ import main

    files = [str(SAMPLES / name) for name in ("head.env", "worker-1.env", "worker-2.env",
                                              "worker-3.env")]
    hosts = "spark-1,spark-2,spark-3,spark-4"
    assert main(["up", "3.73-vision", *files, "--print", "--hosts", hosts]) == 0
    out = capsys.readouterr().out
    runs = [line for line in out.splitlines() if line.startswith("docker run")]
    assert [line.split()[4][-5:] for line in runs] == ["rank1", "rank2", "rank3", "rank0"]
    assert "curl -sf http://spark-1:8300/health" in out
    assert all(line.startswith(("#", "env -i", "docker run")) for line in out.splitlines())


def test_up_print_checks_the_files_together_as_up_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbake.__main__ import main

    head = str(SAMPLES / "head.env")
    assert main(["up", "3.73-vision", head, head, head, head, "--print"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no command to copy
    assert err.splitlines()[-2:] == [
        "sparkbake: error: check-env for production-3.73-vision: 7 error(s) between the files",
        "  -> fix them: each node's entrypoint, or the cluster, fails with them"]
    assert (err.count("[rank-repeated]"), err.count("[host-address-repeated]")) == (3, 3)
    assert "NNODES=4, but no file has rank 1, 2, 3 [rank-missing]" in err


def test_up_print_of_one_file_of_four_nodes_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbake.__main__ import main

    assert main(["up", "3.73-vision", str(SAMPLES / "head.env"), "--print"]) == 2
    assert f"{SAMPLES / 'head.env'}:11: error: NNODES=4, but no file has rank 1, 2, 3 " \
           "[rank-missing]" in capsys.readouterr().err


@pytest.mark.parametrize("given", ["-5", "0", "nan", "soon"])
def test_a_timeout_up_cannot_wait_is_a_usage_error_before_anything_starts(
        given: str, capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbake.__main__ import main

    assert main(["up", "3.73-vision", str(SAMPLES / "head.env"), "--timeout", given]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"sparkbake: error: argument --timeout: '{given}' is not a time in seconds above 0",
        "  -> run `sparkbake up --help`"]


def test_a_stopped_node_is_explained_by_vllms_own_line_or_its_last_lines() -> None:
    log = ("(EngineCore pid=7) ERROR [core.py:1] AssertionError: collective_rpc should not be "
           "called on follower node\nRuntimeError: Engine core initialization failed.\n")
    assert cluster_readout.why_stopped(log).startswith("a worker started without --headless")
    assert cluster_readout.why_stopped(log).endswith(
        "vLLM: (EngineCore pid=7) ERROR [core.py:1] AssertionError: collective_rpc should not "
        "be called on follower node")
    assert cluster_readout.why_stopped("a\nb\n") == "a | b"
    refused = ("(APIServer pid=1) Value error, User-specified max_model_len (8192) is greater "
               "than the derived max_model_len [type=value_error]\nlast words\n")
    assert cluster_readout.why_stopped(refused) == (
        "Value error, User-specified max_model_len (8192) is greater than the derived "
        "max_model_len")


def test_nodes_sharing_a_host_get_their_own_shm_instead_of_the_hosts_ipc() -> None:
    tag = CONFIG.tag("cpu-3.73")
    head = cluster.plan_nodes([SAMPLES / "head.env"], [], LOCAL)[0]
    assert cluster.container_options(tag, head)["ipc_mode"] == "host"
    shared = cluster.container_options(tag, head, "2g")
    assert shared["shm_size"] == "2g" and "ipc_mode" not in shared
    words = cluster.docker_run(tag, head, tag.image_ref, "2g")
    assert "--shm-size" in words and "--ipc" not in words


def test_a_size_docker_cannot_read_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbake.__main__ import main

    head = str(SAMPLES / "head.env")
    assert main(["up", "3.73-vision", head, "--print", "--shm-size", "2 GB"]) == 2
    assert "'2 GB' is not a size (e.g. 2g, 512m)" in capsys.readouterr().err
