"""publish against a real Docker engine, a real docker-registry and skopeo as the judge.

Every image here is a tiny one of one layer (publish does not look inside an image), written
into the project's build/oci and loaded into the engine as the bake does, labelled with the
plan's inputs and with this run's id, by which the images are removed at the end. The
embedded registry runs on a free port under the module's temporary folder.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from sparkbake import planning
from sparkbake.__main__ import main
from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config
from sparkbake.errors import BakeError, EngineError, PublishError
from sparkbake.oci import docker_engine, image_layout, layers, local_registry
from sparkbake.publish import push
from tests.conftest import free_port, missing, plain_console, printed, settings_of, versions_yaml

pytestmark = pytest.mark.docker

TAG = "production-1.0-pub"
NEXT = "production-1.1-pub"  # TAG plus a patch series and another env
RUN = uuid.uuid4().hex[:12]
RUN_LABEL = "dev.sparkbake.test-run"
TAGS = f"""\
  {TAG}:
    upstream: tree
    series: []
    env: {{PUB_MODE: "one"}}
  {NEXT}:
    extends: {TAG}
    series: [fix]
    env: {{PUB_MODE: "two", PUB_EXTRA: "1"}}
"""


def registry_config(root: Path, repository: str) -> Config:
    (root / "upstream").mkdir(parents=True, exist_ok=True)
    (root / "upstream" / "setup.py").write_text("# a stand-in upstream tree\n")
    (root / "patches" / "fix").mkdir(parents=True, exist_ok=True)
    (root / "patches" / "fix" / "series").write_text("0001-fix.patch\n")
    (root / "patches" / "fix" / "0001-fix.patch").write_text("a stand-in patch (never applied)\n")
    (root / "versions.yaml").write_text(versions_yaml(repository=repository, tags=TAGS))
    return config_mod.load(root / "versions.yaml")


@pytest.fixture(scope="module")
def client() -> Iterator[docker_engine.Client]:
    try:
        engine = docker_engine.connect(settings=settings_of())
    except EngineError as exc:
        missing(f"Docker engine: {exc.message}")
    for tool in ("docker-registry", "skopeo"):
        if shutil.which(tool) is None:
            missing(f"{tool} (apt-get install -y {tool})")
    yield engine
    for image in engine.images.list(filters={"label": f"{RUN_LABEL}={RUN}"}):
        with contextlib.suppress(docker.errors.APIError):
            engine.images.remove(image.id, force=True)


@dataclass(frozen=True)
class Local:
    """The embedded registry this module runs."""

    config: Config
    port: int


@pytest.fixture(scope="module")
def local(client: docker_engine.Client,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    config = registry_config(tmp_path_factory.mktemp("registry"), "127.0.0.1:1/unused")
    port = free_port()
    local_registry.start(config, plain_console(), port)
    yield Local(config, port)
    assert local_registry.stop(config, plain_console()) is True


@dataclass(frozen=True)
class Project:
    client: docker_engine.Client
    config: Config
    plan: planning.Plan
    port: int

    @property
    def release(self) -> Path:
        return self.config.build_dir / "releases" / f"{TAG}.json"

    def plan_of(self, tag: str) -> planning.Plan:
        return self.plan if tag == TAG else planning.make(self.config, self.config.tag(tag))

    def build(self, payload: str, inputs: str | None = None, tag: str = TAG,
              base: str | None = None) -> str:
        """Bake a tiny image (/payload, under a layer of /base when base is given: the same
        bytes give the same blob) into build/oci and the engine under the tag's ref, as the
        bake stage does; return its id."""
        work = self.config.root / f"bake-{uuid.uuid4().hex[:8]}"
        work.mkdir()
        layout = image_layout.Layout(self.config.build_dir / "oci", console=plain_console())
        plan = self.plan_of(tag)
        files = [("payload", payload)] if base is None else [("base", base), ("payload", payload)]
        made = {name: layers.from_files({name: (text.encode(), 0o644)}, work / f"{name}.tgz", 0)
                for name, text in files}
        labels = {"dev.sparkbake.inputs": inputs or plan.inputs,
                  "dev.sparkbake.tag": tag, RUN_LABEL: RUN}
        change = image_layout.ConfigChange(created=0, platform=plan.tag.platform,
                                        layers=tuple((m.diff_id, n) for n, m in made.items()),
                                        env=(), path="/", labels=tuple(labels.items()),
                                        entrypoint=("/payload",))
        config = layout.add_bytes(image_layout.canonical(image_layout.image_config({}, change)),
                                  image_layout.CONFIG_TYPE)
        blobs = [layout.add_file(m.path, m.digest, layers.MEDIA_TYPE) for m in made.values()]
        image = layout.add_bytes(image_layout.canonical(image_layout.manifest(config, blobs)),
                                 image_layout.MANIFEST_TYPE)
        layout.tag(tag, image)
        image_layout.write_docker_archive(layout, image, plan.tag.image_ref, work / "image.tar")
        docker_engine.load_image(self.client, work / "image.tar", error=BakeError)
        return config.digest

    def smoke(self, passed: bool = True, tag: str = TAG) -> str:
        """A smoke record, as the smoke stage writes it, of the engine's image of the tag."""
        plan = self.plan_of(tag)
        image_id = str(docker_engine.image_attrs(self.client, plan.tag.image_ref)["Id"])
        path = self.config.build_dir / "smoke" / f"{tag}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "tag": tag, "image": plan.tag.image_ref, "image_id": image_id, "inputs": plan.inputs,
            "suite": "common", "gpu": "skip", "model": None, "passed": passed,
            "checks": [{"name": "manifest", "status": "passed", "detail": "", "seconds": 0.0}],
            "time": "2026-01-01T00:00:00+00:00"}))
        return image_id

    def publish(self, registry_host: str | None = None, force: bool = False,
                tag: str = TAG, skip_smoke: bool = False) -> dict[str, Any]:
        """The release record, as --json prints it."""
        return printed(push.publish(self.client, self.config, Settings.of_process(),
                                    self.plan_of(tag), registry_host, force,
                                    skip_smoke=skip_smoke, console=plain_console()))


