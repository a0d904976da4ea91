"""images/smoke_check.py run on the host, in a subprocess, against a fake image root.

The fake root has what a baked image has: /opt/sparkbake/manifest.json and a venv
site-packages with an installed distribution whose kernel is a real shared library
compiled with gcc (standing in for CUDA code: its `GPU` functions run on the CPU). The
image's entrypoint is images/entrypoint.py, run with this Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkbake.nodes import preflight

REPO = Path(__file__).parents[2]
CHECKER = REPO / "images" / "smoke_check.py"
ENTRYPOINT = [sys.executable, str(REPO / "images" / "entrypoint.py")]
TINYKERN_INIT = REPO / "tests" / "data" / "upstream" / "tinykern" / "__init__.py"
SITE = Path("opt/venv/lib/python3.11/site-packages")
GREETING = "SPARKBAKE_SMOKE_GREETING"
SERIES_SHA = "ab" * 32
KERNEL_SOURCE = """
#ifndef STATUS
#define STATUS 0
#endif
int smokekern_add(int a, int b) { return a + b; }
int sparkbake_device_count(void) { return DEVICES; }
#if CAPABILITY
int sparkbake_device_capability(int device) { return device == 0 ? CAPABILITY : -100; }
#endif
const char* tinykern_archs(void) { return "1210"; }
int tinykern_scale(float* values, int count, float factor) {
    if (STATUS) return STATUS;
    for (int i = 0; i < count; i++) values[i] = values[i] * factor + OFFSET;
    return 0;
}
const char* tinykern_error_name(int status) {
    return status == 209 ? "cudaErrorNoKernelImageForDevice" : "unknown";
}
const char* tinykern_error_string(int status) {
    return status == 209 ? "no kernel image is available for execution on the device" : "";
}
"""
SMOKEKERN_INIT = """\
import ctypes, pathlib
lib = ctypes.CDLL(str(pathlib.Path(__file__).with_name('_kernels.so')))
assert lib.smokekern_add(2, 3) == 5
"""
HEAD_ADDRESS_ON_WORKER = {"MODEL": "/model", "NNODES": "2", "TP_SIZE": "2", "NODE_RANK": "1",
                          "MASTER_ADDR": "10.0.0.1", "VLLM_HOST_IP": "10.0.0.1",
                          "GPU_MEMORY_UTILIZATION": "0.9"}


@dataclass
class FakeImage:
    root: Path
    manifest: dict[str, Any]
    expected: dict[str, Any]

    @property
    def manifest_path(self) -> Path:
        return self.root / "opt/sparkbake/manifest.json"

    def write_manifest(self) -> None:
        self.manifest_path.parent.mkdir(parents=True, exist_ok=True)
        self.manifest_path.write_text(json.dumps(self.manifest))

    def check(self, env: dict[str, str] | None = None, gpu: str = "skip") -> dict[str, Any]:
        """Run the checker; return {check name: check}."""
        self.write_manifest()
        self.expected["gpu"] = {"mode": gpu, "unavailable": None}
        expected_file = self.root / "expected.json"
        expected_file.write_text(json.dumps(self.expected))
        environment = {k: v for k, v in os.environ.items() if k != GREETING}
        environment.update({GREETING: "hello"} if env is None else env)
        environment["SPARKBAKE_MANIFEST"] = str(self.manifest_path)  # for the entrypoint
        done = subprocess.run(
            [sys.executable, "-B", str(CHECKER), "--root", str(self.root), str(expected_file)],
            capture_output=True, text=True, env=environment, check=False, timeout=120,
        )
        last_line = done.stdout.strip().splitlines()[-1]
        checks = {c["name"]: c for c in json.loads(last_line)["checks"]}
        failed = any(c["status"] == "failed" for c in checks.values())
        assert done.returncode == (1 if failed else 0), done.stderr
        return checks

    def site(self, relative: str) -> Path:
        return self.root / SITE / relative


def compile_kernel(target: Path, devices: int, capability: int, offset: str,
                   status: int = 0) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is needed to build the stand-in kernel: apt-get install -y gcc")
    source = target.with_suffix(".c")
    source.write_text(KERNEL_SOURCE)
    subprocess.run([gcc, "-shared", "-fPIC", f"-DDEVICES={devices}",
                    f"-DCAPABILITY={capability}", f"-DOFFSET={offset}", f"-DSTATUS={status}",
                    "-o", str(target),
                    str(source)], check=True)
    source.unlink()


def install_distribution(site: Path, name: str, init: str, version: str = "0.1.0") -> Path:
    """A distribution as pip would leave it, with the package's __init__.py."""
    package = site / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(init)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{name}\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n")
    return package


