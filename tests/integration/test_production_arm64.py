"""The Spark image's fast path, end to end on this host: production-3.73-vision-seeded of the
repository's versions.yaml (the four production series on vLLM's aarch64 release wheel) and
production-3.73-vision-vllm0.34-seeded (their 0.34.0 variants on 0.34.0's wheel), each
built for linux/arm64, smoked under qemu and published to the embedded registry.

Built once (about 15 minutes here and 30 GB of disk at the peak: a 4 GB arm64 wheelhouse
and a 10 GB image in build/oci, the engine and the registry); everything after asserts on
that one build. The second clean build that proves it bit for bit is `nox -s repro-vllm`.
Smoke's layer-weights builds DeepSeek-V4 under emulation (about 12 minutes here), and the
b12x counter-case builds it once more.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbake import planning
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.core.stages import Stage
from sparkbake.hashing import file_sha256
from sparkbake.nodes import sample_envs
from sparkbake.oci import docker_engine, emulation, local_registry
from sparkbake.pipeline import commands, stage_commands
from sparkbake.run import Run
from sparkbake.smoke import checks
from sparkbake.wheels import container_build
from tests.conftest import free_port, plain_console

pytestmark = [pytest.mark.docker, pytest.mark.required("prove-arm64")]

REPO = Path(__file__).resolve().parents[2]
# each seeded tag and the vLLM its wheel is
SEEDED = {"production-3.73-vision-seeded": "0.33.0",
          "production-3.73-vision-vllm0.34-seeded": "0.34.0"}
NEW_MODULE = "vllm/models/deepseek_v4/common/dcp_gather.py"  # added by the ckv-gather series
KERNEL = "vllm/_C_stable_libtorch.abi3.so"


@dataclasses.dataclass(frozen=True)
class Built:
    config: versions.Config  # the repository's versions.yaml with build/ and wheels/ in a tmp dir
    plan: planning.Plan

    @property
    def vllm(self) -> str:
        return SEEDED[self.plan.tag.name]

    @property
    def report(self) -> dict[str, Any]:
        folder = self.config.wheels_dir / self.plan.wheels_key
        report: dict[str, Any] = json.loads((folder / container_build.REPORT).read_text())
        return report

    @property
    def wheel(self) -> Path:
        (wheel,) = self.report["wheels"]
        return self.config.wheels_dir / self.plan.wheels_key / str(wheel["file"])

    def result(self, name: str) -> dict[str, Any]:
        record: dict[str, Any] = json.loads(
            (self.config.build_dir / name / f"{self.plan.tag.name}.json").read_text())
        return record


@pytest.fixture(scope="module", params=sorted(SEEDED))
def built(request: pytest.FixtureRequest, docker_client: docker_engine.Client,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """build-image, smoke and publish of the tag, once; the image and work removed after."""
    work = tmp_path_factory.mktemp("arm64")
    loaded = dataclasses.replace(versions.load(REPO / "versions.yaml"), work=work)
    tag = loaded.tag(request.param)
    run = Run.of(loaded, Settings.of_process(), plain_console())
    assert stage_commands.run_until(run, tag, Stage.BAKE) == 0
    assert commands.smoke_tag(run, tag, checks.Options()) == 0
    port = free_port()
    local_registry.start(loaded, plain_console(), port)
    try:
        assert commands.publish(run, tag, f"127.0.0.1:{port}", force=False) == 0
        yield Built(loaded, planning.make(loaded, tag))
    finally:
        local_registry.stop(loaded, plain_console())
        docker_client.images.remove(tag.image_ref, force=True)
        shutil.rmtree(work, ignore_errors=True)  # about 15 GB: layout, registry, wheelhouse


def test_the_image_is_arm64_and_its_containers_run_aarch64(
        built: Built, docker_client: docker_engine.Client) -> None:
    baked = json.loads((built.config.build_dir / "oci" / "index.json").read_text())
    assert baked["manifests"]
    attrs = docker_engine.image_attrs(docker_client, built.plan.tag.image_ref)
    assert (attrs["Os"], attrs["Architecture"]) == ("linux", "arm64")
    ran = docker_engine.run_container(docker_client, built.plan.tag.image_ref, ["-m"],
                                      entrypoint=["uname"], network=False)
    assert ran.output.strip() == "aarch64"


def test_the_wheel_is_the_release_wheels_kernels_and_the_patched_python(built: Built) -> None:
    report = built.report
    seed = built.plan.tag.kernels
    assert seed is not None
    assert report["kernels"] == {"key": built.plan.kernel_key, "reused": True,
                                 "seed": seed.wheel}
    assert report["nvcc"] == f"none: kernels from {seed.wheel}"  # no builder, no compiler
    release = built.config.wheels_dir / "kernels" / built.plan.kernel_key / seed.wheel
    assert file_sha256(release) == seed.sha256
    tree = built.config.build_dir / "patched" / built.plan.patch_key / "tree"
    with zipfile.ZipFile(release) as published, zipfile.ZipFile(built.wheel) as made:
        assert made.read(KERNEL) == published.read(KERNEL)
        assert made.read(NEW_MODULE) == (tree / NEW_MODULE).read_bytes()
        assert b"VLLM_DSV4_DCP_PREFIX_CACHE" in made.read("vllm/envs.py")
        assert b"VLLM_DSV4_DCP_PREFIX_CACHE" not in published.read("vllm/envs.py")


def test_the_kernels_for_a_gb10_are_sm_120_family_code(built: Built) -> None:
    sass = {k["path"]: k["sass"] for k in built.report["wheels"][0]["kernels"]}
    for library in (KERNEL, "vllm/_moe_C_stable_libtorch.abi3.so"):
        assert "sm_120" in sass[library] and "sm_121a" not in sass[library]
        assert container_build.loadable("sm_120", built.plan.tag.sm_arch)


def test_smoke_checked_the_image_under_emulation(built: Built) -> None:
    record = built.result("smoke")
    status = {check["name"]: check["status"] for check in record["checks"]}
    for name in ("labels", "manifest", "vllm-import", "patched-files", "kernels", "asked",
                 "jit-toolchain", "entrypoint-print", "vllm-serve-args", "node-roles",
                 "backend-capability", "preflight-rejects", "layer-weights"):
        assert status[name] == "passed", (name, record)
    detail = {check["name"]: check["detail"] for check in record["checks"]}
    assert built.vllm in detail["vllm-import"]
    # vLLM's b12x extra: the package's own files over flashinfer-python's shim, importable
    assert "b12x 1.5.1 (extra b12x; imports b12x)" in detail["asked"]
    # the first-use JIT: the image's nvcc (the pinned 13.0) and Triton's ptxas, for a GB10
    assert detail["jit-toolchain"].startswith("nvcc V13.0.88 and Triton's ptxas")
    assert "compile for sm_121a" in detail["jit-toolchain"]
    # the reference deployment's DCP 2 head file: refused for what either vLLM cannot run
    assert "reject/reference-dcp2.env [dcp-size-unsupported" in detail["preflight-rejects"]
    # each node where vLLM's own serve dispatch sends it: the head serves, workers headless
    assert detail["node-roles"] == (
        "vLLM's serve dispatch: accept/head.env (rank 0) -> api-server; "
        "accept/worker-1.env (rank 1) -> headless; accept/worker-2.env (rank 2) -> headless; "
        "accept/worker-3.env (rank 3) -> headless")
    # the image's vLLM, asked for a GB10, says what backend-verdicts.json says
    assert detail["backend-capability"].startswith(
        f"vLLM {built.vllm} on 12.1a for deepseek_v4: attention FLASHINFER_MLA_SPARSE_DSV4, "
        "auto; ")
    assert "reject/v3-attention.env [backend-cannot-run]" in detail["preflight-rejects"]


def test_layer_weights_built_the_model_on_the_baked_deep_gemm(built: Built) -> None:
    check = next(c for c in built.result("smoke")["checks"] if c["name"] == "layer-weights")
    assert check["detail"].startswith(
        "DeepseekV4ForConditionalGeneration, first 4 layers and the draft, at TP 1, 4: ")
    builds = {b["tp"]: {k["kind"]: k for k in b["kinds"]} for b in check["record"]["builds"]}
    assert sorted(builds) == [1, 4]
    for kinds in builds.values():
        wo_a = [k for name, k in kinds.items() if name.endswith("attn.wo_a")]
        assert wo_a and all(k["kernel"] == "DeepGemmFp8BlockScaledMMKernel" and k["checked"]
                            and not k["problems"] for k in wo_a), wo_a
        # every kind with a contract checked whole; the routed experts through b12x's
        # processing (its all-ones check of the global scales stood in), their memory counted
        assert all(k["checked"] >= k["minimum"] and not k["problems"]
                   for k in kinds.values()), kinds
        routed = [k for name, k in kinds.items() if "routed_experts" in name]
        assert routed and all(k["checked"] and k["expert_bytes"] for k in routed), routed


LAYERS_B12X = """\
import json, shlex, sys
sys.path.insert(0, sys.argv[1])
import smoke_layers
expected = json.loads(sys.argv[2])
argv = shlex.split(smoke_layers.head_command(expected))
argv[argv.index("--linear-backend") + 1] = "b12x"
record = smoke_layers.asked(expected["cuda_arch"], expected["layer_model"]["config"],
                            shlex.join(argv), [smoke_layers.tp_of(shlex.join(argv)), 1])
