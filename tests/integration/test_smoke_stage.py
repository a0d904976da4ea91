"""The smoke stage against a real Docker engine and a small image baked here.

The image is FROM a locally imported Debian rootfs and holds what the bake stage makes:
/opt/venv with a tiny wheel (a Python package plus a gcc-built shared library standing in
for a CUDA kernel), /opt/sparkbake/manifest.json, the tag's ENV and the inputs label.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import subprocess
import sysconfig
import textwrap
import uuid
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkbake import config as config_mod
from sparkbake import docker_api, plan, smoke
from sparkbake.config import Config
from sparkbake.errors import BakeError, SmokeError

pytestmark = pytest.mark.docker

GREETING = "SPARKBAKE_DEMO_GREETING"
KERNEL = "smokekern/_kernels.so"
KERNEL_SOURCE = "int smokekern_add(int a, int b) { return a + b; }\n"
VERSIONS = """\
schema: 1
defaults:
  repository: {repository}
  platform: linux/amd64
  cuda_arch: "12.1a"
  builder: local-debian
  runtime: local-debian
bases:
  local-debian:
    debootstrap: {{suite: bookworm, packages: [python3, python3-venv]}}
upstreams:
  fixture:
    dir: ./upstream
tags:
  demo:
    upstream: fixture
    series: [demo]
    env: {{{greeting}: hello}}
