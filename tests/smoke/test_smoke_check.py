"""images/smoke_check.py run on the host, in a subprocess, against a fake image root.

The fake root has what a baked image has: /opt/sparkbake/manifest.json and a venv
site-packages with an installed distribution whose kernel is a real shared library
compiled with gcc.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHECKER = Path(__file__).parents[2] / "images" / "smoke_check.py"
SITE = Path("opt/venv/lib/python3.11/site-packages")
KERNEL = "smokekern/_kernels.so"
GREETING = "SPARKBAKE_SMOKE_GREETING"
SERIES_SHA = "ab" * 32
KERNEL_SOURCE = """
int smokekern_add(int a, int b) { return a + b; }
int sparkbake_device_count(void) { return DEVICES; }
"""


@dataclass
class FakeImage:
    root: Path
    manifest: dict[str, Any]
    expected: dict[str, Any]

    def write_manifest(self) -> None:
        path = self.root / "opt/sparkbake/manifest.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.manifest))

    def check(self, env: dict[str, str] | None = None, gpu: str = "skip") -> dict[str, Any]:
        """Run the checker; return {check name: check}."""
        self.write_manifest()
        self.expected["gpu"] = {"mode": gpu, "unavailable": None}
        expected_file = self.root / "expected.json"
        expected_file.write_text(json.dumps(self.expected))
        environment = {k: v for k, v in os.environ.items() if k != GREETING}
        environment.update({GREETING: "hello"} if env is None else env)
        done = subprocess.run(
            [sys.executable, "-B", str(CHECKER), "--root", str(self.root), str(expected_file)],
            capture_output=True, text=True, env=environment, check=False, timeout=120,
        )
        last_line = done.stdout.strip().splitlines()[-1]
        checks = {c["name"]: c for c in json.loads(last_line)["checks"]}
        failed = any(c["status"] == "failed" for c in checks.values())
        assert done.returncode == (1 if failed else 0), done.stderr
        return checks


def compile_kernel(target: Path, devices: int) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is needed to build the stand-in kernel: apt-get install -y gcc")
    source = target.with_suffix(".c")
    source.write_text(KERNEL_SOURCE.replace("DEVICES", str(devices)))
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(target), str(source)], check=True)
    source.unlink()


def install_distribution(site: Path, devices: int) -> str:
    """smokekern 0.1.0 as pip would leave it; returns the kernel's sha256."""
    package = site / "smokekern"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import ctypes, pathlib\n"
        "lib = ctypes.CDLL(str(pathlib.Path(__file__).with_name('_kernels.so')))\n"
        "assert lib.smokekern_add(2, 3) == 5\n"
    )
    compile_kernel(package / "_kernels.so", devices)
    info = site / "smokekern-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: smokekern\nVersion: 0.1.0\n")
    (info / "top_level.txt").write_text("smokekern\n")
    (info / "RECORD").write_text("smokekern/__init__.py,,\nsmokekern/_kernels.so,,\n")
    return hashlib.sha256((package / "_kernels.so").read_bytes()).hexdigest()


def make_fake_image(root: Path, devices: int = 0) -> FakeImage:
    kernel_sha = install_distribution(root / SITE, devices)
    upstream = {"kind": "dir", "path": "upstream", "tree": "cd" * 32}
    series = [{"name": "demo", "sha256": SERIES_SHA}]
    expected = {"tag": "demo", "inputs": "ef" * 32, "upstream": upstream, "series": series,
                "cuda_arch": "12.1a", "sm_arch": "sm_121a", "env": {GREETING: "hello"}}
    manifest = {
        **{k: v for k, v in expected.items() if k != "series"},
        "schema": 1, "image": "localhost:5000/sparkbake-demo:demo", "platform": "linux/amd64",
        "series": [{**series[0], "patches": [{"file": "0001-x.patch", "sha256": "01" * 32}]}],
        "wheels": [{"file": "smokekern-0.1.0-cp311-cp311-linux_x86_64.whl", "sha256": "02" * 32,
                    "name": "smokekern",
                    "kernels": [{"path": KERNEL, "sha256": kernel_sha, "sass": ["sm_121a"]}]}],
    }
    return FakeImage(root=root, manifest=manifest, expected=expected)


@pytest.fixture
def image(tmp_path: Path) -> FakeImage:
    return make_fake_image(tmp_path / "root")


def statuses(checks: dict[str, Any]) -> dict[str, str]:
    return {name: check["status"] for name, check in checks.items()}


def test_a_matching_image_passes(image: FakeImage) -> None:
    checks = image.check()
    assert statuses(checks) == {"manifest": "passed", "env-defaults": "passed",
                                "wheels-import": "passed", "kernels": "passed", "gpu": "skipped"}
    assert "smokekern 0.1.0" in checks["wheels-import"]["detail"]
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
    (image.root / "opt/sparkbake/manifest.json").unlink()
    image.write_manifest = lambda: None  # type: ignore[method-assign]
    checks = image.check()
    assert statuses(checks)["manifest"] == "failed"
    assert "does not exist" in checks["manifest"]["detail"]
    assert checks["wheels-import"]["status"] == "failed"
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
    assert checks["kernels"]["detail"] == f"{KERNEL}: the manifest records no sha256"


def test_missing_sass_is_detected(image: FakeImage) -> None:
    image.manifest["wheels"][0]["kernels"][0]["sass"] = ["sm_90a"]
    checks = image.check()
    assert checks["kernels"]["status"] == "failed"
    assert checks["kernels"]["detail"] == f"{KERNEL}: no SASS for sm_121a (built for sm_90a)"


def test_missing_kernel_file_is_detected(image: FakeImage) -> None:
    (image.root / SITE / KERNEL).unlink()
    checks = image.check()
    assert checks["kernels"]["status"] == "failed"
    assert "is not in site-packages" in checks["kernels"]["detail"]
    assert checks["wheels-import"]["status"] == "failed"  # its __init__ loads the kernel


def test_uninstalled_wheel_is_detected(image: FakeImage) -> None:
    image.manifest["wheels"][0]["name"] = "notinstalled"
    checks = image.check()
    assert checks["wheels-import"]["status"] == "failed"
    assert checks["wheels-import"]["detail"].startswith("notinstalled is not installed")


def test_gpu_skipped_in_auto_without_a_device(image: FakeImage) -> None:
    gpu = image.check(gpu="auto")["gpu"]
    assert gpu["status"] == "skipped"
    assert gpu["detail"] == f"no GPU visible: sparkbake_device_count() in {KERNEL} returned 0"


def test_gpu_failed_in_require_without_a_device(image: FakeImage) -> None:
    gpu = image.check(gpu="require")["gpu"]
    assert gpu["status"] == "failed"
    assert gpu["detail"].endswith("returned 0 (--gpu require)")


def test_gpu_passes_when_the_kernel_library_sees_a_device(tmp_path: Path) -> None:
    gpu = make_fake_image(tmp_path / "root", devices=2).check(gpu="require")["gpu"]
    assert gpu["status"] == "passed"
    assert gpu["detail"].startswith("2 GPU(s) visible")


def test_gpu_reason_given_by_the_host_is_reported(image: FakeImage) -> None:
    image.write_manifest()
    image.expected["gpu"] = {"mode": "require", "unavailable": "no GPU runtime in this engine"}
    done = subprocess.run(
        [sys.executable, str(CHECKER), "--root", str(image.root), json.dumps(image.expected)],
        capture_output=True, text=True, check=False, env={**os.environ, GREETING: "hello"},
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
