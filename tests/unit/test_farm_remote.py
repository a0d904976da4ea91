"""The compile farm on nodes (`compile-farm up --hosts | --nodes-file`, farm_remote): the ssh
commands each node gets, in order, with its config and unit on standard input, the head's
one tunnel per node, a node that fails named in one line while the others go on, and
`--hosts`/`--nodes-file` read into ssh hosts. A recording runner stands in for ssh: no node
is reachable from this project's machine."""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sparkbake.errors import SmokeError, UsageError
from sparkbake.nodes import farm_hosts
from sparkbake.wheels import farm_plan, farm_remote
from sparkbake.wheels.farm_remote import NodeFailed

TOKENS = farm_plan.FarmTokens("a2V5", "client-secret")
REFUSED = "ssh: connect to host spark-2 port 22: Connection refused"


@dataclass
class Recording:
    """ssh as a recording: each node reports 20 CPUs, 128 GiB and aarch64; hosts in `down`
    are refused as ssh refuses them (exit 255)."""

    down: frozenset[str] = frozenset()
    runs: list[tuple[list[str], bytes]] = field(default_factory=list)
    spawned: list[list[str]] = field(default_factory=list)

    def run(self, args: list[str], stdin: bytes = b"") -> tuple[int, str]:
        self.runs.append((args, stdin))
        if args[5] in self.down:
            return 255, REFUSED
        if args[-1] == farm_remote.PROBE:
            return 0, f"20\n{128 * 2**20}\naarch64\n"
        return (0, "active\n") if "is-active" in args else (0, "")

    def spawn(self, args: list[str], log: Path) -> int:
        self.spawned.append(args)
        return 4000 + len(self.spawned)


def farm(tmp_path: Path, machine: str = "aarch64") -> farm_remote.Farm:
    return farm_remote.Farm(10600, TOKENS, b"\x7fELF sccache-dist", machine, 6.0, tmp_path)


def test_a_node_gets_the_binary_its_config_and_unit_on_stdin_then_one_tunnel(
        tmp_path: Path) -> None:
    runner = Recording()
    server = farm_remote.start_node(runner, "spark-1", 10601, farm(tmp_path))
    commands = [args[-1] for args, _ in runner.runs]
    assert commands == [farm_remote.PROBE, farm_remote.INSTALL,
                        *(command[-1] for command in farm_plan.remote_commands(
                            "spark-1", farm_plan.Server("spark-1", 10601, (), 0), 10600)[:3])]
    assert all(args[:6] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "spark-1"]
               for args, _ in runner.runs)
    stdin = [data for _, data in runner.runs]
    assert stdin[1] == b"\x7fELF sccache-dist"
    config = tomllib.loads(stdin[2].decode())
    assert config["public_addr"] == "127.0.0.1:10601"
    assert config["scheduler_url"] == "http://127.0.0.1:10600"
    assert "CPUAffinity=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19" in stdin[3].decode()
    assert "MemoryMax=122880M" in stdin[3].decode()  # 20 slots of 6 GiB: 120 GiB of 128
    assert all(TOKENS.client not in " ".join(args) for args, _ in runner.runs)
    tunnel, = runner.spawned
    assert tunnel[-1] == "spark-1" and "-N" in tunnel
    assert "127.0.0.1:10601:127.0.0.1:10601" in tunnel
    assert "127.0.0.1:10600:127.0.0.1:10600" in tunnel
    assert tunnel[tunnel.index("-E") + 1] == str(tmp_path / "tunnel-spark-1.log")
    assert (server.role, server.name, server.host, server.pid) == \
        ("server", "spark-1", "spark-1", 4001)
    assert len(server.cores) == 20 and server.memory_gib == 120.0


def test_slots_follow_the_nodes_memory(tmp_path: Path) -> None:
    small = farm_remote.Farm(10600, TOKENS, b"", "aarch64", 32.0, tmp_path)
    server = farm_remote.start_node(Recording(), "spark-1", 10601, small)
    assert server.cores == (0, 1, 2, 3) and server.memory_gib == 128.0


def test_an_unreachable_node_is_named_with_sshs_line_and_nothing_runs_for_it(
        tmp_path: Path) -> None:
    runner = Recording(down=frozenset({"spark-2"}))
    with pytest.raises(NodeFailed) as failed:
        farm_remote.start_node(runner, "spark-2", 10602, farm(tmp_path))
    assert str(failed.value) == f"spark-2: reaching it over ssh failed: {REFUSED}"
    assert len(runner.runs) == 1 and not runner.spawned


