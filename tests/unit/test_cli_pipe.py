"""Output piped into a reader that leaves early (`| head -1`): no internal error, exit 141.

A real pipe and a real process: the closed pipe shows only where the operating system says
so, not in `main([...])` under pytest's capture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parents[1] / "data" / "versions.yaml"
NO_ENGINE = {**os.environ, "DOCKER_HOST": "tcp://127.0.0.1:9"}  # plan reports bake unknown


def sparkbake(*args: str) -> list[str]:
    return [sys.executable, "-m", "sparkbake", "--config", str(CONFIG), *args]


@pytest.mark.parametrize("args", [("tags",), ("plan", "fixture"), ("releases",)])
def test_a_closed_pipe_ends_the_command_quietly_with_exit_141(args: tuple[str, ...]) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # the reader has left before the first line is written
    try:
        done = subprocess.run(sparkbake(*args), stdout=writer, stderr=subprocess.PIPE,
                              text=True, env=NO_ENGINE, timeout=120, check=False)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")


def test_piping_plan_into_head_prints_its_first_line_and_no_error() -> None:
    command = " ".join(sparkbake("plan", "fixture")) + " 2>&1 | head -1"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                          env=NO_ENGINE, timeout=120, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith("fetch ")
    assert done.stderr == ""
