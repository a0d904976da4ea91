"""The whole slice on the fixture, on a real Docker engine: build once, assert many times."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbake.__main__ import main
from sparkbake.hashing import file_sha256
from sparkbake.oci import docker_engine, emulation, engine_socket, local_registry
from sparkbake.wheels import container_build
from tests import polling
from tests.conftest import Project, free_port, plain_console
from tests.startup import ONLY_WHEN_BUILDING

pytestmark = pytest.mark.docker

KERNEL_PATCH = "0001-kernel-export-the-C-ABI-version.patch"
PYTHON_PATCH = "0002-python-expose-the-ABI-version-and-the-patch-marker.patch"


def image_labels(client: docker_engine.Client, ref: str) -> dict[str, str]:
    labels: dict[str, str] = docker_engine.image_attrs(client, ref)["Config"]["Labels"]
    return labels


def read_from_image(client: docker_engine.Client, ref: str, path: str) -> bytes:
    box = client.containers.create(ref)
    try:
        chunks, _ = box.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            assert member is not None
            return member.read()
    finally:
        box.remove(force=True)


def python_in(client: docker_engine.Client, ref: str, code: str) -> str:
    out: bytes = client.containers.run(ref, ["-c", code], entrypoint="/opt/venv/bin/python",
                                       remove=True, network_disabled=True)
    return out.decode().strip()


def add_patch(project: Project, series: str, name: str, text: str) -> None:
    folder = project.root / "patches" / series
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    with (folder / "series").open("a") as listing:
        listing.write(name + "\n")


def use_series(project: Project, series: str) -> None:
    config = project.config_path
    config.write_text(config.read_text().replace("series: [tinykern]", f"series: [{series}]"))


def test_the_kernel_carries_sm_121a_sass_per_cuobjdump(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    plan = built_fixture.plan()
    manifest = json.loads(read_from_image(docker_client, plan.tag.image_ref,
                                          "/opt/sparkbake/manifest.json"))
    kernel = manifest["wheels"][0]["kernels"][0]
    library = read_from_image(docker_client, plan.tag.image_ref,
                              f"/opt/venv/lib/python3.11/site-packages/{kernel['path']}")
    scratch = built_fixture.root / "extracted"
    scratch.mkdir()
    (scratch / "kernel.so").write_bytes(library)
    builder = next(t for i in docker_client.images.list("sparkbake-builder/debian")
                   for t in i.tags)
    listing: bytes = docker_client.containers.run(
        builder, ["--list-elf", "/k/kernel.so"], entrypoint="cuobjdump", remove=True,
        volumes={str(scratch): {"bind": "/k", "mode": "ro"}})
    assert ".sm_121a.cubin" in listing.decode()
    assert kernel["sass"] == ["sm_121a"]


def test_labels_and_manifest_name_the_upstream_and_series_hashes(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    plan = built_fixture.plan()
    labels = image_labels(docker_client, plan.tag.image_ref)
    series = plan.series[0]
    assert labels["dev.sparkbake.series"] == f"tinykern@sha256:{series.sha256}"
    assert labels["dev.sparkbake.inputs"] == plan.inputs
    assert labels["dev.sparkbake.cuda-arch"] == "12.1a"
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    loaded = (built_fixture.root / "build" / "loaded-images.txt").read_text().split()
    assert docker_client.images.get(plan.tag.image_ref).id in loaded  # gc's: ours untagged
    manifest = json.loads(read_from_image(docker_client, plan.tag.image_ref,
                                          "/opt/sparkbake/manifest.json"))
    assert manifest["inputs"] == plan.inputs
    assert manifest["series"][0]["patches"] == [{"file": f, "sha256": h}
                                                for f, h in series.patches]
    assert manifest["upstream"]["tree"] in labels["dev.sparkbake.upstream"]
    wheel_file = built_fixture.root / "wheels" / plan.wheels_key / manifest["wheels"][0]["file"]
    assert manifest["wheels"][0]["sha256"] == file_sha256(wheel_file)


def test_the_patched_kernel_and_python_run_in_the_image(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    ref = built_fixture.plan().tag.image_ref
    out = python_in(docker_client, ref, "import tinykern as t, os; print(t.abi_version(), "
                    "t.patched(), t.archs(), os.environ['SPARKBAKE_NOTE'])")
    assert out == "2 tinykern-fixture ['1210'] quotes \" and $HOME stay literal"


def test_the_wheel_and_the_installed_package_say_the_local_version(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    plan = built_fixture.plan()
    assert plan.local_version == f"sb.{plan.patch_key[:8]}"  # the patch row `plan` prints
    version = f"0.1.0+{plan.local_version}"
    report = json.loads((built_fixture.root / "wheels" / plan.wheels_key / container_build.REPORT)
                        .read_text())
    assert report["wheels"][0]["file"].startswith(f"tinykern-{version}-cp311-")
    out = python_in(docker_client, plan.tag.image_ref,
                    "import importlib.metadata as m, tinykern as t, tinykern._version as v; "
                    "print(m.version('tinykern'), t.__version__, v.version_tuple)")
    assert out == f"{version} {version} (0, 1, 0, '{plan.local_version}')"


def test_the_entrypoint_runs_given_arguments_exactly(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    ref = built_fixture.plan().tag.image_ref
    out: bytes = docker_client.containers.run(ref, ["--print", "echo", "a b"], remove=True)
    assert out.decode().strip() == "echo 'a b'"


def test_a_second_build_does_no_work_and_says_so(
        built_fixture: Project, docker_client: docker_engine.Client,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = docker_client.images.get(built_fixture.plan().tag.image_ref).id
    metadata = built_fixture.root / "build" / "metadata.json"
    assert built_fixture.sparkbake("build-image", "fixture", "--json",
                                   "--metadata-file", str(metadata)) == 0
    shown = capsys.readouterr()
    lines = shown.err.splitlines()
    # one line per stage, then the summary table and the image: nothing of the tools
    assert [line.split()[:2] for line in lines[:4]] == [
        ["fetch", "cached"], ["patch", "cached"], ["wheels", "cached"], ["bake", "cached"]]
    assert lines[4].split() == ["stage", "state", "time", "key"] and len(lines) == 10
    assert lines[-1].startswith(f"image: {built_fixture.plan().tag.image_ref} = sha256:")
    result = json.loads(shown.out)
    assert [(s["name"], s["state"]) for s in result["stages"]] == [
        ("fetch", "cached"), ("patch", "cached"), ("wheels", "cached"), ("bake", "cached")]
    assert result["containerimage.digest"] == result["digest"] in lines[-1]
    assert json.loads(metadata.read_text()) == result  # buildx's --metadata-file, same facts
    assert "fetch: tinykern cached" in built_fixture.log("fixture", "fetch")
    assert "patch: fixture cached" in built_fixture.log("fixture", "patch")
    assert "wheels: fixture cached" in built_fixture.log("fixture", "wheels")
    bake = built_fixture.log("fixture", "bake")
    assert "is current" in bake and "nothing to do" in bake
    assert docker_client.images.get(built_fixture.plan().tag.image_ref).id == before


def test_a_no_op_build_starts_without_the_docker_sdk(built_fixture: Project) -> None:
    """Every stage cached and the image current in the local engine: the build asks the
    engine over its socket, and its process imports neither the Docker SDK nor requests,
    nor anything that only building needs."""
    watched = {"docker", "requests", "paramiko", *ONLY_WHEN_BUILDING}
    code = ("import sys\n"
            "from sparkbake.__main__ import main\n"
            f"code = main(['--config', {str(built_fixture.config_path)!r}, '-q', "
            "'build-image', 'fixture'])\n"
            f"print(code, sorted(set(sys.modules).intersection({sorted(watched)!r})))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.stdout.split("\n")[-2] == "0 []", done.stdout + done.stderr


def test_the_engine_socket_answers_what_the_sdk_does(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    """A no-op build asks the local engine over its socket: the same attributes as the
    SDK's, and None for an image it has not."""
    ref = built_fixture.plan().tag.image_ref
    path = engine_socket.local_socket(os.environ)
    assert path is not None, "these tests run against a local engine"
    assert engine_socket.inspect_image(path, ref) == docker_engine.image_attrs(docker_client, ref)
    assert engine_socket.inspect_image(path, f"{ref}-absent") is None