def entrypoint_samples() -> dict[str, Any]:
    accept_env = {"MODEL": "/model", "API_PORT": "8000", "SERVE_EXTRA_ARGS": "--seed 'a b'"}
    command = preflight.entrypoint().serve_command(accept_env)
    return {"suite": "test", "argv": ENTRYPOINT,
            "accept": [{"name": "accept/one.env", "env": accept_env,
                        "command": shlex.join(command)}],
            "reject": [{"name": "reject/worker.env", "env": HEAD_ADDRESS_ON_WORKER,
                        "rules": ["worker-has-head-address"]},
                       {"name": "reject/no-model.env", "env": {"MODEL": ""},
                        "rules": ["model-unset"]}]}


def make_fake_image(root: Path, devices: int = 0, capability: int = 0,
                    package: str = "smokekern", offset: str = "0.0f",
                    status: int = 0) -> FakeImage:
    init = TINYKERN_INIT.read_text() if package == "tinykern" else SMOKEKERN_INIT
    folder = install_distribution(root / SITE, package, init)
    if package == "tinykern":  # its __init__ imports the version module the build writes
        shutil.copy(TINYKERN_INIT.with_name("_version.py"), folder / "_version.py")
    compile_kernel(folder / "_kernels.so", devices, capability, offset, status)
    kernel_sha = hashlib.sha256((folder / "_kernels.so").read_bytes()).hexdigest()
    upstream = {"kind": "dir", "path": "upstream", "tree": "cd" * 32}
    series = [{"name": "demo", "sha256": SERIES_SHA}]
    init_sha = hashlib.sha256((folder / "__init__.py").read_bytes()).hexdigest()
    expected = {"tag": "demo", "inputs": "ef" * 32, "upstream": upstream, "series": series,
                "cuda_arch": "12.1a", "sm_arch": "sm_121a", "env": {GREETING: "hello"},
                "patched_files": {"files": [{"path": f"{package}/__init__.py",
                                             "tree": f"{package}/__init__.py",
                                             "patch": "demo/0001-x.patch", "sha256": init_sha}],
                                  "not_installed": ["setup.py"]},
                "entrypoint": entrypoint_samples()}
    manifest = {
        **{k: v for k, v in expected.items()
           if k not in ("series", "patched_files", "entrypoint")},
        "schema": 1, "image": "localhost:5000/sparkbake-demo:demo", "platform": "linux/amd64",
        "series": [{**series[0], "patches": [{"file": "0001-x.patch", "sha256": "01" * 32}]}],
        "wheels": [{"file": f"{package}-0.1.0-cp311-cp311-linux_x86_64.whl",
                    "sha256": "02" * 32, "name": package,
                    "kernels": [{"path": f"{package}/_kernels.so", "sha256": kernel_sha,
                                 "sass": ["sm_121a"]}]}],
    }
    return FakeImage(root=root, manifest=manifest, expected=expected)


@pytest.fixture
def image(tmp_path: Path) -> FakeImage:
    return make_fake_image(tmp_path / "root")


def statuses(checks: dict[str, Any]) -> dict[str, str]:
    return {name: check["status"] for name, check in checks.items()}


