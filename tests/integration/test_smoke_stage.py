"""The smoke stage on the fixture image, on a real Docker engine.

The shared fixture build (`built_fixture`) is smoked as built; variants of its image, made
here FROM it with one thing planted, are smoked as a copy of the project that reuses the
fixture's fetch, patch and wheels cache entries (linked in) and names its own repository.
"""

from __future__ import annotations

import json
import shutil
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbake.errors import BakeError
from sparkbake.oci import docker_engine
from sparkbake.smoke import checks
from tests.conftest import Project, copy_project, plain_console

pytestmark = pytest.mark.docker

SITE = "/opt/venv/lib/python3.11/site-packages"
NEW_CHECKS = ("labels", "patched-files", "entrypoint-print", "preflight-rejects")


def record_of(project: Project) -> tuple[dict[str, Any], ET.Element]:
    json_path, xml_path = checks.results_paths(project.config(), project.plan())
    return json.loads(json_path.read_text()), ET.fromstring(xml_path.read_text())


def by_name(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in record["checks"]}


@pytest.fixture(scope="module")
def variant(built_fixture: Project, tmp_path_factory: pytest.TempPathFactory,
            docker_client: docker_engine.Client) -> Iterator[Project]:
    """tests/data copied with its own repository; build/sources, build/patched and wheels/
    are the fixture's (read only here). Its image ref is free for the tests to set."""
    project = copy_project(tmp_path_factory.mktemp("variant") / "project")
    repository = f"sparkbake-test/smoke-{uuid.uuid4().hex[:10]}"
    config = project.config_path
    config.write_text(config.read_text().replace("localhost:5000/sparkbake-fixture", repository))
    (project.root / "build").mkdir()
    for cached in ("build/sources", "build/patched", "wheels"):
        (project.root / cached).symlink_to(built_fixture.root / cached)
    yield project
    for image in docker_client.images.list(repository):
        docker_client.images.remove(image.id, force=True)


def fixture_image_id(built_fixture: Project, client: docker_engine.Client) -> str:
    return str(client.images.get(built_fixture.plan().tag.image_ref).id)


def make_variant(client: docker_engine.Client, project: Project, base_id: str,
                 *instructions: str) -> str:
    """The fixture's image with instructions applied, under the variant's image ref."""
    context = project.root / "build" / f"context-{uuid.uuid4().hex[:8]}"
    context.mkdir()
    (context / "Dockerfile").write_text("\n".join([f"FROM {base_id}", *instructions]) + "\n")
    try:
        return docker_engine.build_image(client, plain_console(), context,
                                         project.plan().tag.image_ref,
                                         error=BakeError)
    finally:
        shutil.rmtree(context)


