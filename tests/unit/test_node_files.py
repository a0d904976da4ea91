"""node-files: the four reference files made again from four addresses, the same but for
what makes each node its own; every bad input one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.errors import ConfigError, UsageError
from sparkbake.nodes import envfile, node_files

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "images" / "smoke" / "dsv4-4node" / "accept"
CONFIG = versions.load(REPO / "versions.yaml")
TAG = CONFIG.tag("production-3.73-vision")
ADDRESSES = "192.168.100.11,192.168.100.12,192.168.100.13,192.168.100.14"


def test_the_reference_files_are_made_again_from_their_addresses(tmp_path: Path) -> None:
    layout = node_files.parse_addresses(ADDRESSES, "enp1s0f0np0")
    paths = node_files.write(TAG, layout, SAMPLES / "head.env", tmp_path, force=False)
    assert [p.name for p in paths] == ["head.env", "worker-1.env", "worker-2.env",
                                       "worker-3.env"]
    for path in paths:
        made, sample = envfile.read(path), envfile.read(SAMPLES / path.name)
        assert made.values == sample.values, path.name
        # in place: the same line as the sample's, one header line above
        assert made.lines["VLLM_HOST_IP"] == sample.lines["VLLM_HOST_IP"] + 1


def test_settings_the_template_lacks_are_added_and_the_last_assignment_is_set() -> None:
    text = "A=1\nNNODES=1  TP_SIZE=1 # one\n# NODE_RANK=5\nNNODES=3\n"
    made = node_files.render(text, {"NNODES": "2", "TP_SIZE": "2", "NODE_RANK": "1"}, "# h")
    assert made == "# h\nA=1\nNNODES=1  TP_SIZE=2 # one\n# NODE_RANK=5\nNNODES=2\nNODE_RANK=1\n"
    values = envfile.parse(made, Path("x.env")).values
    assert (values["NNODES"], values["TP_SIZE"], values["NODE_RANK"]) == ("2", "2", "1")


def test_the_cli_writes_and_checks_the_cpu_tags_two_files(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    code = main(["node-files", "cpu-3.73", "--nodes", "127.0.0.1,127.0.0.2", "--iface", "lo",
                 "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr()
    worker = envfile.read(tmp_path / "worker-1.env").values
    assert {k: worker[k] for k in ("NNODES", "TP_SIZE", "NODE_RANK", "MASTER_ADDR",
                                   "VLLM_HOST_IP", "FABRIC_IFACE")} == {
        "NNODES": "2", "TP_SIZE": "2", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1",
        "VLLM_HOST_IP": "127.0.0.2", "FABRIC_IFACE": "lo"}
    assert worker["IMAGE"] == CONFIG.tag("cpu-3.73").image_ref
    assert "the 2 files agree" in capsys.readouterr().err


@pytest.mark.parametrize(("nodes", "iface", "message"), [
    ("", None, "--nodes names no address"),
    ("192.168.100.11,spark-2", None, "'spark-2' is not an IP address"),
    ("10.0.0.1,10.0.0.2,10.0.0.1", None, "names 10.0.0.1 more than once"),
    ("10.0.0.1", "a b", "--iface 'a b' is not a network interface name"),
])
def test_a_bad_node_list_is_one_usage_error(nodes: str, iface: str | None, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        node_files.parse_addresses(nodes, iface)
    assert caught.value.exit_code == 2 and len(str(caught.value).splitlines()) == 2


def test_files_already_there_are_kept_unless_forced(tmp_path: Path) -> None:
    layout = node_files.parse_addresses("10.0.0.1,10.0.0.2", None)
    (tmp_path / "worker-1.env").write_text("MINE=1\n")
    with pytest.raises(ConfigError, match=r"worker-1\.env already exist"):
        node_files.write(TAG, layout, SAMPLES / "head.env", tmp_path, force=False)
    assert (tmp_path / "worker-1.env").read_text() == "MINE=1\n"
    node_files.write(TAG, layout, SAMPLES / "head.env", tmp_path, force=True)
    assert envfile.read(tmp_path / "worker-1.env").values["NODE_RANK"] == "1"


def test_a_template_the_shell_would_misread_is_named_by_line(tmp_path: Path) -> None:
    template = tmp_path / "bad.env"
    template.write_text("MODEL=/model\nMASTER_ADDR=<head-ip>\n")
    layout = node_files.parse_addresses("10.0.0.1", None)
    with pytest.raises(ConfigError, match=r"bad.env:2: "):
        node_files.write(TAG, layout, template, tmp_path / "out", force=False)