def test_a_matching_image_passes(image: FakeImage) -> None:
    checks = image.check()
    assert statuses(checks) == {
        "manifest": "passed", "env-defaults": "passed", "wheels-import": "passed",
        "vllm-import": "skipped", "patched-files": "passed", "kernels": "passed",
        "asked": "skipped", "jit-toolchain": "skipped", "entrypoint-print": "passed",
        "vllm-serve-args": "skipped", "node-roles": "skipped", "backend-capability": "skipped",
        "preflight-rejects": "passed", "layer-weights": "skipped", "kv-plan": "skipped",
        "gpu": "skipped",
        "gpu-capability": "skipped", "gpu-op": "skipped"}
    assert "smokekern 0.1.0" in checks["wheels-import"]["detail"]
    assert checks["patched-files"]["detail"] == (
        "1 patched Python file(s) as in the patched tree: smokekern/__init__.py; "
        "not installed by any wheel: setup.py")
    assert checks["entrypoint-print"]["detail"] == \
        "1 sample(s) of suite test print the host's command: accept/one.env"
    assert checks["preflight-rejects"]["detail"] == (
        "2 sample(s) refused with exit 2: reject/worker.env [worker-has-head-address]; "
        "reject/no-model.env [model-unset]")
    assert checks["vllm-import"]["detail"].startswith("the upstream is a dir pin, not vllm")
    assert all(isinstance(c["seconds"], float) for c in checks.values())


def test_manifest_mismatch_is_detected(image: FakeImage) -> None:
    image.manifest["inputs"] = "00" * 32
    image.manifest["series"][0]["sha256"] = "11" * 32
    checks = image.check()
    assert checks["manifest"]["status"] == "failed"
    assert "inputs: image has" in checks["manifest"]["detail"]
    assert "series: image has" in checks["manifest"]["detail"]
    assert checks["kernels"]["status"] == "passed"


def test_upstream_may_carry_more_than_the_pin(image: FakeImage) -> None:
    image.manifest["upstream"] = {"key": "fixture", **image.expected["upstream"]}
    assert image.check()["manifest"]["status"] == "passed"
    image.manifest["upstream"]["tree"] = "00" * 32
    checks = image.check()
    assert checks["manifest"]["status"] == "failed"
    assert checks["manifest"]["detail"].startswith("upstream: image has")


def test_missing_manifest_fails_the_checks_that_need_it(image: FakeImage) -> None:
    image.check()
    image.manifest_path.unlink()
    image.write_manifest = lambda: None  # type: ignore[method-assign]
    checks = image.check()
    assert statuses(checks)["manifest"] == "failed"
    assert "does not exist" in checks["manifest"]["detail"]
    assert checks["wheels-import"]["status"] == "failed"
    assert checks["vllm-import"]["status"] == "failed"
    assert checks["env-defaults"]["status"] == "passed"


def test_env_mismatch_is_detected(image: FakeImage) -> None:
    checks = image.check(env={GREETING: "goodbye"})
    assert checks["env-defaults"]["status"] == "failed"
    assert f"{GREETING}='goodbye', expected 'hello'" in checks["env-defaults"]["detail"]
    assert image.check(env={})["env-defaults"]["detail"] == f"{GREETING} is unset, expected 'hello'"


def test_kernel_sha_mismatch_is_detected(image: FakeImage) -> None:
    image.manifest["wheels"][0]["kernels"][0]["sha256"] = "99" * 32
    checks = image.check()
    assert checks["kernels"]["status"] == "failed"
    assert "differs from the manifest's 999999999999" in checks["kernels"]["detail"]


def test_kernel_without_a_recorded_sha_is_detected(image: FakeImage) -> None:
    del image.manifest["wheels"][0]["kernels"][0]["sha256"]
    checks = image.check()
    assert checks["kernels"]["detail"] == "smokekern/_kernels.so: the manifest records no sha256"


def test_missing_sass_is_detected(image: FakeImage) -> None:
    image.manifest["wheels"][0]["kernels"][0]["sass"] = ["sm_90a"]
    checks = image.check()
    assert checks["kernels"]["status"] == "failed"
    assert checks["kernels"]["detail"] == \
        "smokekern/_kernels.so: no SASS for sm_121a (built for sm_90a)"


