"""The node list: node-files' site values from one YAML file. What each node gets, the ring's
NCCL settings, MODEL from a Hugging Face cache; a wrong key, a missing field or a bad value is
one line naming file:line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.errors import ConfigError
from sparkbake.nodes import envfile, node_files, node_list
from sparkbake.nodes.engines import Node

RING = """\
topology: ring
defaults:
  iface: enp1s0f0np0
  ib_hca: rocep1s0f0
  ib_gid_index: auto
  model_host_path: /srv/models/models--deepseek-ai--DeepSeek-V4-Flash/snapshots/abc123
  cache_host_path: /srv/jit-cache
nodes:
  - {address: 192.168.100.11, engine: ssh://spark-1}
  - {address: 192.168.100.12, engine: ssh://spark-2}
  - {address: 192.168.100.13, engine: ssh://spark-3, ib_gid_index: 3}
  - {address: 192.168.100.14, engine: ssh://spark-4}
"""


def listed(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "nodes.yaml"
    path.write_text(text)
    return path


def test_each_node_gets_its_site_values_and_a_ring_its_nccl_settings(tmp_path: Path) -> None:
    layout = node_list.load(listed(tmp_path, RING))
    assert layout.topology == "ring" and layout.engines()[3] == Node("ssh://spark-4")
    values = node_files.settings(layout, 2, "IMG")
    assert values == {
        "IMAGE": "IMG", "NNODES": "4", "TP_SIZE": "4", "NODE_RANK": "2",
        "MASTER_ADDR": "192.168.100.11", "VLLM_HOST_IP": "192.168.100.13",
        "FABRIC_IFACE": "enp1s0f0np0", "IB_HCA": "rocep1s0f0", "IB_GID_INDEX": "3",
        "CACHE_HOST_PATH": "/srv/jit-cache", "FABRIC_TOPOLOGY": "ring",
        "MODEL_HOST_PATH": "/srv/models/models--deepseek-ai--DeepSeek-V4-Flash",
        "MODEL": "/model/snapshots/abc123", "NCCL_ALGO": "Ring", "NCCL_NET_PLUGIN": "none",
        "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_MERGE_NICS": "0"}
    assert node_files.settings(layout, 0, "IMG")["IB_GID_INDEX"] == "auto"


def test_a_pair_or_a_switch_gets_no_ring_settings(tmp_path: Path) -> None:
    text = "topology: switch\nnodes:\n  - address: 10.0.0.1\n  - address: 10.0.0.2\n" \
           "  - address: 10.0.0.3\n"
    values = node_files.settings(node_list.load(listed(tmp_path, text)), 1, "IMG")
    assert values["FABRIC_TOPOLOGY"] == "switch" and "NCCL_ALGO" not in values


def test_model_is_the_snapshot_of_a_hugging_face_cache_folder_read_here(tmp_path: Path) -> None:
    cache = tmp_path / "models--org--tiny"
    (cache / "snapshots" / "rev1").mkdir(parents=True)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("rev1\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert node_files.model_settings(node_list.SiteNode("10.0.0.1", model_host_path=str(
        cache))) == {"MODEL_HOST_PATH": str(cache), "MODEL": "/model/snapshots/rev1"}
    assert node_files.model_settings(node_list.SiteNode("10.0.0.1", model_host_path=str(
        plain))) == {"MODEL_HOST_PATH": str(plain), "MODEL": "/model"}


def test_a_cache_folder_not_here_must_name_its_snapshot(tmp_path: Path) -> None:
    text = "nodes:\n  - {address: 10.0.0.1, model_host_path: /srv/models--org--tiny}\n"
    layout = node_list.load(listed(tmp_path, text))
    with pytest.raises(ConfigError, match=r"nodes\.yaml:2: model_host_path /srv/models--org--"
                       r"tiny is a Hugging Face cache folder whose snapshot cannot be read here"):
        node_files.settings(layout, 0, "IMG")


@pytest.mark.parametrize(("text", "line"), [
    ("nodes:\n  - {adress: 10.0.0.1}\n",
     "nodes.yaml:2: unknown key 'adress' in node 0 (did you mean 'address'?)"),
    ("defaults: {iface: eth0, address: 10.0.0.9}\nnodes:\n  - {address: 10.0.0.1}\n",
     "nodes.yaml:1: unknown key 'address' in defaults"),
    ("topology: rign\nnodes:\n  - {address: 10.0.0.1}\n  - {address: 10.0.0.2}\n",
     "nodes.yaml:1: topology 'rign' is not one of ring, switch, pair (did you mean 'ring'?)"),
    ("topology: pair\nnodes:\n  - {address: 10.0.0.1}\n", "nodes.yaml:1: topology pair of 1"),
    ("nodes:\n  - {iface: eth0}\n", "nodes.yaml:2: node 0 lacks the key 'address'"),
    ("defaults: {iface: eth0}\n", "nodes.yaml:1: the node list lacks the key 'nodes'"),
    ("nodes: []\n", "nodes.yaml:1: nodes must be a list of the nodes"),
    ("nodes:\n  - 10.0.0.1\n", "nodes.yaml:2: node 0 must be a mapping, not a str"),
    ("nodes:\n  - {address: spark-1}\n", "nodes.yaml:2: address 'spark-1' is not an IP address"),
    ("nodes:\n  - address: 10.0.0.1\n    ib_gid_index: abc\n",
     "nodes.yaml:3: ib_gid_index 'abc' is not a GID index (0-255) or auto"),
    ("nodes:\n  - address: 10.0.0.1\n    ib_gid_index: 300\n",
     "nodes.yaml:3: ib_gid_index 300 is above 255"),
    ("nodes:\n  - address: 10.0.0.1\n    iface: 'a b'\n",
     "nodes.yaml:3: iface 'a b' is not a network interface name"),
    ("defaults:\n  model_host_path: models\nnodes:\n  - address: 10.0.0.1\n",
     "nodes.yaml:2: model_host_path 'models' is not an absolute path"),
    ("nodes:\n  - address: 10.0.0.1\n    cache_host_path: [a]\n",
     "nodes.yaml:3: cache_host_path must be a string, not a list"),
    ("nodes:\n  - {address: 10.0.0.1, engine: 'http://spark-1'}\n",
     "nodes.yaml:2: engine 'http://spark-1' is not one Docker host URL"),
    ("nodes:\n  - {address: 10.0.0.1, engine: ssh://a}\n  - {address: 10.0.0.2}\n",
     "nodes.yaml:3: this node names no engine, and others do"),
    ("nodes:\n  - {address: 'fd00::11'}\n  - {address: 'fd00:0::11'}\n",
     "nodes.yaml:3: address fd00::11 is also the address of"),
    ("nodes:\n  - {address: 10.0.0.1}\n  - {address: '::ffff:10.0.0.1'}\n",
     "nodes.yaml:3: address 10.0.0.1 is also the address of"),
    ("nodes:\n  - {address: 0.0.0.0}\n", "nodes.yaml:2: address '0.0.0.0' is unspecified"),
    ("nodes:\n  - {address: 255.255.255.255}\n",
     "nodes.yaml:2: address '255.255.255.255' is the broadcast address"),
    ("nodes:\n  - {address: 'ff02::1'}\n", "nodes.yaml:2: address 'ff02::1' is a multicast"),
])
def test_a_bad_node_list_is_one_line_naming_its_line(tmp_path: Path, text: str, line: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = listed(tmp_path, text)
    code = main(["node-files", "cpu-3.73", "--nodes-file", str(path), "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2, err
    assert err[0].startswith(f"sparkbake: error: {tmp_path}/{line}"), err
    assert not (tmp_path / "out").exists()


def test_up_takes_each_ranks_engine_from_the_list(tmp_path: Path) -> None:
    layout = node_list.load(listed(tmp_path, RING))
    files = []
    for rank in (1, 0, 3, 2):  # any order: the file's rank picks its node
        path = tmp_path / f"{rank}.env"
        path.write_text(f"NODE_RANK={rank}\nVLLM_HOST_IP=192.168.100.{11 + rank}\n")
        files.append(path)
    assert [n.url for n in node_list.engines_for(layout, files)] == [
        "ssh://spark-2", "ssh://spark-1", "ssh://spark-4", "ssh://spark-3"]
    files[0].write_text("NODE_RANK=1\nVLLM_HOST_IP=192.168.100.99\n")
    with pytest.raises(ConfigError, match=r"1\.env:2: VLLM_HOST_IP=192\.168\.100\.99, but "
                       r".*nodes\.yaml:10 gives rank 1 the address 192\.168\.100\.12"):
        node_list.engines_for(layout, files)
    with pytest.raises(ConfigError, match=r"the node list has 4 node\(s\), and 3 \.env"):
        node_list.engines_for(layout, files[:3])


def test_node_files_writes_the_rings_files_from_the_list(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    path = listed(tmp_path, RING)
    code = main(["node-files", "production-3.73-vision", "--nodes-file", str(path), "--out",
                 str(tmp_path / "out")])
    assert code == 0, capsys.readouterr()
    worker = envfile.read(tmp_path / "out" / "worker-3.env").values
    assert (worker["VLLM_HOST_IP"], worker["IB_GID_INDEX"], worker["NCCL_ALGO"],
            worker["MODEL"]) == ("192.168.100.14", "auto", "Ring", "/model/snapshots/abc123")
    assert "the 4 files agree" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "line"), [
    ([], "give the node list (--nodes-file NODES.yaml) or the addresses (--nodes A,B,...)"),
    (["--nodes", "10.0.0.1", "--nodes-file", "x.yaml"], "give the node list (--nodes-file"),
    (["--nodes-file", "nope.yaml"], "--nodes-file nope.yaml: no such file"),
    (["--nodes-file", "nope.yaml", "--iface", "eth0"], "--iface goes with --nodes"),
])
def test_node_files_takes_one_of_the_list_and_the_addresses(
        tmp_path: Path, argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["node-files", "cpu-3.73", *argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2 and err[0].startswith(f"sparkbake: error: {line}"), err


def two_nodes_on_engines(tmp_path: Path) -> tuple[Path, list[str]]:
    """A CPU node list naming each node's engine, and the files node-files wrote from it
    (the worker's first)."""
    path = listed(tmp_path, "defaults: {iface: lo}\nnodes:\n"
                            "  - {address: 127.0.0.1, engine: 'tcp://10.9.0.1:2375'}\n"
                            "  - {address: 127.0.0.2, engine: 'ssh://spark-2'}\n")
    assert main(["node-files", "cpu-3.73", "--nodes-file", str(path), "--out",
                 str(tmp_path / "out")]) == 0
    return path, [str(tmp_path / "out" / name) for name in ("worker-1.env", "head.env")]


def test_up_print_runs_each_file_on_its_ranks_engine_from_the_list(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, files = two_nodes_on_engines(tmp_path)
    capsys.readouterr()
    assert main(["up", "cpu-3.73", "--nodes-file", str(path), *files, "--print"]) == 0
    out = capsys.readouterr().out
    assert "# worker 1 (worker-1.env on ssh://spark-2)" in out
    assert "# head (head.env on tcp://10.9.0.1:2375)" in out
    code = main(["up", "cpu-3.73", "--nodes-file", str(path), "--hosts", "ssh://a,ssh://b",
                 *files, "--print"])
    assert code == 2 and capsys.readouterr().err.splitlines()[0] == (
        "sparkbake: error: give --hosts or --nodes-file, not both")


def test_check_nodes_takes_the_lists_engines_and_refuses_hosts_beside_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, files = two_nodes_on_engines(tmp_path)
    capsys.readouterr()
    code = main(["check-nodes", "cpu-3.73", "--nodes-file", str(path), "--hosts",
                 "ssh://a,ssh://b", *files])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2, err
    assert err[0] == "sparkbake: error: give --hosts or --nodes-file, not both"
    Path(files[0]).write_text(Path(files[0]).read_text() + "VLLM_HOST_IP=127.0.0.9\n")
    code = main(["check-nodes", "cpu-3.73", "--nodes-file", str(path), *files])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[0].startswith(
        f"sparkbake: error: {files[0]}:") and "VLLM_HOST_IP=127.0.0.9, but " in err[0], err
