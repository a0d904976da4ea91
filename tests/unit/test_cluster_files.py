"""check-env of several files: the reference four-node files agree, and each cross-file
mistake is one error naming the file and line (the real entrypoint builds the commands)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.nodes import cluster_files, envfile

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "images" / "smoke" / "dsv4-4node" / "accept"
NODES = ("head.env", "worker-1.env", "worker-2.env", "worker-3.env")
TAG = versions.load(REPO / "versions.yaml").tag("production-3.73-vision")


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    for name in NODES:
        shutil.copy(SAMPLES / name, tmp_path / name)
    return tmp_path


def edit(path: Path, pattern: str, replacement: str) -> int:
    """Replace pattern on its line; returns the line's number."""
    lines = path.read_text().splitlines()
    number = next(i for i, line in enumerate(lines) if re.search(pattern, line))
    lines[number] = re.sub(pattern, replacement, lines[number])
    path.write_text("\n".join(lines) + "\n")
    return number + 1


def findings(folder: Path) -> list[tuple[str, str]]:
    files = [envfile.read(folder / name) for name in NODES]
    return [(f.where.replace(f"{folder}/", ""), f.rule) for f in cluster_files.check(TAG, files)]


def test_the_reference_files_agree_and_name_the_tags_image(cluster: Path) -> None:
    assert findings(cluster) == []
    assert envfile.read(cluster / "head.env").values["IMAGE"] == TAG.image_ref


@pytest.mark.parametrize(("file", "pattern", "replacement", "rules"), [
    ("worker-2.env", r"NODE_RANK=2", "NODE_RANK=1", ["rank-repeated", "rank-missing"]),
    ("worker-3.env", r"MASTER_ADDR=\S+", "MASTER_ADDR=192.168.100.99", ["master-addr-differs"]),
    ("worker-1.env", r"VLLM_HOST_IP=\S+", "VLLM_HOST_IP=192.168.100.11",
     ["host-address-repeated"]),
    ("worker-1.env", r"MAX_MODEL_LEN=\d+", "MAX_MODEL_LEN=65536", ["engine-args-differ"]),
    ("worker-3.env", r"^IMAGE=\S+", "IMAGE=elsewhere/vllm:latest", ["image-not-the-tags"]),
])
def test_each_cross_file_mistake_is_one_error_with_file_and_line(
        cluster: Path, file: str, pattern: str, replacement: str, rules: list[str]) -> None:
    line = edit(cluster / file, pattern, replacement)
    found = findings(cluster)
    assert [rule for _, rule in found] == rules
    assert found[0][0] == f"{file}:{line}"


def test_ranks_are_compared_as_numbers_and_the_repeat_names_both_files(
        cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = edit(cluster / "worker-1.env", r"NODE_RANK=1", "NODE_RANK=1")
    line = edit(cluster / "worker-2.env", r"NODE_RANK=2", "NODE_RANK=01")
    status = main(["--config", str(REPO / "versions.yaml"), "check-env", "--tag",
                   TAG.name, *(str(cluster / name) for name in NODES)])
    out = capsys.readouterr()
    assert status == 2
    lines = out.out.splitlines()
    at = next(i for i, text in enumerate(lines) if "[rank-repeated]" in text)
    assert lines[at:at + 2] == [
        f"{cluster}/worker-2.env:{line}: error: NODE_RANK=01 is rank 1, as is "
        f"{cluster}/worker-1.env:{first} (NODE_RANK=1) [rank-repeated]",
        "  -> give each node its own rank, 0 to NNODES-1"]
    assert [rule for _, rule in findings(cluster)] == ["rank-repeated", "rank-missing"]


def test_a_head_only_option_that_differs_is_not_an_engine_difference(cluster: Path) -> None:
    edit(cluster / "worker-1.env", r"API_PORT=\d+", "API_PORT=9999")  # no server on a worker
    assert findings(cluster) == []


def test_the_command_prints_each_error_and_exits_2(
        cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = edit(cluster / "worker-3.env", r"MASTER_ADDR=\S+", "MASTER_ADDR=10.1.1.1")
    status = main(["--config", str(REPO / "versions.yaml"), "check-env", "--tag",
                   TAG.name, *(str(cluster / name) for name in NODES)])
    out = capsys.readouterr()
    assert status == 2
    assert f"{cluster}/worker-3.env:{line}: error: MASTER_ADDR=10.1.1.1 here, 192.168.100.11 " \
           "on the head" in out.out
    assert "1 error(s) between the files" in out.err
