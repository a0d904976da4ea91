"""Node .env files: what a launcher's shell would read, or file:line and exit 2."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.errors import ConfigError
from sparkbake.nodes import envfile
from tests.nodeenv import ENV_DIR

PATH = Path("node.env")
VERSIONS = Path(__file__).resolve().parents[2] / "versions.yaml"

# (one line, the assignments it makes)
GOOD: list[tuple[str, list[tuple[str, str]]]] = [
    ("A=1", [("A", "1")]),
    ("export A=1", [("A", "1")]),
    ("   export   A=1   ", [("A", "1")]),
    ("NNODES=4  TP_SIZE=4", [("NNODES", "4"), ("TP_SIZE", "4")]),
    ("KV_CACHE_MEMORY_BYTES=        # empty on purpose", [("KV_CACHE_MEMORY_BYTES", "")]),
    ("A=", [("A", "")]),
    ("A=x#y", [("A", "x#y")]),
    ("A='a b $HOME'", [("A", "a b $HOME")]),
    ('A="a \\"b\\" \\$x \\\\"', [("A", 'a "b" $x \\')]),
    ('A="it\'s"', [("A", "it's")]),
    ("A=pre'fix b'\"c\"", [("A", "prefix bc")]),
    ("A=a\\ b", [("A", "a b")]),
    ("# A=1", []),
    ("", []),
    ("   ", []),
    ("exportA=1", [("exportA", "1")]),
]

# (one line, the problem named)
BAD: list[tuple[str, str]] = [
    ("MASTER_ADDR=<head-fabric-ip>", "unquoted '<' (an unfilled <placeholder>?)"),
    ("A=$HOME", "'$' expansion is not supported; use single quotes"),
    ('A="${B}"', "'$' expansion is not supported; use single quotes"),
    ("A=`date`", "'`' expansion is not supported; use single quotes"),
    ("A='open", "unterminated single quote"),
    ('A="open', "unterminated double quote"),
    ("A=1 \\", "expected NAME=VALUE"),
    ("A=1\\", "line continuations are not supported"),
    ("just words", "expected NAME=VALUE"),
    ("1A=2", "expected NAME=VALUE"),
    ("A = 1", "expected NAME=VALUE"),
    ("export", "expected NAME=VALUE"),
    ("A=1;B=2", "unquoted ';' (an unfilled <placeholder>?)"),
    ("A='x'y'", "unterminated single quote"),
]


@pytest.mark.parametrize(("line", "pairs"), GOOD)
def test_lines_a_shell_reads_the_same_way(line: str, pairs: list[tuple[str, str]]) -> None:
    assert envfile.parse_line(line) == pairs


@pytest.mark.parametrize(("line", "problem"), BAD)
def test_lines_a_shell_would_read_otherwise_are_refused_with_file_and_line(
        line: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        envfile.parse(f"# a comment\nOK=1\n{line}\n", PATH)
    assert caught.value.message.startswith(f"node.env:3: {problem}: ")
    assert caught.value.exit_code == 2 and "NAME=VALUE" in caught.value.remedy


def test_values_and_lines_are_recorded_and_the_last_assignment_wins() -> None:
    parsed = envfile.parse("A=1  B=2\n\nA=3\n", PATH)
    assert parsed.values == {"A": "3", "B": "2"}
    assert (parsed.lines, parsed.repeated) == ({"A": 3, "B": 1}, (("A", 1, 3),))
    assert (parsed.where("A"), parsed.where("C")) == ("node.env:3", "node.env")


def test_the_reference_node_files_parse() -> None:
    head = envfile.read(ENV_DIR / "head.env")
    assert head.values["KV_CACHE_MEMORY_BYTES"] == ""
    assert (head.values["NNODES"], head.values["TP_SIZE"]) == ("4", "4")
    assert head.values["CUDAGRAPH_CAPTURE_SIZES"].endswith(",55,56")
    assert head.repeated == ()


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        envfile.read(tmp_path / "none.env")


def test_a_file_with_windows_line_ends_is_refused_with_the_command_that_converts_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "head.env"
    path.write_bytes(b"# the head\r\nMODEL=/model\r\nNODE_RANK=0\r\n")
    command = ["--config", str(VERSIONS), "check-env", "--tag", "cpu-3.73", str(path)]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err == (
        f"sparkbake: error: {path}:1: the line ends in CR LF (Windows line ends): a shell "
        "that sources the file reads each value with a trailing \\r\n"
        f"  -> convert the file to LF line ends: sed -i 's/\\r$//' {path}\n")
    remedy = err.splitlines()[1].split(": ", 1)[1]
    subprocess.run(shlex.split(remedy), check=True)  # the command the line gives, run
    assert envfile.read(path).values == {"MODEL": "/model", "NODE_RANK": "0"}
    assert main(command) == 0


def test_a_carriage_return_inside_a_line_is_refused_with_its_line() -> None:
    with pytest.raises(ConfigError) as caught:
        envfile.parse("A=1\nB=2\rC=3\n", PATH)
    assert caught.value.message == ("node.env:2: a carriage return (\\r) inside the line, "
                                    "which a shell keeps in the value")