def test_a_cpu_builds_libraries_need_no_sass_but_their_sha256(image: FakeImage) -> None:
    image.manifest["wheels"][0]["kernels"][0]["sass"] = []
    image.expected["device"] = "cpu"
    checks = image.check()
    assert checks["kernels"]["status"] == "passed", checks["kernels"]
    assert checks["kernels"]["detail"] == "smokekern/_kernels.so [loads]"
    image.manifest["wheels"][0]["kernels"][0]["sha256"] = "99" * 32
    assert "differs from the manifest's" in image.check()["kernels"]["detail"]


# What torch does to a second library that registers the `_C` namespace: the process aborts.
REGISTERS = """
#include <stdlib.h>
__attribute__((constructor)) static void registers(void) {
    if (getenv("NAMESPACE_TAKEN")) abort();
    setenv("NAMESPACE_TAKEN", "1", 1);
}
"""


def test_a_cpu_builds_variants_are_each_loaded_alone(image: FakeImage) -> None:
    kernels = []
    for name in ("_C.so", "_C_AVX2.so"):
        library = image.site(f"smokekern/{name}")
        library.with_suffix(".c").write_text(REGISTERS)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library),
                        str(library.with_suffix(".c"))], check=True)
        kernels.append({"path": f"smokekern/{name}", "sass": [],
                        "sha256": hashlib.sha256(library.read_bytes()).hexdigest()})
    image.manifest["wheels"][0]["kernels"] = kernels
    image.expected["device"] = "cpu"
    assert image.check()["kernels"]["detail"] == \
        "smokekern/_C.so [loads]; smokekern/_C_AVX2.so [loads]"
    garbage = image.site("smokekern/_C_AVX2.so")
    garbage.write_bytes(b"not an ELF file")
    kernels[1]["sha256"] = hashlib.sha256(garbage.read_bytes()).hexdigest()
    detail = image.check()["kernels"]["detail"]
    assert detail.startswith("_C_AVX2.so does not load (exit 1): OSError: "), detail


def test_a_cubin_of_the_family_is_accepted_as_the_host_says(image: FakeImage) -> None:
    image.manifest["wheels"][0]["kernels"][0]["sass"] = ["sm_120"]
    image.expected["sass_loadable"] = ["sm_120", "sm_120f", "sm_121", "sm_121a", "sm_121f"]
    assert image.check()["kernels"]["detail"] == "smokekern/_kernels.so [sm_120]"


def test_a_library_for_other_devices_is_checked_by_sha256_only(image: FakeImage) -> None:
    kernel = image.manifest["wheels"][0]["kernels"][0]
    kernel["sass"] = ["sm_80"]
    assert image.check()["kernels"]["status"] == "failed"  # not declared: no sm_121a code
    image.expected["other_arch"] = ["smokekern/_kernels.so"]
    checks = image.check()
    assert checks["kernels"]["detail"] == \
        "smokekern/_kernels.so [sm_80: for other devices, sha256 only]"
    kernel["sha256"] = "99" * 32  # the sha256 still counts
    assert image.check()["kernels"]["status"] == "failed"