@pytest.fixture
def project(client: docker_engine.Client, local: Local, tmp_path: Path) -> Project:
    repository = f"127.0.0.1:{local.port}/sparkbake-test-{RUN}-{uuid.uuid4().hex[:6]}"
    config = registry_config(tmp_path, repository)
    return Project(client, config, planning.make(config, config.tag(TAG)), local.port)


def skopeo_digest(ref: str) -> str:
    out = subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"],
                         capture_output=True, text=True, check=True, timeout=120)
    return str(json.loads(out.stdout)["Digest"])


def test_start_again_is_a_no_op_and_status_says_it_runs(local: Local, tmp_path: Path) -> None:
    pid = (local.config.build_dir / "registry" / "registry.pid").read_text().split()[0]
    assert local_registry.start(local.config, plain_console(), local.port) == \
        f"registry: already running at 127.0.0.1:{local.port} (pid {pid})"
    answers, line = local_registry.status(local.config)
    assert answers and line.startswith(f"registry: running at 127.0.0.1:{local.port} (pid {pid}")


def test_another_projects_registry_is_never_reused(local: Local, tmp_path: Path) -> None:
    other = registry_config(tmp_path, "127.0.0.1:1/unused")
    pid = (local.config.build_dir / "registry" / "registry.pid").read_text().split()[0]
    with pytest.raises(EngineError) as caught:
        local_registry.start(other, plain_console(), local.port)
    assert caught.value.exit_code == 8
    assert caught.value.message == \
        f"port {local.port} of 127.0.0.1 is held by docker-registry (pid {pid})"
    assert not (other.build_dir / "registry" / "registry.pid").exists()
    assert local_registry.status(other)[0] is False
    assert local_registry.stop(other, plain_console()) is False