print("PROBLEMS " + json.dumps(smoke_layers.summary(record)[0]))
"""


def test_layer_weights_fails_naming_wo_a_with_b12x_linear(
        built: Built, docker_client: docker_engine.Client) -> None:
    """The same check, the head's command asking --linear-backend b12x: at the command's
    TP 4 and at TP 1 every attn.wo_a (target and draft) is kept 2-D where the output
    projection reads 3-D. TP 4 first: the one-rank groups are made the same under a
    layout of several nodes (vLLM's init would wait for the other nodes)."""
    tag = built.plan.tag
    suite = sample_envs.load(built.config, tag)
    attrs = docker_engine.image_attrs(docker_client, tag.image_ref)
    expected = {"cuda_arch": tag.cuda_arch,
                "entrypoint": sample_envs.expected(suite, checks.entrypoint_of(attrs)),
                "layer_model": checks.layer_model(suite, None)}
    with emulation.cpu_sysfs(docker_client, tag.platform) as volumes:
        ran = docker_engine.run_container(
            docker_client, tag.image_ref,
            ["-B", "-c", LAYERS_B12X, checks.CHECKER_DIR, json.dumps(expected)],
            entrypoint=[checks.PYTHON_IN_IMAGE], copy_in=checks.checker_files(), volumes=volumes,
            network=False)
    assert ran.exit_code == 0, ran.tail(5)
    line = next(x for x in ran.output.splitlines() if x.startswith("PROBLEMS "))
    problems: list[str] = json.loads(line.removeprefix("PROBLEMS "))
    wo_a = [p for p in problems if ".attn.wo_a " in p]
    assert len(wo_a) == 2 * (4 + 3), problems  # per TP: the 4 target layers', the 3 draft's
    shapes = {"TP 1: ": ("2-D (8192, 4096)", "3-D (8, 1024, 4096)"),
              "TP 4: ": ("2-D (2048, 4096)", "3-D (2, 1024, 4096)")}
    for tp, (kept, read) in shapes.items():
        assert sum(p.startswith(tp) and "B12x" in p and kept in p and read in p
                   for p in wo_a) == 4 + 3, wo_a


def test_the_registry_holds_the_baked_digest_for_arm64(built: Built) -> None:
    release = built.result("releases")
    baked = json.loads((built.config.build_dir / "oci" / "index.json").read_text())
    digests = {m["digest"] for m in baked["manifests"]
               if m.get("annotations", {}).get("org.opencontainers.image.ref.name")
               == built.plan.tag.name}
    assert release["digest"] in digests
    shown = subprocess.run(["skopeo", "inspect", "--tls-verify=false",
                            f"docker://{release['images'][0]}"],
                           capture_output=True, text=True, check=True, timeout=300)
    inspected = json.loads(shown.stdout)
    assert inspected["Digest"] == release["digest"]
    assert inspected["Architecture"] == "arm64"
