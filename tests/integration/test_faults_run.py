"""Faults end, in bounded time, with one clear error: on the fixture tag (amd64, the local
Debian base) built once for the module, and on the tiny images of test_publish.

Each command that could hang runs as its own process under a time limit: a hang fails the
test instead of stalling the run. The bake's full disk is a small tmpfs over build/contexts
(root only: mount); the stalled registry a docker-registry this test starts and SIGSTOPs;
the interrupted publish a fault proxy in front of the registry (tests/faultproxy.py) that
answers the moving tag's push 503.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker.errors
import pytest

from sparkbake import planning
from sparkbake.config.settings import Settings
from sparkbake.errors import PublishError
from sparkbake.oci import docker_engine, image_layout, local_registry, registry_access
from sparkbake.oci.distribution import Session
from tests.conftest import Project, copy_project, free_port, missing, plain_console
from tests.faultproxy import Faults, fault_proxy
from tests.integration import test_publish as pub

pytestmark = pytest.mark.docker

TAG = "fixture"
REPOSITORY = f"localhost:5000/sparkbake-faults-{uuid.uuid4().hex[:8]}"  # no other test's image
BOUND = 120  # seconds any one command here may take before it counts as hung


@dataclass(frozen=True)
class Built:
    project: Project
    digest: str  # of the clean build

    @property
    def build(self) -> Path:
        return self.project.root / "build"

    def baked_digest(self) -> str:
        found = image_layout.Layout(self.build / "oci", console=plain_console()).find(TAG)
        assert found is not None
        return found.digest

    def unbake(self, client: docker_engine.Client) -> None:
        """The bake runs again (the venv container included): no image, no venv layers."""
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(f"{REPOSITORY}:{TAG}", force=True)
        shutil.rmtree(self.build / "layers", ignore_errors=True)


def sparkbake(project: Project, *args: str) -> subprocess.Popen[str]:
    """The CLI as its own process (killable, timed)."""
    return subprocess.Popen([sys.executable, "-m", "sparkbake", "--config",
                             str(project.config_path), *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen[str], bound: float = BOUND) -> tuple[int, str]:
    """Its exit code and output (stdout, then stderr); a process still running after bound
    seconds is killed and the test fails (it hung)."""
    try:
        out, err = process.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"{process.args!r} still ran after {bound} s")
    return process.returncode, out + err


def bake_states(output: str) -> list[str]:
    """What the bake stage's lines say: ran, cached, failed."""
    return [line.split()[1] for line in output.splitlines() if line.startswith("bake ")]


