"""The fabric: a ring's files refused by check-env without the NCCL settings it needs, and
IB_GID_INDEX=auto resolved at the container's start from the kernel's GID table (a tree of
files laid out as /sys/class/infiniband is)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake import resources
from sparkbake.__main__ import main

REPO = Path(__file__).resolve().parents[2]
HEAD = REPO / "images" / "smoke" / "dsv4-4node" / "accept" / "head.env"
RING = {"FABRIC_TOPOLOGY": "ring", "NCCL_ALGO": "Ring", "NCCL_NET_PLUGIN": "none",
        "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_MERGE_NICS": "0"}
fabric = resources.module("fabric")


def ring_file(tmp_path: Path, **changes: str) -> Path:
    values = {**RING, **changes}
    path = tmp_path / "head.env"
    path.write_text(HEAD.read_text() + "".join(f"{k}={v}\n" for k, v in values.items()
                                               if v != "-"))
    return path


def check_env(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["check-env", "--tag", "production-3.73-vision", str(path)])
    return code, [line for line in capsys.readouterr().out.splitlines()
                  if "error" in line and "[" in line]


def test_a_ring_with_its_nccl_settings_passes(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert check_env(ring_file(tmp_path, IB_GID_INDEX="auto"), capsys) == (0, [])


@pytest.mark.parametrize("missing", ["NCCL_ALGO", "NCCL_NET_PLUGIN",
                                     "NCCL_IB_SUBNET_AWARE_ROUTING", "NCCL_IB_MERGE_NICS"])
def test_a_ring_without_one_nccl_setting_is_refused(tmp_path: Path, missing: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = ring_file(tmp_path, **{missing: "-"})
    code, errors = check_env(path, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert errors[0].startswith(f"{path}:") and errors[0].endswith(
        "[ring-without-nccl-settings]") and f"{missing}=unset" in errors[0]


def test_a_ring_of_two_and_an_unknown_topology(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    two = ring_file(tmp_path, NNODES="2", TP_SIZE="2", NCCL_ALGO="-", NCCL_NET_PLUGIN="-")
    assert check_env(two, capsys)[1] == []
    code, errors = check_env(ring_file(tmp_path, FABRIC_TOPOLOGY="star"), capsys)
    assert code == 2 and errors == [
        f"{tmp_path}/head.env:30: error: FABRIC_TOPOLOGY=star is not ring, switch or pair "
        "[fabric-topology-unknown]"]


def gid(port: Path, index: int, address: str, kind: str = "RoCE v2", device: str = "eth0"
        ) -> None:
    for folder, text in (("gids", address), ("gid_attrs/types", kind),
                         ("gid_attrs/ndevs", device)):
        (port / folder).mkdir(parents=True, exist_ok=True)
        (port / folder / str(index)).write_text(text + "\n")


def test_auto_is_the_roce_v2_gid_of_the_interface_and_host_address(tmp_path: Path) -> None:
    port = tmp_path / "rocep1s0f0" / "ports" / "1"
    gid(port, 0, "fe80:0000:0000:0000:0000:00ff:fe00:0001", "IB/RoCE v1")
    gid(port, 1, "fe80:0000:0000:0000:0000:00ff:fe00:0001")
    gid(port, 2, "0000:0000:0000:0000:0000:ffff:c0a8:640a", "IB/RoCE v1")
    gid(port, 3, "0000:0000:0000:0000:0000:ffff:c0a8:640b")
    gid(port, 5, "0000:0000:0000:0000:0000:ffff:c0a8:640c")
    gid(tmp_path / "rocep1s0f1" / "ports" / "1", 4, "0000:0000:0000:0000:0000:ffff:0a00:0001",
        device="eth1")
    env = {"IB_GID_INDEX": "auto", "IB_HCA": "rocep1s0f0", "FABRIC_IFACE": "eth0"}
    assert fabric.gid_index({**env, "VLLM_HOST_IP": "192.168.100.12"}, str(tmp_path)) == "5"
    assert fabric.gid_index(env, str(tmp_path)) == "3"  # an IPv4 one, the lowest
    assert fabric.gid_index({"FABRIC_IFACE": "eth1"}, str(tmp_path)) == "4"
    assert fabric.gid_index({"IB_HCA": "^rocep1s0f0"}, str(tmp_path)) == "4"
    resolved = {**env, "NCCL_IB_GID_INDEX": "auto"}
    assert fabric.resolve_gid_index(resolved, str(tmp_path)) is None
    assert resolved["NCCL_IB_GID_INDEX"] == "3"
    fixed = {**env, "NCCL_IB_GID_INDEX": "7"}
    assert fabric.resolve_gid_index(fixed, str(tmp_path)) is None and fixed[
        "NCCL_IB_GID_INDEX"] == "7"


def test_auto_without_a_roce_v2_gid_refuses_the_start_in_one_line(tmp_path: Path) -> None:
    gid(tmp_path / "rocep1s0f0" / "ports" / "1", 0, "fe80::1", "IB/RoCE v1")
    env = {"IB_GID_INDEX": "auto", "IB_HCA": "rocep1s0f0", "FABRIC_IFACE": "eth0"}
    assert fabric.resolve_gid_index(env, str(tmp_path)) == (
        f"sparkbake: IB_GID_INDEX=auto, but no RoCE v2 GID of eth0 is on rocep1s0f0 "
        f"({tmp_path}); set IB_GID_INDEX to the index (show_gids lists them)")
    assert "NCCL_IB_GID_INDEX" not in env
