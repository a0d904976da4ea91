"""A local farm server's memory limit (farm_cgroup), on a folder laid out as a cgroup v2
hierarchy: the files the kernel gives, written as the kernel takes them. The real hierarchy
is used in tests/integration/test_farm_memory.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkbake.wheels import farm_cgroup


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    return tmp_path


def as_kernel_makes(group: Path) -> None:
    """What the kernel puts in a group mkdir makes, before make_group writes to it."""
    (group / "cgroup.subtree_control").write_text("")


def test_a_server_group_gets_memory_max_and_the_controller_on_its_way(v2: Path) -> None:
    (v2 / "sparkbake-farm-4000").mkdir()
    as_kernel_makes(v2 / "sparkbake-farm-4000")
    group = farm_cgroup.make_group(v2, "4000", "local-1", 11.8)
    assert group == v2 / "sparkbake-farm-4000" / "local-1"
    assert (group / "memory.max").read_text() == f"{int(11.8 * 2**30)}\n"
    assert (v2 / "cgroup.subtree_control").read_text() == "+memory\n"
    assert (v2 / "sparkbake-farm-4000" / "cgroup.subtree_control").read_text() == "+memory\n"
    assert farm_cgroup.limit_line(str(group)) == f"memory.max 11.8 GiB ({group})"


def test_why_a_machine_gives_no_limit(v2: Path, tmp_path: Path) -> None:
    assert farm_cgroup.unavailable(v2) is None
    (v2 / "cgroup.controllers").write_text("cpu pids\n")
    assert farm_cgroup.unavailable(v2) == f"the memory controller is not available in {v2}"
    v1 = tmp_path / "v1"
    v1.mkdir()
    assert farm_cgroup.unavailable(v1) == f"{v1} is not a cgroup v2 hierarchy"


def test_a_server_joins_its_group_before_its_command_runs(tmp_path: Path) -> None:
    command = farm_cgroup.joined(tmp_path, ["sh", "-c", "echo $$"])
    shown = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert (tmp_path / "cgroup.procs").read_text() == shown  # the same process, after exec
    assert farm_cgroup.joined(None, ["true"]) == ["true"]


def test_groups_go_with_their_farm(v2: Path) -> None:
    groups = [v2 / "sparkbake-farm-4000" / name for name in ("local-1", "local-2")]
    for group in groups:
        group.mkdir(parents=True)
    farm_cgroup.remove_groups([*map(str, groups), ""])
    assert not (v2 / "sparkbake-farm-4000").exists()
