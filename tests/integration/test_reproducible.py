"""Two clean builds, one digest: the fixture tag built again under another path at another
time gives the same wheels and the same image, as skopeo and umoci read it; publish pushes
that digest; verify says so, and names the file when a build is not reproducible.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbake.hashing import file_sha256
from sparkbake.oci import docker_engine, image_layout, local_registry
from sparkbake.wheels import container_build
from tests.conftest import Project, copy_project, cp_project, free_port, missing, plain_console
from tests.integration.test_pipeline import PYTHON_PATCH

pytestmark = pytest.mark.docker

SOURCE_DATE = 1735689600  # tests/data/versions.yaml: the tinykern upstream's source_date_epoch
STAMP_PATCH = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] stamp the build time into the package

A planted non-determinism: every build writes another tinykern/_stamp.py.
---
diff --git a/setup.py b/setup.py
--- a/setup.py
+++ b/setup.py
@@ -14,2 +14,4 @@ from pathlib import Path
 from setuptools import Extension, setup
+# the build time, in the package: what verify must find
+Path("tinykern/_stamp.py").write_text(f"BUILT = {__import__('time').time_ns()}\\n")
 from setuptools.command.build_ext import build_ext
"""


def layout(project: Project) -> Path:
    return project.root / "build" / "oci"


def skopeo(*args: str) -> Any:
    if shutil.which("skopeo") is None:
        missing("skopeo (apt-get install -y skopeo)")
    out = subprocess.run(["skopeo", *args], capture_output=True, text=True, check=True,
                         timeout=300)
    return json.loads(out.stdout)


def wheel_report(project: Project) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        (project.root / "wheels" / project.plan().wheels_key / container_build.REPORT).read_text())
    return report


@pytest.fixture(scope="module")
def second(built_fixture: Project, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The fixture tag built again from clean (own build/ and wheels/), in another folder and
    at a later time than built_fixture."""
    time.sleep(2)  # past zip's two-second time resolution, at least
    project = copy_project(tmp_path_factory.mktemp("again") / "another" / "place")
    assert project.sparkbake("build-image", "fixture") == 0
    return project


def test_two_clean_builds_give_the_same_wheels(built_fixture: Project, second: Project) -> None:
    assert built_fixture.root != second.root
    first, again = wheel_report(built_fixture), wheel_report(second)
    assert [w["sha256"] for w in first["wheels"]] == [w["sha256"] for w in again["wheels"]]
    for project, report in ((built_fixture, first), (second, again)):
        path = project.root / "wheels" / project.plan().wheels_key / report["wheels"][0]["file"]
        assert file_sha256(path) == report["wheels"][0]["sha256"]


def test_two_clean_builds_give_one_digest_as_skopeo_reads_it(
        built_fixture: Project, second: Project, docker_client: docker_engine.Client) -> None:
    first = skopeo("inspect", f"oci:{layout(built_fixture)}:fixture")
    again = skopeo("inspect", f"oci:{layout(second)}:fixture")
    assert first["Digest"] == again["Digest"]
    assert first["Digest"].startswith("sha256:")
    raw = skopeo("inspect", "--raw", f"oci:{layout(second)}:fixture")
    image_id = docker_client.images.get(second.plan().tag.image_ref).id
    assert raw["config"]["digest"] == image_id  # the engine runs exactly this config


def test_two_clean_builds_give_one_sbom(built_fixture: Project, second: Project) -> None:
    """The bake's SBOM beside each image (build/oci, `fixture.sbom`): the same bytes."""
    found = [image_layout.Layout(layout(p), plain_console()).find("fixture.sbom")
             for p in (built_fixture, second)]
    assert found[0] is not None and found[0] == found[1]
    store = image_layout.Layout(layout(second), console=plain_console())
    blob = store.read_json(found[0].digest)["layers"][0]
    assert blob["mediaType"] == "application/vnd.cyclonedx+json"
    document = json.loads(store.read(blob["digest"]))
    assert any(c["bom-ref"].startswith("deb:") for c in document["components"])
    assert any(c["bom-ref"].startswith("pypi:") for c in document["components"])


def test_the_config_and_labels_carry_the_source_date_not_the_build_time(
        second: Project) -> None:
    config = skopeo("inspect", "--config", f"oci:{layout(second)}:fixture")
    assert config["created"] == "2025-01-01T00:00:00Z"
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.created"] == "2025-01-01T00:00:00Z"
    assert labels["dev.sparkbake.inputs"] == second.plan().inputs
    assert [h["created"] for h in config["history"][-4:]] == ["2025-01-01T00:00:00Z"] * 4
    assert config["config"]["Entrypoint"] == ["/opt/venv/bin/python",
                                              "/opt/sparkbake/entrypoint.py"]


def test_the_layers_made_here_are_sorted_dated_root_owned_with_hash_checked_pycs(
        second: Project) -> None:
    store = image_layout.Layout(layout(second), console=plain_console())
    found = store.find("fixture")
    assert found is not None
    manifest = store.read_json(found.digest)
    pycs = 0
    for blob in manifest["layers"][-4:]:  # /opt/venv's three and /opt/sparkbake
        with tarfile.open(store.blob(blob["digest"])) as tar:
            members = tar.getmembers()
            names = [m.name for m in members]
            assert names == sorted(names, key=lambda name: name.split("/"))
            assert {(m.mtime, m.uid, m.gid) for m in members} == {(SOURCE_DATE, 0, 0)}
            for pyc in (m for m in members if m.name.endswith(".pyc")):
                head = tar.extractfile(pyc).read(8)  # type: ignore[union-attr]
                assert int.from_bytes(head[4:8], "little") == 3, pyc.name  # hash-checked
                pycs += 1
        header = store.blob(blob["digest"]).read_bytes()[:8]
        assert header[4:8] == b"\0\0\0\0"  # no time in the gzip header either
    assert pycs > 100  # pip's and tinykern's bytecode is there, all of it hash-checked


def test_umoci_unpacks_the_image_as_the_engine_runs_it(
        second: Project, docker_client: docker_engine.Client, tmp_path: Path) -> None:
    if shutil.which("umoci") is None:
        missing("umoci (apt-get install -y umoci)")
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout(second)}:fixture", str(bundle)],
                   check=True, capture_output=True, timeout=600)
    rootfs = bundle / "rootfs"
    recorded = json.loads((rootfs / "opt/sparkbake/manifest.json").read_text())
    assert recorded["inputs"] == second.plan().inputs
    assert recorded["source_date_epoch"] == SOURCE_DATE
    assert os.readlink(rootfs / "opt/venv/bin/python").endswith("python3")
    assert (rootfs / "opt/sparkbake/manifest.json").stat().st_mtime == SOURCE_DATE
    config = json.loads((bundle / "config.json").read_text())
    assert config["process"]["args"][:2] == ["/opt/venv/bin/python",
                                             "/opt/sparkbake/entrypoint.py"]
    assert "TINYKERN_MODE=fixture" in config["process"]["env"]


