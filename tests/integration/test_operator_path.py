"""The operator's path on two CPU nodes of this host, as docs/how-to/cpu-path.yaml declares
it and four-sparks.md shows it from there: each step's command run as written (sparkbake as
a process, from a folder holding the path's files), held to its exit code and to the lines
it says; no container of the tag is left on the engine.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkbake.oci import docker_engine
from tests import cpu_image
from tests.cpu_image import TAG, sparkbake
from tests.tiny_model import make

pytestmark = [pytest.mark.docker, pytest.mark.required("serve-cpu")]

REPO = Path(__file__).resolve().parents[2]
DECLARED = REPO / "docs" / "how-to" / "cpu-path.yaml"
LABEL = f"dev.sparkbake.cluster={TAG}"


def declared() -> dict[str, Any]:
    path: dict[str, Any] = yaml.safe_load(DECLARED.read_text())
    return path


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The path's files in a folder of their own, a tiny model's folder where the stand-in
    names one."""
    path = declared()
    [stand_in] = path["stand_ins"]
    model = make(tmp_path / "tiny-llama")
    for name, text in path["files"].items():
        (tmp_path / name).write_text(text.replace(stand_in, str(model)))
    return tmp_path


@pytest.fixture
def nothing_left(docker_client: docker_engine.Client) -> Iterator[None]:
    """Whatever the path brought up is taken down, and no container of the tag is left."""
    yield
    sparkbake("down", TAG)
    assert docker_client.containers.list(all=True, filters={"label": LABEL}) == []


def run_step(command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """The step's command as the operator types it, in folder: `sparkbake` is this checkout's,
    with its versions.yaml."""
    program, *args = shlex.split(command)
    assert program == "sparkbake", command
    return subprocess.run([sys.executable, "-m", "sparkbake", "--config",
                           str(REPO / "versions.yaml"), *args], cwd=folder, text=True,
                          capture_output=True, env=dict(os.environ), check=False)


def test_the_operators_path_runs_as_the_manual_shows_it(
        tmp_path_factory: pytest.TempPathFactory, site: Path, nothing_left: None) -> None:
    path = declared()
    assert path["tag"] == cpu_image.build(tmp_path_factory.mktemp("mirror")) == TAG
    for number, step in enumerate(path["steps"], 1):
        done = run_step(step["run"], site)
        output = done.stdout + done.stderr
        assert done.returncode == step["exit"], f"step {number}: {step['run']}\n{output[-4000:]}"
        for said in step["says"]:
            assert said in output, f"step {number}: {step['run']}: no {said!r}\n{output[-4000:]}"
