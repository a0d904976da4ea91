"""The jit-toolchain and asked checks of images/smoke_jit.py, run by the checker on a fake
image root. The compilers here are stand-ins that write what nvcc and ptxas write (an ELF
file of machine EM_CUDA); the real ones run in the production image's smoke
(tests/integration/test_production_arm64.py)."""

from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path

import pytest

from tests.smoke.test_smoke_check import SITE, FakeImage, install_distribution, make_fake_image

CUDA_HOME = "/opt/venv/cuda"
CACHE = "/var/cache/jit"
# a compiler stand-in: -o FILE gets a cubin's ELF header (EM_CUDA = 190) or PTX text
TOOL = f"""#!{sys.executable}
import sys
args = sys.argv[1:]
if args == ["--version"]:
    print("Cuda compilation tools, release 13.0, V13.0.88")
    sys.exit(0)
FAIL
out = args[args.index("-o") + 1]
data = b".target sm_121a\\n" if "-ptx" in args else b"\\x7fELF" + bytes(14) + bytes([190, 0])
open(out, "wb").write(data)
"""
# a stand-in of Triton's compiler module: get_ptxas(arch) names the ptxas it takes
TRITON_COMPILER = """\
import pathlib, types
def get_ptxas(arch):
    name = "ptxas-blackwell" if arch >= 100 else "ptxas"
    return types.SimpleNamespace(path=str(pathlib.Path(__file__).parent / "bin" / name))
"""
UNSUPPORTED = ('print("nvcc fatal   : Unsupported gpu architecture \'compute_121a\'", '
               'file=sys.stderr); sys.exit(1)')


def tool(path: Path, fail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TOOL.replace("FAIL", fail))
    path.chmod(0o755)


@pytest.fixture
def image(tmp_path: Path) -> FakeImage:
    """A fake image whose manifest names a JIT toolchain that is there."""
    image = make_fake_image(tmp_path / "root")
    image.expected["jit_required"] = True
    image.manifest["jit"] = {"cuda_home": CUDA_HOME, "cache": CACHE, "env": {},
                             "path": f"{CUDA_HOME}/bin"}
    tool(image.root / CUDA_HOME.lstrip("/") / "bin" / "nvcc")
    for package in ("triton", "triton/backends", "triton/backends/nvidia"):
        image.site(package).mkdir(parents=True, exist_ok=True)
        image.site(f"{package}/__init__.py").write_text("")
    image.site("triton/backends/nvidia/compiler.py").write_text(TRITON_COMPILER)
    tool(image.site("triton/backends/nvidia/bin/ptxas"), fail=UNSUPPORTED)  # CUDA 12's
    tool(image.site("triton/backends/nvidia/bin/ptxas-blackwell"))
    (image.root / CACHE.lstrip("/")).mkdir(parents=True)
    return image


def test_the_toolchain_compiles_for_the_tags_arch(image: FakeImage) -> None:
    check = image.check()["jit-toolchain"]
    assert (check["status"], check["detail"]) == ("passed", (
        "nvcc V13.0.88 and Triton's ptxas V13.0.88 compile for sm_121a; cache "
        "/var/cache/jit writable"))


def test_an_image_without_a_toolchain_fails_when_its_upstream_needs_one(
        image: FakeImage) -> None:
    del image.manifest["jit"]
    check = image.check()["jit-toolchain"]
    assert check["status"] == "failed"
    assert check["detail"].startswith("the image has no CUDA toolchain (no nvcc wheel")
    image.expected["jit_required"] = False
    assert image.check()["jit-toolchain"]["status"] == "skipped"


def test_an_arch_nvcc_does_not_know_fails_with_its_error(image: FakeImage) -> None:
    tool(image.root / CUDA_HOME.lstrip("/") / "bin" / "nvcc", fail=UNSUPPORTED)
    check = image.check()["jit-toolchain"]
    assert (check["status"], check["detail"]) == ("failed", (
        "nvcc failed (exit 1): nvcc fatal   : Unsupported gpu architecture 'compute_121a'"))


def test_the_ptxas_triton_takes_for_the_arch_is_the_one_run(image: FakeImage) -> None:
    """For sm_121a Triton takes ptxas-blackwell; its CUDA 12 ptxas would refuse the PTX."""
    tool(image.site("triton/backends/nvidia/bin/ptxas-blackwell"), fail=UNSUPPORTED)
    check = image.check()["jit-toolchain"]
    assert (check["status"], check["detail"]) == ("failed", (
        "Triton's ptxas failed (exit 1): nvcc fatal   : Unsupported gpu architecture "
        "'compute_121a'"))


def test_an_image_without_triton_fails(image: FakeImage) -> None:
    image.site("triton/backends/nvidia/compiler.py").unlink()
    check = image.check()["jit-toolchain"]
    assert check["status"] == "failed"
    assert check["detail"].startswith("Triton cannot name its ptxas for sm_121a: "
                                      "ModuleNotFoundError")


def test_the_cache_folder_must_be_there(image: FakeImage) -> None:
    (image.root / CACHE.lstrip("/")).rmdir()
    check = image.check()["jit-toolchain"]
    assert (check["status"], check["detail"]) == (
        "failed", "the JIT cache folder /var/cache/jit is missing or not writable")


def record(site: Path, name: str, files: dict[str, bytes], version: str = "1.5.1") -> None:
    """A distribution whose RECORD holds its files' real hashes."""
    install_distribution(site, name, "", version)
    lines = []
    for relative, data in files.items():
        (site / relative).write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{relative},sha256={digest},{len(data)}\n")
    (site / f"{name}-{version}.dist-info" / "RECORD").write_text("".join(lines))


def test_an_asked_distribution_is_its_own_copy_and_imports(image: FakeImage) -> None:
    site = image.root / SITE
    record(site, "b12x", {"b12x/__init__.py": b"VALUE = 1\n"})
    image.manifest["asked"] = [{"name": "b12x", "requirement": "b12x==1.5.1",
                                "why": "extra b12x"}]
    check = image.check()["asked"]
    assert (check["status"], check["detail"]) == (
        "passed", "b12x 1.5.1 (extra b12x; imports b12x)")
    (site / "b12x/__init__.py").write_text("# another distribution's shim\n")
    check = image.check()["asked"]
    assert (check["status"], check["detail"]) == ("failed", (
        "b12x: 1 file(s) differ from its RECORD, e.g. b12x/__init__.py (another "
        "distribution wrote it)"))


def test_an_asked_distribution_at_another_version_fails(image: FakeImage) -> None:
    record(image.root / SITE, "b12x", {"b12x/__init__.py": b""}, version="1.4.0")
    image.manifest["asked"] = [{"name": "b12x", "requirement": "b12x==1.5.1",
                                "why": "extra b12x"}]
    check = image.check()["asked"]
    assert (check["status"], check["detail"]) == (
        "failed", "b12x 1.4.0 is installed, extra b12x asks 1.5.1")