def test_wheels_json_names_the_folder_and_its_wheel_files(
        built_fixture: Project, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert built_fixture.sparkbake("wheels", "fixture", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    folder = built_fixture.root / "wheels" / built_fixture.plan().wheels_key
    assert result["wheels"] == str(folder)
    assert result["files"] == sorted(wheel.name for wheel in folder.glob("*.whl"))


def test_plan_after_a_python_only_patch_change_reruns_wheels_not_kernels(
        built_fixture: Project, project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    # share the built project's caches, then change a Python-only patch
    for cache in ("build", "wheels"):
        (project.root / cache).symlink_to(built_fixture.root / cache)
    assert project.sparkbake("plan", "fixture", "--json") == 0
    states = {s["name"]: s["state"] for s in json.loads(capsys.readouterr().out)["stages"]}
    assert states == {"fetch": "cached", "patch": "cached", "kernels": "cached",
                      "wheels": "cached", "bake": "cached", "smoke": states["smoke"],
                      "publish": states["publish"]}
    patch = project.root / "patches" / "tinykern" / PYTHON_PATCH
    patch.write_text(patch.read_text().replace('return "tinykern-fixture"',
                                               'return "tinykern-fixture-2"'))
    assert project.sparkbake("plan", "fixture", "--json") == 0
    out = capsys.readouterr().out
    states = {s["name"]: s["state"] for s in json.loads(out)["stages"]}
    assert (states["fetch"], states["patch"], states["kernels"], states["wheels"],
            states["bake"]) == ("cached", "missing", "cached", "missing", "missing")
    details = {s["name"]: s["detail"] for s in json.loads(out)["stages"]}
    changed = f"reruns: patches: tinykern/{PYTHON_PATCH} edited"
    assert details["wheels"] == details["bake"] == details["patch"] == changed
    assert "reruns" not in details["kernels"]


def test_a_python_only_change_reuses_the_compiled_kernel(
        built_fixture: Project, project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    """The wheel is assembled on this host from the kernel cache's pristine wheel and the
    series: no builder runs, so an upstream's own reuse switch (VLLM_USE_PRECOMPILED) is not
    needed, and the library's bytes are the compiled ones."""
    (project.root / "wheels").symlink_to(built_fixture.root / "wheels")  # the kernel cache
    before = built_fixture.plan()
    patch = project.root / "patches" / "tinykern" / PYTHON_PATCH
    patch.write_text(patch.read_text().replace('return "tinykern-fixture"',
                                               'return "tinykern-fixture-2"'))
    after = project.plan()
    assert after.kernel_key == before.kernel_key and after.wheels_key != before.wheels_key
    assert project.sparkbake("wheels", "fixture") == 0
    log = project.log("fixture", "wheels")
    assert "+ the series (no compiler)" in log
    assert "MAX_JOBS=" not in log and "builder" not in log  # no builder ran
    cache = json.loads((built_fixture.root / "wheels" / "kernels" / after.kernel_key /
                        "kernels.json").read_text())
    assert cache["pristine"] is True
    old = json.loads((built_fixture.root / "wheels" / before.wheels_key / container_build.REPORT)
                     .read_text())["wheels"][0]
    new = json.loads((project.root / "wheels" / after.wheels_key / container_build.REPORT)
                     .read_text())
    assert new["kernels"] == {"key": after.kernel_key, "reused": True,
                              "assembled from": cache["wheel"]}
    assert new["wheels"][0]["kernels"] == old["kernels"]
    assert new["wheels"][0]["sha256"] != old["sha256"]
    library = old["kernels"][0]["path"]
    with zipfile.ZipFile(project.root / "wheels" / after.wheels_key /
                         new["wheels"][0]["file"]) as made, \
            zipfile.ZipFile(built_fixture.root / "wheels" / before.wheels_key /
                            old["file"]) as compiled:
        assert b"tinykern-fixture-2" in made.read("tinykern/__init__.py")
        assert made.read(library) == compiled.read(library)  # byte for byte


def test_an_upstream_may_reuse_kernels_through_its_own_build(
        built_fixture: Project, project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    """kernel_reuse: builder runs the builder with VLLM_USE_PRECOMPILED, as vLLM's setup.py
    wants where its own logic is needed."""
    (project.root / "wheels").symlink_to(built_fixture.root / "wheels")
    project.config_path.write_text(project.config_path.read_text().replace(
        "dir: upstream\n", "dir: upstream\n    kernel_reuse: builder\n", 1))
    patch = project.root / "patches" / "tinykern" / PYTHON_PATCH
    patch.write_text(patch.read_text().replace('return "tinykern-fixture"',
                                               'return "tinykern-fixture-3"'))
    assert project.sparkbake("wheels", "fixture") == 0
    log = project.log("fixture", "wheels")
    assert "reusing kernels" in log
    assert "using precompiled kernels from /kernels/" in log
    assert "+ nvcc" not in log  # no compiler ran
    wheel_set = project.root / "wheels" / project.plan().wheels_key
    report = json.loads((wheel_set / container_build.REPORT).read_text())
    assert report["kernels"] == {"key": project.plan().kernel_key, "reused": True}


def test_an_out_of_memory_builder_names_the_job_count(
        project: Project, debian_base: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    add_patch(project, "hungry", "0001-hungry-build.patch", HUNGRY_BUILD)
    use_series(project, "hungry")
    monkeypatch.setenv("SPARKBAKE_BUILDER_MEMORY", "256m")
    monkeypatch.setenv("SPARKBAKE_MAX_JOBS", "4")
    assert project.sparkbake("wheels", "fixture") == 4
    err = capsys.readouterr().err
    assert "killed (exit 137: out of memory) running MAX_JOBS=4" in err
    assert "SPARKBAKE_MAX_JOBS=2" in err
    assert not (project.root / "wheels" / project.plan().wheels_key).exists()


def test_a_conflicting_patch_stops_with_exit_3_naming_the_hunk(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    add_patch(project, "broken", "0001-conflict.patch", CONFLICT)
    use_series(project, "broken")
    assert project.sparkbake("patch", "fixture") == 3
    err = capsys.readouterr().err
    assert "patch broken/0001-conflict.patch does not apply" in err
    assert "csrc/scale.cu, hunk '@@ -8,5 +8,5 @@" in err
    plan = project.plan()
    assert not (project.root / "build" / "patched" / plan.patch_key).exists()
    kept = project.root / "build" / "patched" / f"{plan.patch_key}.failed"
    assert (kept / "csrc" / "scale.cu").is_file()


def test_a_compile_error_is_exit_4_with_the_compilers_first_error_and_the_log(
        project: Project, debian_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    add_patch(project, "badcode", "0001-syntax-error.patch", SYNTAX_ERROR)
    use_series(project, "badcode")
    assert project.sparkbake("wheels", "fixture") == 4
    err = capsys.readouterr().err
    log = project.root / "build" / "logs" / "fixture" / "wheels.log"
    # the failed stage's line names its log
    stage_line = next(line for line in err.splitlines() if line.startswith("wheels "))
    assert stage_line.split()[1] == "failed" and stage_line.endswith(f"  log: {log}")
    # nvcc's words with the file and line in the patched tree, not pip's traceback's end
    # nor sccache's statistics
    assert err[err.index("sparkbake: error: "):].splitlines() == [
        "sparkbake: error: building wheels for fixture failed (exit 1); the compiler's first "
        "error:",
        '    csrc/scale.cu(10): error: identifier "undefined_symbol_from_patch" is undefined',
        "              values[i] = undefined_symbol_from_patch(values[i]) * factor;",
        "                          ^",
        f"  full log: {log}",
        "  -> fix the error above (see the log)",
    ]
    assert "undefined_symbol_from_patch" in log.read_text()
    assert not (project.root / "wheels" / project.plan().wheels_key).exists()


def test_a_kernel_without_target_sass_is_exit_4(
        project: Project, debian_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    add_patch(project, "wrongarch", "0001-wrong-arch.patch", WRONG_ARCH)
    use_series(project, "wrongarch")
    assert project.sparkbake("wheels", "fixture") == 4
    err = capsys.readouterr().err
    assert "has no SASS a sm_121a device loads (has: sm_90)" in err
    assert not (project.root / "wheels" / project.plan().wheels_key).exists()


def test_a_failing_bake_is_exit_5_naming_the_image_and_log(
        project: Project, debian_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    add_patch(project, "baddep", "0001-missing-dependency.patch", MISSING_DEPENDENCY)
    use_series(project, "baddep")
    assert project.sparkbake("build-image", "fixture") == 5
    err = capsys.readouterr().err
    log = project.root / "build" / "logs" / "fixture" / "bake.log"
    assert "building localhost:5000/sparkbake-fixture:fixture failed" in err
    assert f"(log: {log})" in err
    assert "sparkbake-missing-dependency" in log.read_text()


def test_no_engine_is_exit_8_with_how_to_start_one(
        project: Project, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    assert project.sparkbake("wheels", "fixture") == 8
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2].startswith("sparkbake: error: no Docker engine answers")
    assert "start one" in err[-1]


def test_no_binfmt_handler_is_exit_8_saying_how_to_install_one(
        project: Project, docker_client: docker_engine.Client, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(emulation, "BINFMT", tmp_path)  # a host where none is registered
    assert project.sparkbake("wheels", "fixture-multi-arm64") == 8
    err = capsys.readouterr().err
    assert f"linux/arm64 needs emulation on this linux/amd64 host, and {tmp_path}/" \
           "qemu-aarch64 is not an enabled qemu handler" in err
    assert "apt-get install qemu-user-static" in err


def test_ctrl_c_during_wheels_leaves_no_cache_entry_and_the_rerun_builds_only_wheels(
        project: Project, debian_base: str, docker_client: docker_engine.Client) -> None:
    add_patch(project, "slow", "0001-slow-build.patch", SLOW_BUILD)
    use_series(project, "slow")
    cmd = [sys.executable, "-m", "sparkbake", "--config", str(project.config_path),
           "wheels", "fixture"]
    # SIGINT as a terminal sends it; its default handler restored in the child, which a run
    # started in the background (nohup, `&`) would otherwise inherit as ignored
    process = subprocess.Popen([*cmd, "-v"], stderr=subprocess.PIPE, text=True,  # streamed
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stderr is not None
    for line in process.stderr:  # wait until the compile runs inside the builder
        if "slow fixture build" in line:
            break
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 130, rest
    assert "interrupted" in rest
    assert any(line.split()[:2] == ["wheels", "interrupted"] for line in rest.splitlines())
    plan = project.plan()
    wheel_root = project.root / "wheels"
    assert not (wheel_root / plan.wheels_key).exists()
    assert [p.name for p in wheel_root.iterdir()] == []  # no half-written temporary entry
    def builders_left() -> list[str]:
        return [box.name for box in docker_client.containers.list(all=True)
                if any(str(project.root) in m["Source"] for m in box.attrs["Mounts"])]

    polling.until(lambda: builders_left() == [], "the builder container removed", 30)
    rerun = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    shown = [line.split()[:2] for line in rerun.stderr.splitlines()[:3]]
    assert shown == [["fetch", "cached"], ["patch", "cached"], ["wheels", "ran"]]
    assert "==> wheels for fixture" in project.log("fixture", "wheels")
    report_path = wheel_root / plan.wheels_key / container_build.REPORT
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert report["wheels"][0]["kernels"][0]["sass"] == ["sm_121a"]


def test_smoke_then_publish_and_skopeo_sees_the_recorded_digest(
        built_fixture: Project, free_registry: str, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    assert built_fixture.sparkbake("smoke", "fixture", "--json") == 0
    shown = capsys.readouterr()
    smoke = json.loads((built_fixture.root / "build" / "smoke" / "fixture.json").read_text())
    assert json.loads(shown.out) == smoke  # --json: the record, on stdout
    assert smoke["passed"] is True
    assert any(line.split()[:2] == ["smoke", "ran"] for line in shown.err.splitlines())
    assert '"name": "kernels"' in built_fixture.log("fixture", "smoke")  # the checker's output
    checks = {c["name"]: c["status"] for c in smoke["checks"]}
    assert checks["kernels"] == "passed" and checks["manifest"] == "passed"
    assert checks["gpu"] == "skipped"
    assert main(["keys", "generate", str(tmp_path / "release.key")]) == 0
    assert built_fixture.sparkbake("publish", "fixture", "--registry", free_registry,
                                   "--json", "--sign-key", str(tmp_path / "release.key")) == 0
    release = json.loads((built_fixture.root / "build" / "releases" / "fixture.json").read_text())
    assert json.loads(capsys.readouterr().out) == release
    inspected = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false",
         f"docker://{free_registry}/sparkbake-fixture:fixture"],
        capture_output=True, text=True, check=True)
    assert json.loads(inspected.stdout)["Digest"] == release["digest"]
    # signed, with its SBOM and statements: anyone with the public key can check it
    assert main(["verify-release", f"{free_registry}/sparkbake-fixture:fixture", "--key",
                 str(tmp_path / "release.key.pub"), "--against",
                 str(built_fixture.config_path)]) == 0
    verified = capsys.readouterr().err
    assert "smoke: PASSED" in verified and "matches" in verified
    assert re.search(r"sbom: \d+ components \(\d+ deb, .*\d+ pypi", verified), verified


@pytest.fixture
def free_registry(built_fixture: Project,
                  docker_client: docker_engine.Client) -> Iterator[str]:
    port = free_port()
    config = built_fixture.config()
    local_registry.start(config, plain_console(), port)
    yield f"127.0.0.1:{port}"
    local_registry.stop(config, plain_console())
    for image in docker_client.images.list(f"127.0.0.1:{port}/sparkbake-fixture"):
        for ref in image.tags:
            docker_client.images.remove(ref)


CONFLICT = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] conflict: edit lines that are not there

A patch made against another version of the kernel.
---
diff --git a/csrc/scale.cu b/csrc/scale.cu
--- a/csrc/scale.cu
+++ b/csrc/scale.cu
@@ -8,5 +8,5 @@ __global__ void scale_kernel(float* values, int count, float factor) {
     int i = blockIdx.x * blockDim.x + threadIdx.x;
     if (i < count) {
-        values[i] = values[i] * factor * 2.0f;
+        values[i] = values[i] * factor * 3.0f;
     }
 }
"""

SYNTAX_ERROR = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] break the kernel

Calls a function that does not exist, so nvcc fails.
---
diff --git a/csrc/scale.cu b/csrc/scale.cu
--- a/csrc/scale.cu
+++ b/csrc/scale.cu
@@ -9,3 +9,3 @@ __global__ void scale_kernel(float* values, int count, float factor) {
     if (i < count) {
-        values[i] = values[i] * factor;
+        values[i] = undefined_symbol_from_patch(values[i]) * factor;
     }
"""

WRONG_ARCH = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] build for sm_90 whatever the arch list says

A build that ignores TORCH_CUDA_ARCH_LIST, as a misconfigured upstream would.
---
diff --git a/setup.py b/setup.py
--- a/setup.py
+++ b/setup.py
@@ -42,3 +42,3 @@ class NvccBuild(build_ext):
             return
-        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "12.1a")
+        arch_list = "9.0"
         cmd = ["nvcc", "-O2", "-shared", "-Xcompiler", "-fPIC", *gencode_flags(arch_list),
"""

MISSING_DEPENDENCY = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] depend on a package the wheelhouse lacks

The runtime install is offline, so the bake must fail and say where.
---
diff --git a/pyproject.toml b/pyproject.toml
--- a/pyproject.toml
+++ b/pyproject.toml
@@ -5,4 +5,5 @@ build-backend = "setuptools.build_meta"
 [project]
 name = "tinykern"
+dependencies = ["sparkbake-missing-dependency"]
 version = "0.1.0"
 description = "A tiny upstream with one CUDA kernel"
"""

HUNGRY_BUILD = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] a build that needs more memory than the builder has

Holds 1 GiB, as too many parallel nvcc jobs would on a Spark.
---
diff --git a/setup.py b/setup.py
--- a/setup.py
+++ b/setup.py
@@ -42,2 +42,3 @@ class NvccBuild(build_ext):
             return
+        print(len(b"x" * (1 << 30)), flush=True)
         arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "12.1a")
"""

SLOW_BUILD = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] a slow build

Sleeps before compiling, so a test can interrupt the build.
---
diff --git a/setup.py b/setup.py
--- a/setup.py
+++ b/setup.py
@@ -42,2 +42,4 @@ class NvccBuild(build_ext):
             return
+        print("slow fixture build", flush=True)
+        __import__("time").sleep(6)
         arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "12.1a")
"""