"""
DOCKERFILE = """\
FROM {base}
COPY {wheel} /tmp/wheels/
RUN python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install --no-index --no-deps --no-cache-dir /tmp/wheels/*.whl \\
 && rm -rf /tmp/wheels
COPY manifest.json /opt/sparkbake/manifest.json
ENV {greeting}={value}
LABEL dev.sparkbake.inputs={inputs}
ENTRYPOINT ["/opt/venv/bin/python", "/opt/sparkbake/entrypoint.py"]
"""


@dataclass(frozen=True)
class Wheel:
    path: Path
    kernel_sha256: str


@dataclass(frozen=True)
class Project:
    config: Config
    plan: plan.Plan


@pytest.fixture(scope="module")
def client(docker_client: docker_api.Client) -> docker_api.Client:
    return docker_client


@pytest.fixture(scope="module")
def debian(debian_base: str) -> str:
    """The Debian base image the fixture's versions.yaml makes with debootstrap."""
    return debian_base


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Wheel:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def built_refs(client: docker_api.Client) -> Iterator[list[str]]:
    """Images baked by this module, removed at its end."""
    refs: list[str] = []
    yield refs
    for ref in refs:
        if docker_api.image_exists(client, ref):
            client.images.remove(ref, force=True)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """A versions.yaml with one tag `demo` and its own image repository."""
    repository = f"sparkbake-test/smoke-{uuid.uuid4().hex[:10]}"
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "README").write_text("a stand-in upstream tree\n")
    series = tmp_path / "patches" / "demo"
    series.mkdir(parents=True)
    (series / "series").write_text("0001-x.patch\n")
    (series / "0001-x.patch").write_text("--- a/README\n+++ b/README\n@@ -1 +1 @@\n-a\n+b\n")
    versions = tmp_path / "versions.yaml"
    versions.write_text(VERSIONS.format(repository=repository, greeting=GREETING))
    config = config_mod.load(versions)
    return Project(config=config, plan=plan.make(config, config.tag("demo")))


def build_wheel(folder: Path) -> Wheel:
    """smokekern 0.1.0: a package whose import loads a gcc-built shared library."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is needed to build the stand-in kernel: apt-get install -y gcc")
    source, library = folder / "kernels.c", folder / "_kernels.so"
    source.write_text(KERNEL_SOURCE)
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    platform_tag = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    files = {
        "smokekern/__init__.py": (b"import ctypes, pathlib\n"
                                  b"_lib = ctypes.CDLL(str(pathlib.Path(__file__)"
                                  b".with_name('_kernels.so')))\n"),
        KERNEL: library.read_bytes(),
        "smokekern-0.1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: smokekern\n"
                                              b"Version: 0.1.0\n",
        "smokekern-0.1.0.dist-info/WHEEL": (f"Wheel-Version: 1.0\nGenerator: test\n"
                                            f"Root-Is-Purelib: false\n"
                                            f"Tag: py3-none-{platform_tag}\n").encode(),
        "smokekern-0.1.0.dist-info/top_level.txt": b"smokekern\n",
    }
    path = folder / f"smokekern-0.1.0-py3-none-{platform_tag}.whl"
    write_wheel(path, files)
    return Wheel(path=path, kernel_sha256=hashlib.sha256(files[KERNEL]).hexdigest())


def write_wheel(path: Path, files: dict[str, bytes]) -> None:
    record = io.StringIO()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.write(f"{name},sha256={digest.decode()},{len(data)}\n")
        record.write("smokekern-0.1.0.dist-info/RECORD,,\n")
        archive.writestr(zipfile.ZipInfo("smokekern-0.1.0.dist-info/RECORD", (2020, 1, 1, 0, 0, 0)),
                         record.getvalue())


def manifest_for(project: Project, wheel: Wheel) -> dict[str, Any]:
    """The manifest the bake stage would write for the project's tag."""
    tag, the_plan = project.plan.tag, project.plan
    return {
        "schema": 1, "tag": tag.name, "image": tag.image_ref, "inputs": the_plan.inputs,
        "upstream": {"key": tag.upstream.key, **plan.upstream_pin(tag.upstream)},
        "series": [{"name": s.name, "sha256": s.sha256,
                    "patches": [{"file": f, "sha256": h} for f, h in s.patches]}
                   for s in the_plan.series],
        "cuda_arch": tag.cuda_arch, "sm_arch": tag.sm_arch, "platform": tag.platform,
        "env": dict(tag.env),
        "base": {"name": "local-debian", "image": "sparkbake-base/local-debian", "digest": ""},
        "wheels": [{"file": wheel.path.name,
                    "sha256": hashlib.sha256(wheel.path.read_bytes()).hexdigest(),
                    "name": "smokekern",
                    "kernels": [{"path": KERNEL, "sha256": wheel.kernel_sha256,
                                 "sass": ["sm_121a"]}]}],
    }


@pytest.fixture
def bake(client: docker_api.Client, debian: str, wheel: Wheel, built_refs: list[str],
         tmp_path: Path) -> Any:
    """bake(project, greeting=..., inputs=...) builds the project's image as the bake would."""

    def bake_image(project: Project, greeting: str = "hello", inputs: str | None = None) -> str:
        context = tmp_path / "context"
        context.mkdir()
        shutil.copy(wheel.path, context / wheel.path.name)
        (context / "manifest.json").write_text(json.dumps(manifest_for(project, wheel)))
        (context / "Dockerfile").write_text(textwrap.dedent(DOCKERFILE.format(
            base=debian, wheel=wheel.path.name, greeting=GREETING, value=greeting,
            inputs=inputs or project.plan.inputs)))
        ref = project.plan.tag.image_ref
        built_refs.append(ref)
        return docker_api.build_image(client, context, ref, error=BakeError)

    return bake_image


def read_results(project: Project) -> tuple[dict[str, Any], ET.Element]:
    json_path, xml_path = smoke.results_paths(project.config, project.plan)
    return json.loads(json_path.read_text()), ET.fromstring(xml_path.read_text())


def statuses(checks: list[dict[str, Any]]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in checks}


def test_a_matching_image_passes_and_writes_json_and_xml(
        client: docker_api.Client, project: Project, bake: Any) -> None:
    image_id = bake(project)
    results = smoke.run(client, project.config, project.plan)
    assert results["passed"] is True
    assert statuses(results["checks"]) == {"manifest": "passed", "env-defaults": "passed",
                                           "wheels-import": "passed", "kernels": "passed",
                                           "gpu": "skipped"}
    recorded, junit = read_results(project)
    assert recorded == results
    assert (recorded["tag"], recorded["image_id"]) == ("demo", image_id)
    assert recorded["inputs"] == project.plan.inputs
    cases = {case.get("name"): case for case in junit.iter("testcase")}
    assert list(cases) == ["manifest", "env-defaults", "wheels-import", "kernels", "gpu"]
    skipped = cases["gpu"].find("skipped")
    assert skipped is not None
    assert "no GPU runtime in this engine" in str(skipped.get("message"))
    assert junit.get("failures") == "0"


def test_an_image_whose_env_differs_fails_with_exit_6(
        client: docker_api.Client, project: Project, bake: Any) -> None:
    bake(project, greeting="goodbye")
    with pytest.raises(SmokeError) as caught:
        smoke.run(client, project.config, project.plan)
    assert caught.value.exit_code == 6
    assert "env-defaults" in caught.value.message
    recorded, junit = read_results(project)
    assert recorded["passed"] is False
    assert [n for n, s in statuses(recorded["checks"]).items() if s == "failed"] == ["env-defaults"]
    assert junit.find(".//testcase[@name='env-defaults']/failure") is not None


def test_gpu_require_without_a_gpu_fails_with_exit_6(
        client: docker_api.Client, project: Project, bake: Any) -> None:
    bake(project)
    with pytest.raises(SmokeError) as caught:
        smoke.run(client, project.config, project.plan, gpu="require")
    assert caught.value.exit_code == 6
    assert "gpu" in caught.value.message
    recorded, _ = read_results(project)
    gpu = {c["name"]: c for c in recorded["checks"]}["gpu"]
    assert gpu["status"] == "failed"
    assert "no GPU" in gpu["detail"]


def test_gpu_skip_is_reported_as_not_asked(
        client: docker_api.Client, project: Project, bake: Any) -> None:
    bake(project)
    results = smoke.run(client, project.config, project.plan, gpu="skip")
    gpu = {c["name"]: c for c in results["checks"]}["gpu"]
    assert (gpu["status"], gpu["detail"]) == ("skipped", "not asked for (--gpu skip)")


def test_a_missing_image_asks_for_build_image(
        client: docker_api.Client, project: Project) -> None:
    with pytest.raises(SmokeError) as caught:
        smoke.run(client, project.config, project.plan)
    assert caught.value.exit_code == 6
    assert "does not exist" in caught.value.message
    assert caught.value.remedy == "run `nox -s build-image -- demo`"


def test_an_image_from_other_inputs_is_refused(
        client: docker_api.Client, project: Project, bake: Any) -> None:
    bake(project, inputs="0" * 64)
    with pytest.raises(SmokeError) as caught:
        smoke.run(client, project.config, project.plan)
    assert "out of date" in caught.value.message
    assert "nox -s build-image -- demo" in caught.value.remedy
    assert not smoke.results_paths(project.config, project.plan)[0].exists()