def test_publish_pushes_both_tags_and_records_the_verified_digest(project: Project) -> None:
    image_id = project.build("one")
    project.smoke()
    record = project.publish()
    repository = project.plan.tag.repository
    immutable = f"{TAG}-{project.plan.inputs[:12]}"
    assert record["images"] == [f"{repository}:{TAG}", f"{repository}:{immutable}"]
    assert json.loads(project.release.read_text()) == record
    assert record["image_id"] == image_id
    assert record["inputs"] == project.plan.inputs
    assert record["labels"]["dev.sparkbake.inputs"] == project.plan.inputs
    assert record["upstream"]["kind"] == "dir"
    assert record["locks"] == {}  # a dir upstream with no lock files here
    assert record["verdicts"] == {"vllm": None, "cuda_arch": "12.1a", "model": None,
                                  "listed": False, "backends": {}}
    assert skopeo_digest(f"{repository}:{TAG}") == record["digest"]
    assert skopeo_digest(f"{repository}:{immutable}") == record["digest"]
    baked = image_layout.Layout(project.config.build_dir / "oci", console=plain_console()).find(TAG)
    assert baked is not None and record["digest"] == baked.digest  # as baked, not re-made


def test_republishing_the_same_image_is_accepted(project: Project) -> None:
    project.build("same")
    project.smoke()
    first = project.publish()
    again = project.publish()
    assert again["digest"] == first["digest"]


def test_another_image_under_a_published_tag_is_refused_unless_forced(project: Project) -> None:
    project.build("first")
    project.smoke()
    first = project.publish()["digest"]
    project.build("second")
    project.smoke()  # smoked too: what stops it is the remote tag
    with pytest.raises(PublishError) as caught:
        project.publish()
    assert caught.value.exit_code == 7
    assert first in str(caught.value) and "--force" in str(caught.value)
    assert json.loads(project.release.read_text())["digest"] == first
    ref = f"{project.plan.tag.repository}:{TAG}"
    assert skopeo_digest(ref) == first
    second = project.publish(force=True)["digest"]
    assert second != first
    assert skopeo_digest(ref) == second
    assert json.loads(project.release.read_text())["digest"] == second


def test_the_cli_refuses_the_overwrite_with_exit_7(project: Project) -> None:
    project.build("cli-first")
    project.smoke()
    project.publish()
    project.build("cli-second")
    project.smoke()
    assert main(["--config", str(project.config.path), "publish", TAG]) == 7


def test_publish_to_another_registry_host(project: Project, tmp_path: Path) -> None:
    project.build("elsewhere")
    project.smoke()
    record = project.publish(registry_host=f"localhost:{project.port}")
    assert record["repository"].startswith(f"localhost:{project.port}/sparkbake-test-")
    assert skopeo_digest(f"{record['repository']}:{TAG}") == record["digest"]


def test_an_unreachable_registry_is_exit_7_without_a_record(project: Project) -> None:
    project.build("nowhere")
    project.smoke()
    port = free_port()
    with pytest.raises(PublishError) as caught:
        project.publish(registry_host=f"127.0.0.1:{port}")
    assert caught.value.exit_code == 7
    assert "does not answer" in str(caught.value)
    assert f"sparkbake registry start --port {port}" in str(caught.value)
    assert not project.release.exists()


def test_a_push_the_registry_refuses_is_exit_7_without_a_record(
        project: Project, tmp_path: Path) -> None:
    readonly = registry_config(tmp_path / "readonly", "127.0.0.1:1/unused")
    port = free_port()
    local_registry.start(readonly, plain_console(), port, readonly=True)
    try:
        project.build("read-only")
        project.smoke()
        with pytest.raises(PublishError) as caught:
            project.publish(registry_host=f"127.0.0.1:{port}")
    finally:
        assert local_registry.stop(readonly, plain_console()) is True
    assert caught.value.exit_code == 7
    assert "pushing" in str(caught.value) and "failed" in str(caught.value)
    assert not project.release.exists()


