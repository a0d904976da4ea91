"""Platforms: their table, the binfmt check, the ELF check of the bake, keys that differ per
platform."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest

from sparkbake import bases, planning
from sparkbake.bake import elfcheck
from sparkbake.config import platforms
from sparkbake.config.platforms import AMD64, ARM64, Platform
from sparkbake.config.versions import DebootstrapBase
from sparkbake.core.stages import Stage
from sparkbake.errors import BakeError, ConfigError, EngineError
from sparkbake.oci import emulation
from sparkbake.pipeline import status
from tests.conftest import Project, fake_engine, plain_console, settings_of

# the first 20 bytes of an ELF header: class, byte order, then e_machine at offset 18
X86_64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little")
AARCH64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little")
RISCV = b"\x7fELF\x02\x01\x01" + bytes(11) + (243).to_bytes(2, "little")


def test_each_tool_names_the_architectures_of_the_table_its_own_way() -> None:
    assert [(str(p), p.machine, p.debian, p.elf_machine) for p in platforms.PLATFORMS] == [
        ("linux/amd64", "x86_64", "amd64", 62), ("linux/arm64", "aarch64", "arm64", 183)]


def test_a_platform_is_read_as_the_table_names_it_or_as_one_of_its_own() -> None:
    assert platforms.parse("linux/arm64") is ARM64
    assert platforms.parse("linux/amd64") is AMD64
    riscv = platforms.parse("linux/riscv64")  # versions.yaml may name it; a lock may not
    assert (str(riscv), riscv.machine, riscv.debian, riscv.elf_machine) == (
        "linux/riscv64", "riscv64", None, None)
    assert riscv not in platforms.PLATFORMS
    for text in ("amd64", "windows/amd64", "linux/arm64/v8", "linux/"):
        with pytest.raises(ValueError, match="not a platform such as linux/arm64"):
            platforms.parse(text)


@pytest.mark.parametrize(("name", "platform"), [
    ("x86_64", AMD64), ("amd64", AMD64), ("aarch64", ARM64), ("arm64", ARM64),
    ("riscv64", Platform("riscv64", machine="riscv64")),
])
def test_a_machine_is_the_platform_the_kernel_or_the_engine_names(name: str,
                                                                   platform: Platform) -> None:
    assert platforms.of_machine(name) == platform


def test_an_elf_machine_is_a_platform_of_the_table_or_none() -> None:
    assert (platforms.of_elf_machine(62), platforms.of_elf_machine(183)) == (AMD64, ARM64)
    assert platforms.of_elf_machine(243) is None  # RISC-V


def test_a_release_names_the_tag_of_each_platform_by_its_architecture() -> None:
    assert platforms.platform_name("spark", ARM64) == "spark-arm64"


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
    elfcheck.require_platform(tmp_path, ARM64)
    with pytest.raises(BakeError) as caught:
        elfcheck.require_platform(tmp_path, AMD64)
    assert caught.value.exit_code == 5
    assert caught.value.message == \
        "/opt/venv/lib/x.so is built for linux/arm64, the image is linux/amd64"


def test_an_elf_file_of_a_machine_the_table_lacks_is_named_by_its_number(
        tmp_path: Path) -> None:
    lib = tmp_path / "riscv64" / "x.so"  # no folder name keeps it: no platform is known
    lib.parent.mkdir()
    lib.write_bytes(RISCV)
    with pytest.raises(BakeError) as caught:
        elfcheck.require_platform(tmp_path, AMD64)
    assert caught.value.message == \
        "/riscv64/x.so is built for ELF machine 243, the image is linux/amd64"


def test_a_foreign_platform_without_its_binfmt_handler_is_exit_8(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as caught:
        emulation.require_binfmt(ARM64, tmp_path)
    assert caught.value.exit_code == 8
    assert f"{tmp_path}/qemu-aarch64 is not an enabled qemu handler" in caught.value.message
    assert "apt-get install qemu-user-static" in caught.value.remedy
    (tmp_path / "qemu-aarch64").write_text("disabled\ninterpreter /usr/bin/qemu\n")
    with pytest.raises(EngineError):
        emulation.require_binfmt(ARM64, tmp_path)
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu\n")
    emulation.require_binfmt(ARM64, tmp_path)


def test_the_hosts_own_platform_needs_no_handler(tmp_path: Path) -> None:
    emulation.require_binfmt(emulation.host_platform(), tmp_path)


def test_debootstrap_refuses_a_platform_the_table_lacks(tmp_path: Path) -> None:
    base = DebootstrapBase(name="d", suite="bookworm", mirror=None, variant="minbase",
                           packages=())
    settings = settings_of()
    with pytest.raises(ConfigError) as caught:
        bases._debootstrap(fake_engine(FakeEngine("x86_64")), base, "ref",
                           platforms.parse("linux/riscv64"), tmp_path, settings,
                           console=plain_console())
    assert (caught.value.message, caught.value.remedy) == (
        "base 'd': debootstrap has no architecture for linux/riscv64",
        "use one of linux/amd64, linux/arm64")


def test_a_debootstrap_base_is_another_image_per_platform() -> None:
    base = DebootstrapBase(name="d", suite="bookworm", mirror=None, variant="minbase",
                           packages=())
    assert bases.local_ref(base, AMD64) != bases.local_ref(base, ARM64)


def test_every_key_of_an_arm64_tag_differs_from_its_amd64_twin(project: Project) -> None:
    loaded = project.config()
    amd64 = loaded.tag("fixture")
    arm64 = dataclasses.replace(amd64, platform=ARM64)
    one, other = planning.make(loaded, amd64), planning.make(loaded, arm64)
    for stage in (Stage.KERNELS, Stage.WHEELS, Stage.BAKE):
        assert one.key(stage) != other.key(stage), stage
    assert one.key(Stage.PATCH) == other.key(Stage.PATCH)  # the tree is the same


def test_plan_says_which_stages_run_emulated(project: Project) -> None:
    loaded = project.config()
    host = emulation.host_platform()
    other = ARM64 if host == AMD64 else AMD64
    native = dataclasses.replace(loaded.tag("fixture"), platform=host)
    foreign = dataclasses.replace(native, platform=other)
    said = {tag.platform: {s.name: s.detail for s in status.stage_states(
        loaded, planning.make(loaded, tag), None,
        console=plain_console())} for tag in (native, foreign)}
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
    with emulation.cpu_sysfs(fake_engine(FakeEngine("x86_64")), ARM64) as volumes:
        ((folder, bind),) = volumes.items()
        assert bind == {"bind": "/sys/devices/system/cpu", "mode": "ro"}
        midr = Path(folder, "cpu0", "regs", "identification", "midr_el1").read_text()
        assert midr == emulation.ARM64_MIDR + "\n"
        assert Path(folder, "online").read_text().startswith("0-")
    assert not Path(folder).exists()  # removed after the container


def test_a_native_or_remote_container_gets_no_cpu_tree() -> None:
    for engine, platform in ((FakeEngine("aarch64"), ARM64), (FakeEngine("x86_64"), AMD64),
                             (FakeEngine("x86_64", "ssh://node"), ARM64)):
        with emulation.cpu_sysfs(fake_engine(engine), platform) as volumes:
            assert volumes == {}


def test_files_kept_under_a_folder_named_for_their_platform_pass(tmp_path: Path) -> None:
    stub = tmp_path / "opt/venv/lib/cutlass/lib/stubs/aarch64-unknown-linux-gnu/libstub.so"
    stub.parent.mkdir(parents=True)
    stub.write_bytes(AARCH64)
    elfcheck.require_platform(tmp_path, AMD64)  # a cross target's stub: on purpose
    extension = tmp_path / "opt/venv/lib/pkg/_k.cpython-311-aarch64-linux-gnu.so"
    extension.parent.mkdir(parents=True)
    extension.write_bytes(AARCH64)
    with pytest.raises(BakeError, match=r"_k\.cpython-311-aarch64-linux-gnu\.so is built for "
                                        r"linux/arm64, the image is linux/amd64"):
        elfcheck.require_platform(tmp_path, AMD64)