def test_a_node_not_reached_is_named_in_one_line_and_the_others_run(tmp_path: Path) -> None:
    runner = Recording(down=frozenset({"spark-2"}))
    said: list[str] = []
    started, failed = farm_remote.start_nodes(
        runner, {"spark-1": 10601, "spark-2": 10602, "spark-3": 10603}, farm(tmp_path),
        said.append)
    assert [server.name for server in started] == ["spark-1", "spark-3"]
    assert [exc.host for exc in failed] == ["spark-2"]
    assert said == [f"compile farm: spark-2: reaching it over ssh failed: {REFUSED}; left out"]
    assert len(runner.spawned) == 2  # one tunnel per node that runs


def test_no_node_reached_is_exit_6(tmp_path: Path) -> None:
    with pytest.raises(SmokeError) as fault:
        farm_remote.start_nodes(Recording(down=frozenset({"spark-2"})), {"spark-2": 10602},
                                farm(tmp_path), lambda line: None)
    assert fault.value.message == "compile-farm up: no node's server started (1 tried)"
    assert fault.value.exit_code == 6


def test_a_node_of_another_machine_is_left_out(tmp_path: Path) -> None:
    with pytest.raises(NodeFailed) as failed:
        farm_remote.start_node(Recording(), "spark-1", 10601, farm(tmp_path, "x86_64"))
    assert str(failed.value).startswith(
        "spark-1: it is aarch64, this machine's sccache-dist x86_64")


def test_a_node_whose_output_is_not_a_shape_is_named(tmp_path: Path) -> None:
    class Odd(Recording):
        def run(self, args: list[str], stdin: bytes = b"") -> tuple[int, str]:
            return 0, "Welcome to spark-1\n"

    with pytest.raises(NodeFailed) as failed:
        farm_remote.start_node(Odd(), "spark-1", 10601, farm(tmp_path))
    assert str(failed.value) == (
        "spark-1: its CPUs and memory could not be read ('Welcome to spark-1')")


def test_down_removes_the_service_and_its_config_and_names_a_node_not_reached() -> None:
    runner = Recording(down=frozenset({"spark-2"}))
    farm_remote.stop_node(runner, "spark-1")
    args, _ = runner.runs[0]
    assert args[-1] == farm_remote.REMOVE
    assert f"rm -rf {farm_plan.REMOTE_DIR}" in args[-1]  # the config holds the token
    with pytest.raises(NodeFailed, match=r"^spark-2: removing its server failed: ssh: connect"):
        farm_remote.stop_node(runner, "spark-2")


def test_status_asks_systemd_on_each_node() -> None:
    runner = Recording(down=frozenset({"spark-2"}))
    assert farm_remote.node_state(runner, "spark-1") == "service active"
    assert farm_remote.node_state(runner, "spark-2") == f"not reached ({REFUSED})"


def arguments(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"action": "up", "local": None, "hosts": None,
                                 "nodes_file": None, **given})


def test_hosts_and_the_node_lists_ssh_hosts(tmp_path: Path) -> None:
    assert farm_hosts.hosts_of(arguments(hosts="spark-1, root@spark-2")) == \
        ["spark-1", "root@spark-2"]
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("nodes:\n  - {address: 192.168.100.11, engine: ssh://root@spark-1}\n"
                     "  - {address: 192.168.100.12, engine: ssh://spark-2}\n")
    assert farm_hosts.hosts_of(arguments(nodes_file=nodes)) == ["root@spark-1", "spark-2"]
    nodes.write_text("nodes:\n  - {address: 192.168.100.11}\n  - {address: 192.168.100.12}\n")
    assert farm_hosts.hosts_of(arguments(nodes_file=nodes)) == \
        ["192.168.100.11", "192.168.100.12"]
    assert farm_hosts.hosts_of(arguments(local=2)) is None


@pytest.mark.parametrize(("given", "line"), [
    ({"hosts": "a,b", "local": 2}, "compile-farm: --local and --hosts name two farms"),
    ({"hosts": "a,a"}, "compile-farm up: a named more than once"),
    ({"hosts": ","}, "compile-farm up --hosts names no node"),
])
def test_usage_faults_are_one_line(given: dict[str, object], line: str) -> None:
    with pytest.raises(UsageError) as fault:
        farm_hosts.hosts_of(arguments(**given))
    assert fault.value.message == line
    assert fault.value.exit_code == 2


def test_down_takes_no_hosts() -> None:
    with pytest.raises(UsageError) as fault:
        farm_hosts.hosts_of(arguments(action="down", hosts="a"))
    assert fault.value.message == "compile-farm down takes no --hosts"
