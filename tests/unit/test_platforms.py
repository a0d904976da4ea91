"""Platforms: the binfmt check, the ELF check of the bake, keys that differ per platform."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest

from sparkbake import bases, planning
from sparkbake.bake import elfcheck
from sparkbake.config.versions import DebootstrapBase
from sparkbake.core.stages import Stage
from sparkbake.errors import BakeError, EngineError
from sparkbake.oci import emulation
from sparkbake.pipeline import status
from tests.conftest import Project

# the first 20 bytes of an ELF header: class, byte order, then e_machine at offset 18
X86_64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little")
AARCH64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little")


def test_elf_machines_are_read_from_the_header() -> None:
    assert elfcheck.machine_of(X86_64) == 62
    assert elfcheck.machine_of(AARCH64) == 183
    assert elfcheck.machine_of(b"#!/bin/sh\n" + bytes(10)) is None
    assert elfcheck.machine_of(b"\x7fELF") is None  # too short to say


def test_an_elf_file_of_another_machine_is_named_with_exit_5(tmp_path: Path) -> None:
    lib = tmp_path / "opt" / "venv" / "lib" / "x.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(AARCH64 + b"rest")
    (tmp_path / "opt" / "venv" / "script").write_bytes(b"#!/bin/sh\n")
    elfcheck.require_platform(tmp_path, "linux/arm64")
    with pytest.raises(BakeError) as caught:
        elfcheck.require_platform(tmp_path, "linux/amd64")
    assert caught.value.exit_code == 5
    assert caught.value.message == \
        "/opt/venv/lib/x.so is built for linux/arm64, the image is linux/amd64"


def test_a_foreign_platform_without_its_binfmt_handler_is_exit_8(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as caught:
        emulation.require_binfmt("linux/arm64", tmp_path)
    assert caught.value.exit_code == 8
    assert f"{tmp_path}/qemu-aarch64 is not an enabled qemu handler" in caught.value.message
    assert "apt-get install qemu-user-static" in caught.value.remedy
    (tmp_path / "qemu-aarch64").write_text("disabled\ninterpreter /usr/bin/qemu\n")
    with pytest.raises(EngineError):
        emulation.require_binfmt("linux/arm64", tmp_path)
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu\n")
    emulation.require_binfmt("linux/arm64", tmp_path)


def test_the_hosts_own_platform_needs_no_handler(tmp_path: Path) -> None:
    emulation.require_binfmt(emulation.host_platform(), tmp_path)


def test_a_debootstrap_base_is_another_image_per_platform() -> None:
    base = DebootstrapBase(name="d", suite="bookworm", mirror=None, variant="minbase",
                           packages=())
    assert bases.local_ref(base, "linux/amd64") != bases.local_ref(base, "linux/arm64")


def test_every_key_of_an_arm64_tag_differs_from_its_amd64_twin(project: Project) -> None:
    loaded = project.config()
    amd64 = loaded.tag("fixture")
    arm64 = dataclasses.replace(amd64, platform="linux/arm64")
    one, other = planning.make(loaded, amd64), planning.make(loaded, arm64)
    for stage in (Stage.KERNELS, Stage.WHEELS, Stage.BAKE):
        assert one.key(stage) != other.key(stage), stage
    assert one.key(Stage.PATCH) == other.key(Stage.PATCH)  # the tree is the same


def test_plan_says_which_stages_run_emulated(project: Project) -> None:
    loaded = project.config()
    host = emulation.host_platform()
    other = "linux/arm64" if host == "linux/amd64" else "linux/amd64"
    native = dataclasses.replace(loaded.tag("fixture"), platform=host)
    foreign = dataclasses.replace(native, platform=other)
    said = {tag.platform: {s.name: s.detail for s in status.stage_states(
        loaded, planning.make(loaded, tag), None)} for tag in (native, foreign)}
    assert f"; emulated: {other} on {host}" in said[other][Stage.WHEELS]
    assert f"; emulated: {other} on {host}" in said[other][Stage.SMOKE]
    assert "(venv made emulated, files native)" in said[other][Stage.BAKE]
    assert not any("emulated" in detail for detail in said[host].values())


class FakeEngine:
    """What cpu_sysfs asks of a client: where the engine is and its machine."""

    def __init__(self, arch: str, base_url: str = "http+docker://localhost") -> None:
        self.arch = arch
        self.api = types.SimpleNamespace(base_url=base_url)

    def info(self) -> dict[str, str]:
        return {"Architecture": self.arch}


def test_an_emulated_arm64_container_gets_a_cpu_tree_with_its_identity() -> None:
    with emulation.cpu_sysfs(FakeEngine("x86_64"), "linux/arm64") as volumes:
        ((folder, bind),) = volumes.items()
        assert bind == {"bind": "/sys/devices/system/cpu", "mode": "ro"}
        midr = Path(folder, "cpu0", "regs", "identification", "midr_el1").read_text()
        assert midr == emulation.ARM64_MIDR + "\n"
        assert Path(folder, "online").read_text().startswith("0-")
    assert not Path(folder).exists()  # removed after the container


def test_a_native_or_remote_container_gets_no_cpu_tree() -> None:
    for engine, platform in ((FakeEngine("aarch64"), "linux/arm64"),
                             (FakeEngine("x86_64"), "linux/amd64"),
                             (FakeEngine("x86_64", "ssh://node"), "linux/arm64")):
        with emulation.cpu_sysfs(engine, platform) as volumes:
            assert volumes == {}


def test_files_kept_under_a_folder_named_for_their_platform_pass(tmp_path: Path) -> None:
    stub = tmp_path / "opt/venv/lib/cutlass/lib/stubs/aarch64-unknown-linux-gnu/libstub.so"
    stub.parent.mkdir(parents=True)
    stub.write_bytes(AARCH64)
    elfcheck.require_platform(tmp_path, "linux/amd64")  # a cross target's stub: on purpose
    extension = tmp_path / "opt/venv/lib/pkg/_k.cpython-311-aarch64-linux-gnu.so"
    extension.parent.mkdir(parents=True)
    extension.write_bytes(AARCH64)
    with pytest.raises(BakeError, match=r"_k\.cpython-311-aarch64-linux-gnu\.so is built for "
                                        r"linux/arm64, the image is linux/amd64"):
        elfcheck.require_platform(tmp_path, "linux/amd64")