def test_a_missing_or_failed_smoke_record_is_refused(project: Project) -> None:
    project.build("unsmoked")
    with pytest.raises(PublishError, match="no smoke record") as caught:
        project.publish()
    assert f"sparkbake smoke {TAG}" in str(caught.value)
    project.smoke(passed=False)
    with pytest.raises(PublishError, match="did not pass"):
        project.publish()
    assert not project.release.exists()


def test_an_engine_image_that_is_not_the_baked_one_is_refused(project: Project) -> None:
    project.build("tested")
    project.smoke()
    layout = image_layout.Layout(project.config.build_dir / "oci", console=plain_console())
    tested = layout.find(TAG)
    project.build("other")  # the layout and the engine move on together ...
    assert tested is not None
    layout.tag(TAG, tested)  # ... then the layout alone goes back
    with pytest.raises(PublishError, match="is not the image baked into") as caught:
        project.publish()
    assert f"sparkbake build-image {TAG}" in str(caught.value)
    assert not project.release.exists()


def test_a_missing_or_stale_image_is_refused(project: Project) -> None:
    with pytest.raises(PublishError, match="not in the Docker engine") as caught:
        project.publish()
    assert f"sparkbake build-image {TAG}" in str(caught.value)
    project.build("stale", inputs="0" * 64)
    project.smoke()
    with pytest.raises(PublishError, match="stale"):
        project.publish()
    assert not project.release.exists()


def test_a_smoke_record_of_another_image_is_refused_even_with_the_same_inputs(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    smoked = project.build("smoked")
    project.smoke()
    rebuilt = project.build("rebuilt")  # the same inputs, another image: not what smoke saw
    assert rebuilt != smoked
    with pytest.raises(PublishError, match="not of the image to publish") as caught:
        project.publish()
    assert f"checked {smoked[:19]}, not {rebuilt[:19]}" in str(caught.value)
    assert main(["--config", str(project.config.path), "publish", TAG]) == 7
    assert "--skip-smoke" in capsys.readouterr().err
    assert not project.release.exists()


def test_skip_smoke_publishes_and_says_so_in_the_record_and_the_index(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    project.build("unsmoked")
    assert main(["--config", str(project.config.path), "publish", TAG, "--skip-smoke"]) == 0
    record = json.loads(project.release.read_text())
    assert record["smoke"] == {"result": "skipped", "override": "--skip-smoke",
                               "found": "missing"}
    assert skopeo_digest(f"{project.plan.tag.repository}:{TAG}") == record["digest"]
    index = json.loads((project.config.build_dir / "releases" / "index.json").read_text())
    assert [(e["tag"], e["smoke"]) for e in index["releases"]] == [(TAG, "skipped")]
    capsys.readouterr()
    assert main(["--config", str(project.config.path), "releases"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:2] == [TAG, record["digest"][:19]]
    assert "skipped" in table[1].split()


def test_the_index_lists_both_releases_and_diff_names_the_changed_patch_and_env(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    records = []
    for tag, payload in ((TAG, "first"), (NEXT, "second")):
        image_id = project.build(payload, tag=tag)
        assert project.smoke(tag=tag) == image_id
        records.append(project.publish(tag=tag))
    assert records[1]["smoke"]["result"] == "passed"
    assert records[1]["smoke"]["image_id"] == records[1]["image_id"]
    assert records[1]["env"] == {"PUB_MODE": "two", "PUB_EXTRA": "1"}
    capsys.readouterr()
    assert main(["--config", str(project.config.path), "releases", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["releases"]
    assert [(e["tag"], e["digest"], e["series"], e["smoke"]) for e in listed] == [
        (TAG, records[0]["digest"], [], "passed"), (NEXT, records[1]["digest"], ["fix"], "passed")]
    assert main(["--config", str(project.config.path), "diff", TAG, NEXT]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"diff {TAG} -> {NEXT}"
    assert "upstream: same" in out and "series: changed" in out
    assert "locks: same" in out and "verdicts: same" in out
    assert any(line.startswith("  + fix/0001-fix.patch: sha256:") for line in out)
    assert "  ~ PUB_MODE: 'one' -> 'two'" in out and "  + PUB_EXTRA: '1'" in out
