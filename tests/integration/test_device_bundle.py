"""The device smoke on this machine: the fixture image's bundle made from the engine, then run
with no engine, in runc unpacked from the bundle's own Debian package. There is no GPU here, so
the GPU checks fail (the bundle asks for them) and every other check must come out as it did in
the engine."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from sparkbake.smoke import checks, device_bundle
from tests.conftest import Project

pytestmark = pytest.mark.docker

CARRIED = 64 * 1024 * 1024  # what one call to a device machine carries


@pytest.fixture(scope="module")
def bundle(built_fixture: Project, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("device") / "fixture.tar.xz"
    assert built_fixture.sparkbake("device-bundle", "fixture", "--out", str(out)) == 0
    return out


def described(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        source = tar.extractfile(device_bundle.BUNDLE_FILE)
        assert source is not None
        loaded: dict[str, Any] = json.loads(source.read())
        return loaded


def run_bundle(archive: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkbake.smoke.oci_runtime", str(archive),
                           *args], capture_output=True, text=True, check=False, timeout=600)


def test_the_bundle_is_a_cut_root_that_a_device_call_carries(bundle: Path) -> None:
    about = described(bundle)
    assert bundle.stat().st_size < CARRIED
    assert about["root_files"] < about["image_files"] / 2
    assert [p["name"] for p in about["packages"]] == ["runc", "libseccomp2"]


def test_runc_from_the_bundle_checks_as_the_engine_did(bundle: Path, tmp_path: Path) -> None:
    done = run_bundle(bundle, "--out", str(tmp_path / "record.json"))
    assert done.returncode == 6, done.stderr
    record = json.loads((tmp_path / "record.json").read_text())
    there = {c["name"]: c for c in record["smoke"]["checks"]}
    here = {c["name"]: c["status"] for c in described(bundle)["checks_here"]}
    others = set(here) - checks.GPU_CHECKS
    assert {name: there[name]["status"] for name in others} == {n: here[n] for n in others}
    assert sum(1 for name in others if here[name] == "passed") >= 5
    for name in checks.GPU_CHECKS:
        assert there[name]["status"] == "failed"
        assert there[name]["detail"].startswith("no GPU visible: ")
        assert there[name]["detail"].endswith("(--gpu require)")
    assert record["runtime"].startswith("runc version ")
    assert done.stdout.splitlines()[-1].startswith(
        "fixture: failed: gpu, gpu-capability, gpu-op (no GPU; no NVIDIA driver; runc version ")


def test_a_root_without_a_library_the_checker_loads_fails_in_one_line(
        bundle: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.tar.xz"
    with tarfile.open(bundle) as source, tarfile.open(damaged, "w:xz", preset=0) as out:
        for member in source:
            if not member.name.startswith("rootfs/usr/lib/x86_64-linux-gnu/libz.so"):
                out.addfile(member, source.extractfile(member) if member.isreg() else None)
    done = run_bundle(damaged)
    assert done.returncode == 8
    first, hint = done.stderr.splitlines()
    assert first.startswith("error: the checker gave no result under runc (exit 127): ")
    assert first.endswith("libz.so.1: cannot open shared object file: No such file or directory")
    assert hint == ("  hint: the cut root lacks a file the checker needs (named above): make the "
                    "bundle again with `sparkbake device-bundle TAG`")