def relink_against(image: FakeImage, libraries: list[str], tmp_path: Path) -> None:
    """Rebuild the fake image's kernel so that it needs these libraries, which exist only
    in a folder the checker is not told about (a GPU driver the engine does not mount)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in libraries:
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stubs / name),
                        f"-Wl,-soname,{name}", "-x", "c", "/dev/null"], check=True)
    target = image.site("smokekern/_kernels.so")
    source = tmp_path / "kernel.c"
    source.write_text(KERNEL_SOURCE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-DDEVICES=0", "-DCAPABILITY=0", "-DOFFSET=0.0f",
                    "-o", str(target), str(source), f"-L{stubs}", "-Wl,--no-as-needed",
                    *(f"-l:{name}" for name in libraries)], check=True)
    image.manifest["wheels"][0]["kernels"][0]["sha256"] = \
        hashlib.sha256(target.read_bytes()).hexdigest()
    image.site("smokekern/__init__.py").write_text("")  # the import must not load it


def test_a_kernel_that_needs_only_the_absent_gpu_driver_passes_and_says_so(
        image: FakeImage, tmp_path: Path) -> None:
    relink_against(image, ["libcuda.so.1"], tmp_path)
    checks = image.check()
    assert checks["kernels"]["status"] == "passed"
    assert checks["kernels"]["detail"] == \
        "smokekern/_kernels.so [sm_121a; every library it needs but libcuda.so.1]"


def test_a_kernel_that_needs_more_than_the_driver_fails(
        image: FakeImage, tmp_path: Path) -> None:
    relink_against(image, ["libcuda.so.1", "libsparkbake-absent.so"], tmp_path)
    checks = image.check()
    assert checks["kernels"]["status"] == "failed"
    assert checks["kernels"]["detail"].startswith("smokekern/_kernels.so does not load: ")


def test_missing_kernel_file_is_detected(image: FakeImage) -> None:
    image.site("smokekern/_kernels.so").unlink()
    checks = image.check()
    assert checks["kernels"]["status"] == "failed"
    assert "is not in site-packages" in checks["kernels"]["detail"]
    assert checks["wheels-import"]["status"] == "failed"  # its __init__ loads the kernel


def test_uninstalled_wheel_is_detected(image: FakeImage) -> None:
    image.manifest["wheels"][0]["name"] = "notinstalled"
    checks = image.check()
    assert checks["wheels-import"]["status"] == "failed"
    assert checks["wheels-import"]["detail"].startswith("notinstalled is not installed")


# --- patched files -------------------------------------------------------------------------


def test_an_installed_file_other_than_the_patched_trees_fails_naming_it(
        image: FakeImage) -> None:
    with image.site("smokekern/__init__.py").open("a") as init:
        init.write("# planted\n")
    detail = image.check()["patched-files"]["detail"]
    assert detail.startswith("smokekern/__init__.py: installed sha256 ")
    assert detail.endswith(" (demo/0001-x.patch)")
    assert "differs from the patched tree's" in detail


def test_a_file_the_series_delete_must_be_absent(image: FakeImage) -> None:
    files = image.expected["patched_files"]["files"]
    files.append({"path": "smokekern/old.py", "tree": "smokekern/old.py", "sha256": None,
                  "patch": "demo/0002-y.patch"})
    assert image.check()["patched-files"]["status"] == "passed"
    image.site("smokekern/old.py").write_text("")
    assert image.check()["patched-files"]["detail"] == \
        "smokekern/old.py is installed, but demo/0002-y.patch deletes it"


def test_a_patched_file_missing_from_site_packages_fails(image: FakeImage) -> None:
    image.expected["patched_files"]["files"][0]["path"] = "smokekern/new.py"
    assert image.check()["patched-files"]["detail"] == \
        "smokekern/new.py is not in site-packages (patched by demo/0001-x.patch)"


@pytest.mark.parametrize(("spec", "status", "detail"), [
    ({"problem": "no wheels in /w: run `sparkbake wheels demo`"}, "failed",
     "no wheels in /w: run `sparkbake wheels demo`"),
    ({"files": [], "none": "the tag has no patch series"}, "skipped",
     "the tag has no patch series"),
    (None, "skipped", "not asked: the host gave no patched files to compare"),
])
def test_patched_files_that_cannot_be_compared_say_why(
        image: FakeImage, spec: dict[str, Any] | None, status: str, detail: str) -> None:
    if spec is None:
        del image.expected["patched_files"]
    else:
        image.expected["patched_files"] = spec
    check = image.check()["patched-files"]
    assert (check["status"], check["detail"]) == (status, detail)


# --- vllm -----------------------------------------------------------------------------------


def with_vllm(image: FakeImage, module_version: str, pin: str) -> FakeImage:
    install_distribution(image.root / SITE, "vllm", f"__version__ = {module_version!r}\n",
                         version="0.33.0+cu130")
    image.manifest["wheels"].append({"file": "vllm-0.33.0+cu130-cp38-abi3-linux_x86_64.whl",
                                     "name": "vllm", "sha256": "03" * 32, "kernels": []})
    image.expected["upstream"] = {"kind": "pypi", "name": "vllm", "version": pin,
                                  "sha256": "04" * 32}
    return image


def test_import_vllm_and_its_version_against_the_pypi_pin(image: FakeImage) -> None:
    check = with_vllm(image, "0.33.0+cu130", "0.33.0").check()["vllm-import"]
    assert (check["status"], check["detail"]) == \
        ("passed", "import vllm: 0.33.0+cu130 (the upstream pin: 0.33.0)")


def test_a_vllm_other_than_the_pin_fails(image: FakeImage) -> None:
    check = with_vllm(image, "0.33.0+cu130", "0.34.0").check()["vllm-import"]
    assert check["detail"] == "vllm 0.33.0+cu130 is installed, the upstream pin is 0.34.0"


def test_a_vllm_module_of_another_version_fails(image: FakeImage) -> None:
    check = with_vllm(image, "dev", "0.33.0").check()["vllm-import"]
    assert check["detail"] == "vllm.__version__ is dev, the upstream pin is 0.33.0"


# --- entrypoint samples ----------------------------------------------------------------------


def test_a_printed_command_other_than_the_hosts_fails_naming_the_word(image: FakeImage) -> None:
    sample = image.expected["entrypoint"]["accept"][0]
    sample["command"] = sample["command"].replace("--port 8000", "--port 9000")
    detail = image.check()["entrypoint-print"]["detail"]
    assert detail == "accept/one.env: word 7 is '8000', the host's command has '9000'"


def test_an_accept_sample_the_preflight_refuses_fails_with_its_reason(image: FakeImage) -> None:
    image.expected["entrypoint"]["accept"][0]["env"] = HEAD_ADDRESS_ON_WORKER
    detail = image.check()["entrypoint-print"]["detail"]
    assert detail == ("accept/one.env: exit 2: sparkbake preflight: refusing to start vllm: "
                      "1 error(s); fix the environment, or set SPARKBAKE_PREFLIGHT=0 to skip "
                      "these checks")


def test_a_reject_sample_that_is_accepted_fails(image: FakeImage) -> None:
    image.expected["entrypoint"]["reject"][0]["env"] = {"MODEL": "/model"}
    detail = image.check()["preflight-rejects"]["detail"]
    assert detail.startswith("reject/worker.env: exit 0, expected 2 (the preflight did not "
                             "refuse it)")


def test_a_sample_refused_for_another_rule_fails(image: FakeImage) -> None:
    image.expected["entrypoint"]["reject"][1]["rules"] = ["compressed-mla-toggle"]
    detail = image.check()["preflight-rejects"]["detail"]
    assert detail.startswith("reject/no-model.env: refused, but not for compressed-mla-toggle")


def test_an_image_without_an_entrypoint_fails_both(image: FakeImage) -> None:
    image.expected["entrypoint"]["argv"] = []
    checks = image.check()
    for name in ("entrypoint-print", "preflight-rejects"):
        assert checks[name]["detail"] == \
            "the image has no entrypoint (its config's Entrypoint is empty)"


def test_no_suite_given_skips_the_entrypoint_checks(image: FakeImage) -> None:
    del image.expected["entrypoint"]
    checks = image.check()
    assert {checks[n]["detail"] for n in ("entrypoint-print", "preflight-rejects")} == \
        {"not asked: the host gave no smoke suite"}


# --- GPU -------------------------------------------------------------------------------------


def test_gpu_checks_skipped_in_auto_without_a_device(image: FakeImage) -> None:
    checks = image.check(gpu="auto")
    reason = "no GPU visible: sparkbake_device_count() in smokekern/_kernels.so returned 0"
    for name in ("gpu", "gpu-capability", "gpu-op"):
        assert (checks[name]["status"], checks[name]["detail"]) == ("skipped", reason)


def test_gpu_checks_failed_in_require_without_a_device(image: FakeImage) -> None:
    checks = image.check(gpu="require")
    for name in ("gpu", "gpu-capability", "gpu-op"):
        assert checks[name]["status"] == "failed"
        assert checks[name]["detail"].endswith("returned 0 (--gpu require)")


def test_gpu_passes_when_the_kernel_library_sees_a_device(tmp_path: Path) -> None:
    checks = make_fake_image(tmp_path / "root", devices=2, capability=121).check(gpu="require")
    assert checks["gpu"]["detail"].startswith("2 GPU(s) visible")
    assert checks["gpu-capability"]["status"] == "failed"  # device 1 answers an error
    assert checks["gpu-capability"]["detail"] == \
        "sparkbake_device_capability(1) in smokekern/_kernels.so failed with CUDA error 100"


def test_the_device_capability_is_the_tags(tmp_path: Path) -> None:
    check = make_fake_image(tmp_path / "root", devices=1, capability=121).check(
        gpu="require")["gpu-capability"]
    assert (check["status"], check["detail"]) == \
        ("passed", "1 device(s) of compute capability 12.1")


def test_another_device_capability_fails(tmp_path: Path) -> None:
    check = make_fake_image(tmp_path / "root", devices=1, capability=90).check(
        gpu="require")["gpu-capability"]
    assert check["detail"] == \
        "device 0 is 9.0; the tag's cuda_arch 12.1a needs compute capability 12.1"


def test_the_fixtures_op_matches_the_python_reference(tmp_path: Path) -> None:
    image = make_fake_image(tmp_path / "root", devices=1, package="tinykern")
    check = image.check(gpu="require")["gpu-op"]
    assert (check["status"], check["detail"]) == \
        ("passed", "tinykern.scale on 4096 floats equals the Python reference")


def test_a_wrong_op_result_fails(tmp_path: Path) -> None:
    image = make_fake_image(tmp_path / "root", devices=1, package="tinykern", offset="0.5f")
    detail = image.check(gpu="require")["gpu-op"]["detail"]
    assert detail.startswith("tinykern.scale(x, 1.7000000476837158) differs from the Python "
                             "reference in 4096 of 4096 values; first at 0: ")


def test_a_kernel_without_code_for_the_gpu_fails_naming_the_error_and_its_arches(
        tmp_path: Path) -> None:
    # what the 12.1a demo's launch returns on a Hopper card
    image = make_fake_image(tmp_path / "root", devices=1, package="tinykern", status=209)
    check = image.check(gpu="require")["gpu-op"]
    assert (check["status"], check["detail"]) == (
        "failed", "tinykern.scale failed on this GPU: CUDA error 209 "
        "(cudaErrorNoKernelImageForDevice: no kernel image is available for execution on the "
        "device); its kernels are built for sm_121")


def test_no_op_check_for_the_wheels_is_a_skip_naming_them(tmp_path: Path) -> None:
    check = make_fake_image(tmp_path / "root", devices=1).check(gpu="require")["gpu-op"]
    assert (check["status"], check["detail"]) == (
        "skipped", "no custom op check for this image's wheels (smokekern); there are checks "
        "for tinykern, vllm")


def test_gpu_reason_given_by_the_host_is_reported(image: FakeImage) -> None:
    image.write_manifest()
    image.expected["gpu"] = {"mode": "require", "unavailable": "no GPU runtime in this engine"}
    done = subprocess.run(
        [sys.executable, str(CHECKER), "--root", str(image.root), json.dumps(image.expected)],
        capture_output=True, text=True, check=False,
        env={**os.environ, GREETING: "hello", "SPARKBAKE_MANIFEST": str(image.manifest_path)},
    )
    gpu = {c["name"]: c for c in json.loads(done.stdout)["checks"]}["gpu"]
    assert (done.returncode, gpu["status"]) == (1, "failed")
    assert gpu["detail"] == "no GPU visible: no GPU runtime in this engine (--gpu require)"


def test_unreadable_expected_values_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(CHECKER), str(tmp_path / "absent.json")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "cannot read the expected values" in done.stderr