@pytest.fixture(scope="module")
def built(docker_client: docker_engine.Client, debian_base: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    project = copy_project(tmp_path_factory.mktemp("faults") / "project")
    config = project.config_path
    config.write_text(config.read_text().replace(
        "repository: localhost:5000/sparkbake-fixture", f"repository: {REPOSITORY}"))
    assert finish(sparkbake(project, "build-image", TAG))[0] == 0
    found = image_layout.Layout(project.root / "build" / "oci", console=plain_console()).find(TAG)
    assert found is not None
    yield Built(project, found.digest)
    with contextlib.suppress(docker.errors.APIError):
        docker_client.images.remove(f"{REPOSITORY}:{TAG}", force=True)


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[None]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        missing("root, to mount a tmpfs")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                   check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def test_a_full_disk_during_the_bake_is_exit_8_naming_the_file_then_a_clean_rebuild(
        built: Built, docker_client: docker_engine.Client) -> None:
    built.unbake(docker_client)
    started = time.monotonic()
    with tmpfs(built.build / "contexts", "64k"):
        code, err = finish(sparkbake(built.project, "build-image", TAG))
    assert code == 8, err
    assert time.monotonic() - started < BOUND
    error = err[err.index("sparkbake: error: "):].splitlines()
    assert len(error) == 2 and "Traceback" not in err
    assert f"{built.build / 'contexts'}/" in error[0] and "no space left" in error[0]
    assert "free space" in error[1]
    assert finish(sparkbake(built.project, "build-image", TAG))[0] == 0
    assert built.baked_digest() == built.digest


@pytest.mark.required("prove-faults")
def test_two_builds_of_one_tag_run_one_after_the_other(
        built: Built, docker_client: docker_engine.Client) -> None:
    built.unbake(docker_client)
    lock = built.build / f".build-{TAG}.lock"
    first = sparkbake(built.project, "build-image", TAG)
    deadline = time.monotonic() + 30
    while not lock.is_file() or not lock.read_text().startswith(f"{first.pid} "):
        assert time.monotonic() < deadline and first.poll() is None, "no lock taken"
        time.sleep(0.05)
    second = sparkbake(built.project, "build-image", TAG)
    first_code, first_err = finish(first)
    second_code, second_err = finish(second)
    assert (first_code, second_code) == (0, 0), second_err
    assert f"{TAG}: another build of it runs (pid {first.pid} on " in second_err
    assert bake_states(first_err)[0] == "ran"
    assert set(bake_states(second_err)) == {"cached"}  # the first one's work, not done again
    assert built.baked_digest() == built.digest


@pytest.mark.required("prove-faults")
def test_gc_removes_the_container_of_a_killed_run_and_keeps_a_live_ones(
        built: Built, docker_client: docker_engine.Client, debian_base: str) -> None:
    script = ("import sys; from sparkbake.oci import docker_engine as d; "
              "from sparkbake.config.settings import Settings; "
              "d.run_container(d.connect(Settings.of_process()), sys.argv[1], ['sleep', '600'])")
    killed = subprocess.Popen([sys.executable, "-c", script, debian_base])
    label = f"{docker_engine.RUN_LABEL}={socket.gethostname()}:{killed.pid}"
    deadline = time.monotonic() + 60
    while not (boxes := docker_client.containers.list(filters={"label": label})):
        assert time.monotonic() < deadline and killed.poll() is None, "no container made"
        time.sleep(0.1)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    with docker_engine.started_container(docker_client, debian_base, ["sleep", "600"]) as live:
        code, out = finish(sparkbake(built.project, "gc"))
        assert code == 0, out
        assert f"gc: removed container {boxes[0].short_id} " in out
        assert f"gc: kept container {live.short_id} " in out and "its run is still going" in out
        assert docker_client.containers.list(all=True, filters={"id": boxes[0].id}) == []
        live.reload()
        assert live.status == "running"


@pytest.fixture(scope="module")
def registry(docker_client: docker_engine.Client,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[pub.Local]:
    """A docker-registry for the publish faults; the images test_publish's Project made
    (labelled with its run) are removed at the end."""
    for tool in ("docker-registry", "skopeo"):
        if shutil.which(tool) is None:
            missing(f"{tool} (apt-get install -y {tool})")
    config = pub.registry_config(tmp_path_factory.mktemp("registry"), "127.0.0.1:1/unused")
    port = free_port()
    local_registry.start(config, plain_console(), port)
    yield pub.Local(config, port)
    local_registry.stop(config, plain_console())
    for image in docker_client.images.list(filters={"label": f"{pub.RUN_LABEL}={pub.RUN}"}):
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(image.id, force=True)


@pytest.fixture
def publishing(docker_client: docker_engine.Client, registry: pub.Local,
               tmp_path: Path) -> pub.Project:
    """test_publish's tiny image of its tag, built and smoke-recorded, ready to publish."""
    repository = f"127.0.0.1:{registry.port}/sparkbake-faults-{uuid.uuid4().hex[:8]}"
    config = pub.registry_config(tmp_path, repository)
    project = pub.Project(docker_client, config, planning.make(config, config.tag(pub.TAG)),
                          registry.port)
    project.build(uuid.uuid4().hex)
    project.smoke()
    return project


def test_a_stalled_registry_is_one_line_within_seconds(publishing: pub.Project,
                                                       tmp_path: Path) -> None:
    stalled = pub.registry_config(tmp_path / "stalled", "127.0.0.1:1/unused")
    port = free_port()
    local_registry.start(stalled, plain_console(), port)
    pid = local_registry.running(stalled)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(PublishError) as caught:
            publishing.publish(registry_host=f"127.0.0.1:{port}")
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
        local_registry.stop(stalled, plain_console())
    assert took < 25
    assert caught.value.exit_code == 7
    assert caught.value.message == (f"registry 127.0.0.1:{port} stopped answering: nothing came "
                                    "back within 10 s (a stopped or hung registry, or a dead "
                                    "link)")
    assert "run the command again" in caught.value.remedy
    assert not publishing.release.exists()


@pytest.mark.required("prove-faults")
def test_a_publish_cut_before_the_moving_tag_leaves_the_per_build_tag_and_the_record_and_a_rerun_finishes(  # noqa: E501
        publishing: pub.Project) -> None:
    moving, per_build = pub.TAG, f"{pub.TAG}-{publishing.plan.inputs[:12]}"
    path = registry_access.split_repository(publishing.plan.tag.repository)[1]
    faults = Faults([("PUT", rf"/manifests/{re.escape(moving)}$", "503")])  # once
    with fault_proxy(f"http://127.0.0.1:{publishing.port}", faults) as port:
        host = f"127.0.0.1:{port}"
        with pytest.raises(PublishError):
            publishing.publish(registry_host=host)
        assert faults.done == [f"503 PUT /v2/{path}/manifests/{moving}"]
        settings = Settings.of_process()
        session = Session(registry_access.remote_for(f"{host}/{path}", settings,
                                                     console=plain_console()),
                          settings, plain_console())
        record = json.loads(publishing.release.read_text())
        assert session.manifest_digest(per_build) == record["digest"]
        assert session.manifest_digest(moving) is None
        again = publishing.publish(registry_host=host)
        assert session.manifest_digest(moving) == again["digest"] == record["digest"]
    assert again["transfer"]["sent"]["blobs"] == 0  # the first publish sent them
    assert json.loads(publishing.release.read_text()) == again
