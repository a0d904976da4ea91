"""The compile farm for real: `compile-farm up --local 2` (a scheduler and two sccache-dist
servers as root with bubblewrap, on loopback), the fixture built through it by a builder
that keeps `--network none`, and the same image as a local build; a server killed mid-build
and a wrong token cost only time. `down` leaves no process running."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbake.oci import image_layout
from sparkbake.wheels.farm_state import FarmRecord, Layout, alive, read
from tests.conftest import Project, copy_project, plain_console

pytestmark = pytest.mark.docker


def farm_layout(project: Project) -> Layout:
    return Layout(project.root / "build" / "compile-farm")


@pytest.fixture
def farm_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A fresh project with its own host cache (a cold compile cache) and a farm of two local
    servers; afterwards `down`, and no process of the farm left."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is missing: run scripts/host-setup")
    monkeypatch.setenv("SPARKBAKE_CACHE", str(tmp_path / "host-cache"))
    monkeypatch.delenv("SPARKBAKE_COMPILE_CACHE", raising=False)
    project = copy_project(tmp_path / "project")
    record: FarmRecord | None = None
    try:
        assert project.sparkbake("compile-farm", "up", "--local", "2") == 0
        record = read(farm_layout(project))
        yield project
    finally:
        project.sparkbake("compile-farm", "down")
        if record is not None:
            left = [p for p in record.processes if alive(p, farm_layout(project))]
            for process in left:  # ended here so that no test leaves one running
                os.killpg(process.pid, signal.SIGKILL)
            assert not left, f"compile-farm down left {left}"


def image_digest(project: Project) -> str:
    found = image_layout.Layout(project.root / "build" / "oci", plain_console()).find("fixture")
    assert found is not None
    return found.digest


def wheels_report(project: Project) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(next((project.root / "wheels").glob("*/wheels.json"))
                                        .read_text())
    return report


def remote_line(text: str) -> tuple[int, int]:
    found = re.search(r"^compiled remotely: (\d+) of (\d+)$", text, re.MULTILINE)
    assert found, "no 'compiled remotely' line"
    return int(found[1]), int(found[2])


def test_up_status_down_keeps_its_tokens_private_and_leaves_nothing_running(
        farm_project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    layout = farm_layout(farm_project)
    record = read(layout)
    assert record is not None and len(record.servers) == 2
    assert all(alive(p, layout) for p in record.processes)
    assert farm_project.sparkbake("compile-farm", "status") == 0
    shown = capsys.readouterr()
    out = shown.out + shown.err
    assert f"scheduler: 2 servers, {record.slots} slots, 0 jobs running" in out
    assert re.search(r"^local-1 127\.0\.0\.1:\d+: pid \d+ running, 1 slots", out, re.MULTILINE)
    token = (layout.client / "client.toml").read_text().split('token = "')[1].split('"')[0]
    for secret in (layout.client / "client.toml", *layout.secrets.iterdir()):
        assert secret.stat().st_mode & 0o777 == 0o600, secret
    assert layout.secrets.stat().st_mode & 0o777 == 0o700
    told = layout.record.read_text() + out + "".join(
        log.read_text(errors="replace") for log in layout.logs.iterdir())
    assert token not in told, "the client token reached a record or a log"
    assert farm_project.sparkbake("compile-farm", "up", "--local", "1") == 2  # one farm only
    assert farm_project.sparkbake("compile-farm", "down") == 0
    assert not any(alive(p, layout) for p in record.processes)
    assert not any(Path(f"/proc/{p.pid}").exists() for p in record.processes)
    assert not layout.sockets.exists() and not layout.client.exists()


def test_a_cold_build_through_the_farm_gives_the_local_builds_image(
        farm_project: Project, built_fixture: Project,
        capsys: pytest.CaptureFixture[str]) -> None:
    client = farm_layout(farm_project).client / "client.toml"
    token = client.read_text().split('token = "')[1].split('"')[0]
    assert farm_project.sparkbake("build-image", "fixture") == 0
    out = capsys.readouterr().err
    remote, compiled = remote_line(out)
    print(f"compiled remotely: {remote} of {compiled}")
    assert compiled > 0 and remote >= 0.8 * compiled
    assert "--network none" not in out
    log = farm_project.log("fixture", "wheels")
    assert "compile farm: the test compile ran on the farm" in log
    assert "2 CPUs; + 2 compile farm slots)" in log  # MAX_JOBS counts them
    assert image_digest(farm_project) == image_digest(built_fixture)
    records = [path for path in (farm_project.root / "build").rglob("*")
               if path.is_file() and path.suffix in (".json", ".log") and path != client]
    assert not [path for path in records if token in path.read_text(errors="replace")], \
        "the client token reached a record or log of the build"


@pytest.mark.required("prove-compile-cache")
def test_a_server_killed_mid_build_costs_only_time(
        farm_project: Project, built_fixture: Project) -> None:
    """The server the scheduler gives the build's first job is killed as it takes it (the
    job after the test compile's, while sccache sends it nvcc's toolchain)."""
    record = read(farm_layout(farm_project))
    assert record is not None
    scheduler_log = farm_layout(farm_project).logs / "scheduler.log"
    build = subprocess.Popen([sys.executable, "-m", "sparkbake", "--config",
                              str(farm_project.config_path), "build-image", "fixture"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = first_build_job_server(scheduler_log)
        killed = next(server for server in record.servers if server.port == port)
        os.killpg(killed.pid, signal.SIGKILL)
        out, _ = build.communicate(timeout=600)
    finally:
        if build.poll() is None:
            build.kill()
    assert build.returncode == 0, out
    stats = farm_project.log("fixture", "wheels").split("sccache statistics: ")[1]
    assert json.loads(stats.splitlines()[0])["stats"]["dist_errors"] >= 1, \
        "the killed server had no job of the build"
    assert image_digest(farm_project) == image_digest(built_fixture)


def first_build_job_server(scheduler_log: Path) -> int:
    """The port of the server the scheduler gives its second job (the first is the test
    compile's), as soon as it logs it."""
    assigned = re.compile(r"Job \d+ created and will be assigned to server "
                          r"ServerId\(127\.0\.0\.1:(\d+)\)")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = assigned.findall(scheduler_log.read_text()) if scheduler_log.exists() else []
        if len(found) >= 2:
            return int(found[1])
        time.sleep(0.02)
    raise AssertionError("the scheduler gave the build no job within 300 s")


@pytest.mark.required("prove-compile-cache")
def test_a_wrong_token_compiles_here_with_one_line(
        farm_project: Project, built_fixture: Project,
        capsys: pytest.CaptureFixture[str]) -> None:
    client = farm_layout(farm_project).client / "client.toml"
    text = client.read_text()
    client.write_text(re.sub(r'(\[dist\.auth\][^\[]*token = ")[^"]*', r"\1not-the-token", text))
    assert farm_project.sparkbake("wheels", "fixture") == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("compile farm: ")]
    assert len(lines) == 1 and lines[0].endswith("; compiling here"), lines
    assert lines[0].startswith("compile farm: the test compile failed through the farm: ")
    assert remote_line(err)[0] == 0
    ours, theirs = wheels_report(farm_project), wheels_report(built_fixture)
    assert [w["sha256"] for w in ours["wheels"]] == [w["sha256"] for w in theirs["wheels"]]