def test_the_fixture_passes_the_new_checks_against_its_image_id(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    assert built_fixture.sparkbake("smoke", "fixture") == 0
    record, junit = record_of(built_fixture)
    assert record["image_id"] == fixture_image_id(built_fixture, docker_client)
    assert (record["passed"], record["suite"], record["gpu"]) == (True, "common", "auto")
    checks = by_name(record)
    assert {name: checks[name]["status"] for name in NEW_CHECKS} == dict.fromkeys(
        NEW_CHECKS, "passed")
    assert checks["patched-files"]["detail"].startswith(
        "1 patched Python file(s) as in the patched tree: tinykern/__init__.py")
    assert "accept/single-node.env" in checks["entrypoint-print"]["detail"]
    assert "reject/no-model.env [model-unset]" in checks["preflight-rejects"]["detail"]
    for name in ("gpu", "gpu-capability", "gpu-op"):
        assert checks[name]["status"] == "skipped"
        assert checks[name]["detail"] == "no GPU visible: no GPU runtime in this engine"
    serve = [c for c in record["checks"] if c["name"].startswith("serve-")]
    assert [c["name"] for c in serve] == ["serve-health", "serve-models", "serve-completion",
                                          "serve-metrics"]
    assert {(c["status"], c["detail"]) for c in serve} == {("skipped", "no --model given")}
    properties = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert properties["image_id"] == record["image_id"]
    assert [case.get("name") for case in junit.iter("testcase")] == \
        [c["name"] for c in record["checks"]]


def test_a_rebuilt_image_gets_its_own_record_and_a_planted_file_fails_by_name(
        built_fixture: Project, variant: Project, docker_client: docker_engine.Client,
        capsys: pytest.CaptureFixture[str]) -> None:
    original = fixture_image_id(built_fixture, docker_client)
    docker_client.images.get(original).tag(variant.plan().tag.image_ref)
    assert variant.sparkbake("smoke", "fixture") == 0
    assert record_of(variant)[0]["image_id"] == original
    planted = make_variant(docker_client, variant, original,
                           f"RUN echo '# planted' >> {SITE}/tinykern/__init__.py")
    assert planted != original
    assert variant.sparkbake("smoke", "fixture") == 6
    err = capsys.readouterr().err
    assert "smoke: removing fixture.json, the record of image " + original[:19] in err
    assert "smoke checks failed for sparkbake-test/smoke-" in err
    record, junit = record_of(variant)
    assert (record["image_id"], record["passed"]) == (planted, False)
    checks = by_name(record)
    assert [name for name, c in checks.items() if c["status"] == "failed"] == ["patched-files"]
    detail = checks["patched-files"]["detail"]
    assert detail.startswith("tinykern/__init__.py: installed sha256 ")
    assert "differs from the patched tree's" in detail
    assert detail.endswith("(tinykern/0002-python-expose-the-ABI-version-and-the-patch-"
                           "marker.patch)")
    assert junit.find(".//testcase[@name='patched-files']/failure") is not None


def test_a_label_other_than_the_plans_fails_naming_it(
        built_fixture: Project, variant: Project, docker_client: docker_engine.Client) -> None:
    make_variant(docker_client, variant, fixture_image_id(built_fixture, docker_client),
                 "LABEL org.opencontainers.image.revision=somewhere-else")
    assert variant.sparkbake("smoke", "fixture") == 6
    checks = by_name(record_of(variant)[0])
    assert [name for name, c in checks.items() if c["status"] == "failed"] == ["labels"]
    assert checks["labels"]["detail"].startswith(
        "org.opencontainers.image.revision: image has 'somewhere-else', the plan says '")


def test_an_entrypoint_that_adds_arguments_fails_both_entrypoint_checks(
        built_fixture: Project, variant: Project, docker_client: docker_engine.Client) -> None:
    make_variant(docker_client, variant, fixture_image_id(built_fixture, docker_client),
                 'ENTRYPOINT ["/opt/venv/bin/python", "/opt/sparkbake/entrypoint.py", '
                 '"--print", "vllm", "serve", "/model"]')
    assert variant.sparkbake("smoke", "fixture") == 6
    checks = by_name(record_of(variant)[0])
    assert checks["entrypoint-print"]["detail"].startswith(
        "accept/single-node.env: word 4 is '--print', the host's command has "
        "'--served-model-name'")
    assert checks["preflight-rejects"]["detail"].startswith(
        "reject/compressed-mla.env: exit 0, expected 2 (the preflight did not refuse it)")


def test_gpu_require_and_a_model_without_a_gpu_fail_with_exit_6(
        built_fixture: Project, variant: Project, docker_client: docker_engine.Client,
        tmp_path: Path) -> None:
    docker_client.images.get(fixture_image_id(built_fixture, docker_client)).tag(
        variant.plan().tag.image_ref)
    assert variant.sparkbake("smoke", "fixture", "--gpu", "require",
                             "--model", str(tmp_path)) == 6
    record = record_of(variant)[0]
    assert (record["gpu"], record["model"]) == ("require", str(tmp_path))
    failed = {c["name"]: c["detail"] for c in record["checks"] if c["status"] == "failed"}
    assert set(failed) == {"gpu", "gpu-capability", "gpu-op", "serve-health", "serve-models",
                           "serve-completion", "serve-metrics"}
    assert failed["serve-health"] == "vllm serve needs a GPU: no GPU runtime in this engine"
    assert failed["gpu"] == "no GPU visible: no GPU runtime in this engine (--gpu require)"


def test_a_model_that_is_not_there_is_a_usage_error(variant: Project,
                                                    tmp_path: Path) -> None:
    assert variant.sparkbake("smoke", "fixture", "--model", str(tmp_path / "none")) == 2


def test_a_missing_image_asks_for_build_image(
        docker_client: docker_engine.Client, project: Project,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = project.config_path
    config.write_text(config.read_text().replace(
        "localhost:5000/sparkbake-fixture", f"sparkbake-test/absent-{uuid.uuid4().hex[:10]}"))
    assert project.sparkbake("smoke", "fixture") == 6
    err = capsys.readouterr().err
    # the remedy repeats the user's own command line, with its --config
    assert (":fixture does not exist in the Docker engine\n  -> run `sparkbake --config "
            f"{config} build-image fixture`") in err
    assert "patch:" not in err  # refused before any stage's cache is looked at
    assert not checks.results_paths(project.config(), project.plan())[0].exists()


def test_an_image_from_other_inputs_is_refused(
        built_fixture: Project, variant: Project, docker_client: docker_engine.Client,
        capsys: pytest.CaptureFixture[str]) -> None:
    make_variant(docker_client, variant, fixture_image_id(built_fixture, docker_client),
                 f"LABEL dev.sparkbake.inputs={'0' * 64}")
    assert variant.sparkbake("smoke", "fixture") == 6
    err = capsys.readouterr().err
    assert "is out of date: its dev.sparkbake.inputs is 0000000000000000..." in err
    assert f"run `sparkbake --config {variant.config_path} build-image fixture`" in err
