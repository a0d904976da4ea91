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
    ("fd00::11,fd00:0::11", None, r"names fd00:0::11 more than once \(as fd00::11\)"),
    ("10.0.0.1,::ffff:10.0.0.1", None, r"names ::ffff:10.0.0.1 more than once \(as 10.0.0.1\)"),
    ("0.0.0.0,10.0.0.1", None, r"'0.0.0.0' is unspecified \(any address\), not one node's"),
    ("10.0.0.1,::", None, "'::' is unspecified"),
    ("10.0.0.1,255.255.255.255", None, "'255.255.255.255' is the broadcast address"),
    ("224.0.0.1,10.0.0.1", None, "'224.0.0.1' is a multicast address"),
    ("ff02::1,10.0.0.1", None, "'ff02::1' is a multicast address"),
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


def test_an_assignment_is_set_and_not_a_comment_that_mentions_it() -> None:
    text = "X=1 # was FABRIC_IFACE=eth9\nFABRIC_IFACE=eth0 # FABRIC_IFACE=old\n" \
           "Y='a # FABRIC_IFACE=q' Z=1\n"
    made = node_files.render(text, {"FABRIC_IFACE": "lo", "Z": "2"}, "# h")
    assert made == ("# h\nX=1 # was FABRIC_IFACE=eth9\nFABRIC_IFACE=lo # FABRIC_IFACE=old\n"
                    "Y='a # FABRIC_IFACE=q' Z=2\n")
    only_comment = node_files.render("X=1 # was FABRIC_IFACE=eth9\n", {"FABRIC_IFACE": "lo"},
                                     "# h")
    assert envfile.parse(only_comment, Path("x.env")).values["FABRIC_IFACE"] == "lo"


def run_node_files(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(["node-files", "cpu-3.73", "--nodes", "127.0.0.1,127.0.0.2", *argv])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_latin1_template_is_one_line(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "latin1.env"
    template.write_bytes("MODEL=/model\n# caf\u00e9\n".encode("latin-1"))
    code, err = run_node_files(capsys, "--from", str(template), "--out", str(tmp_path / "o"))
    assert (code, err) == (2, [f"sparkbake: error: {template}:2: not UTF-8 text (byte 0xe9)",
                               "  -> save the template as UTF-8 (iconv -f latin1 -t utf-8)"])


def test_an_out_that_is_a_file_is_one_line(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").write_text("mine\n")
    code, err = run_node_files(capsys, "--out", str(tmp_path / "taken"))
    assert (code, err[0]) == (2, f"sparkbake: error: --out {tmp_path}/taken is a file, not a "
                                 "folder")
    code, err = run_node_files(capsys, "--out", str(tmp_path / "taken" / "below"))
    assert (code, len(err)) == (2, 2) and err[0].startswith(
        f"sparkbake: error: cannot write {tmp_path}/taken/below/head.env: "), err
    assert (tmp_path / "taken").read_text() == "mine\n"


def test_refused_files_are_taken_back_and_a_second_run_starts_clean(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "bad.env"
    template.write_text("MODEL=/model\nMAX_NUM_SEQS=many\n")
    out = tmp_path / "out"
    code, err = run_node_files(capsys, "--from", str(template), "--out", str(out))
    assert code == 2 and err[-2:] == [
        "sparkbake: error: check-env for cpu-3.73: 2 of 2 file(s) with preflight errors; "
        f"node-files took back the 2 file(s) it wrote in {out}",
        "  -> fix the node list or the template (--from) as the lines above say, and run "
        "node-files again"], err
    assert not out.exists()
    out.mkdir()
    (out / "head.env").write_text("MINE=1\n")
    code, err = run_node_files(capsys, "--from", str(template), "--out", str(out), "--force")
    assert code == 2 and err[-2].endswith("(the ones written over are as they were)"), err
    assert sorted(p.name for p in out.iterdir()) == ["head.env"]
    assert (out / "head.env").read_text() == "MINE=1\n"
    template.write_text("MODEL=/model\n")
    code, err = run_node_files(capsys, "--from", str(template), "--out", str(out), "--force")
    assert code == 0, err