@pytest.fixture(scope="module")
def published(second: Project) -> Iterator[str]:
    """second's image smoke-tested and published to a registry of its own; yields the
    registry's HOST:PORT while it runs."""
    port = free_port()
    local_registry.start(second.config(), plain_console(), port)
    assert second.sparkbake("smoke", "fixture") == 0
    assert second.sparkbake("publish", "fixture", "--registry", f"127.0.0.1:{port}") == 0
    yield f"127.0.0.1:{port}"
    local_registry.stop(second.config(), console=plain_console())


def test_publish_pushes_the_digest_the_bake_wrote(second: Project, published: str) -> None:
    release = json.loads((second.root / "build" / "releases" / "fixture.json").read_text())
    baked = skopeo("inspect", f"oci:{layout(second)}:fixture")["Digest"]
    pushed = skopeo("inspect", "--tls-verify=false",
                    f"docker://{published}/sparkbake-fixture:fixture")["Digest"]
    assert release["digest"] == baked == pushed
    assert release["repository"] == f"{published}/sparkbake-fixture"
    assert release["build"]["jobs"]["MAX_JOBS"] >= 1  # how it was built: here, not in the image


def test_verify_against_the_published_digest_rebuilds_and_finds_it_again(
        second: Project, published: str, capsys: pytest.CaptureFixture[str]) -> None:
    release = json.loads((second.root / "build" / "releases" / "fixture.json").read_text())
    digest = release["digest"]
    store = image_layout.Layout(layout(second), console=plain_console())
    top = store.read_json(digest)["layers"][-1]["digest"]
    for blob in (digest, top):  # so verify must take them from the registry
        store.blob(blob).unlink()
    capsys.readouterr()
    assert second.sparkbake("verify", "fixture", "--against", digest) == 0
    err = capsys.readouterr().err
    assert f"a clean rebuild gives {digest}, bit for bit" in err
    stages = [line.split()[:2] for line in err.splitlines()]
    assert ["wheels", "ran"] in stages and ["bake", "ran"] in stages  # rebuilt, not cached
    assert store.has(digest) and store.has(top)  # pulled back, checked by digest
    report = json.loads((second.root / "build" / "verify" / "fixture.json").read_text())
    assert report["equal"] is True and report["rebuilt"] == report["original"] == digest
    assert [p.name for p in (second.root / "build" / "verify").iterdir()] == ["fixture.json"]


def test_a_wheel_around_reused_kernels_is_the_wheel_a_clean_build_makes(
        built_fixture: Project, tmp_path: Path) -> None:
    """The kernel reuse path (a Python-only patch change) gives the bytes a full compile
    gives: the reused library is the one a compile makes, and the rest is the same tree."""
    reusing, compiling = (copy_project(tmp_path / name) for name in ("reusing", "compiling"))
    for project in (reusing, compiling):
        patch = project.root / "patches" / "tinykern" / PYTHON_PATCH
        patch.write_text(patch.read_text().replace('return "tinykern-fixture"',
                                                   'return "tinykern-fixture-2"'))
    shutil.copytree(built_fixture.root / "wheels" / "kernels", reusing.root / "wheels" / "kernels")
    for project in (reusing, compiling):
        assert project.sparkbake("wheels", "fixture") == 0
    reused, compiled = wheel_report(reusing), wheel_report(compiling)
    assert (reused["kernels"]["reused"], compiled["kernels"]["reused"]) == (True, False)
    assert [w["sha256"] for w in reused["wheels"]] == [w["sha256"] for w in compiled["wheels"]]


@pytest.fixture
def planted(project: Project, docker_client: docker_engine.Client) -> Iterator[Project]:
    """The fixture with a patch that writes the build time into the package, under its own
    repository (the shared fixture image stays)."""
    folder = project.root / "patches" / "stamp"
    folder.mkdir()
    (folder / "0001-stamp.patch").write_text(STAMP_PATCH)
    (folder / "series").write_text("0001-stamp.patch\n")
    config = project.config_path.read_text()
    config = config.replace("series: [tinykern]", "series: [tinykern, stamp]")
    config = config.replace("sparkbake-fixture", "sparkbake-planted")
    project.config_path.write_text(config)
    yield project
    for image in docker_client.images.list("localhost:5000/sparkbake-planted"):
        for ref in image.tags:
            docker_client.images.remove(ref)


@pytest.mark.required("repro-builds")
def test_verify_finds_and_names_a_planted_non_determinism(
        planted: Project, capsys: pytest.CaptureFixture[str]) -> None:
    assert planted.sparkbake("build-image", "fixture") == 0
    capsys.readouterr()
    assert planted.sparkbake("verify", "fixture") == 9
    err = capsys.readouterr().err
    error = err[err.index("sparkbake: error:"):].splitlines()
    assert len(error) == 2
    assert "fixture rebuilt as sha256:" in error[0]
    assert "tinykern/_stamp.py" in error[0]  # located: the file that differs
    assert "(sparkbake: /opt/venv: tinykern Python (patched tree" in error[0]  # its layer
    assert "docs/explanation/reproducibility.md" in error[1]
    report = json.loads((planted.root / "build" / "verify" / "fixture.json").read_text())
    assert report["equal"] is False
    venv = next(layer for layer in report["layers"] if "tinykern Python" in layer["made_by"])
    stamp = next(f for f in venv["files"] if f["path"].endswith("tinykern/_stamp.py"))
    for side in ("original", "rebuilt"):  # sizes and hashes of both, to diff them by hand
        assert stamp[side]["size"] == len("BUILT = 1234567890123456789\n")
        assert re.fullmatch(r"[0-9a-f]{64}", stamp[side]["sha256"])
        assert (stamp[side]["mtime"], stamp[side]["owner"]) == (SOURCE_DATE, "0:0")
    assert stamp["original"]["sha256"] != stamp["rebuilt"]["sha256"]
    files = next(layer for layer in report["layers"] if layer["made_by"].endswith("sparkbake"))
    assert [f["path"] for f in files["files"]] == ["opt/sparkbake/manifest.json"]


@pytest.mark.required("repro-builds")
def test_two_cp_copies_of_a_project_made_apart_build_one_digest(
        debian_base: str, tmp_path: Path) -> None:
    """A project outside git, its upstream with no declared date, copied twice by `cp -r`
    (the second copy's files dated later) and built in each copy."""
    digests = []
    for name, later in (("first", None), ("second", 1_790_000_000)):
        project = Project(cp_project(tmp_path / name, later).parent)
        assert project.sparkbake("build-image", "fixture") == 0
        digests.append(skopeo("inspect", f"oci:{layout(project)}:fixture")["Digest"])
    assert digests[0] == digests[1]
