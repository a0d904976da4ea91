"""Platforms: the host's and the engine's, and the qemu binfmt handler that lets an engine
run images of another one (linux/arm64 on x86_64)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sparkbake.config.platforms import ARM64, Platform, of_machine
from sparkbake.errors import EngineError
from sparkbake.oci.docker_engine import Client

__all__ = ["BINFMT", "cpu_sysfs", "engine_platform", "host_platform", "require_binfmt",
           "require_engine_runs"]

BINFMT = Path("/proc/sys/fs/binfmt_misc")


def host_platform() -> Platform:
    return of_machine(os.uname().machine)


def engine_platform(client: Client) -> Platform:
    """The platform of the engine's own host (the one its containers run natively on)."""
    return of_machine(str(client.info().get("Architecture", "")))


def require_binfmt(platform: Platform, binfmt: Path | None = None) -> None:
    """Programs of platform run on this host: natively, or through an enabled qemu binfmt
    handler (what debootstrap's second stage and the engine's containers rely on)."""
    binfmt = binfmt or BINFMT
    host = host_platform()
    if platform == host:
        return
    handler = binfmt / f"qemu-{platform.machine}"
    try:
        enabled = handler.read_text().splitlines()[:1] == ["enabled"]
    except OSError:
        enabled = False
    if not enabled:
        raise EngineError(
            f"{platform} needs emulation on this {host} host, and {handler} is not an enabled "
            "qemu handler",
            "install and register it: apt-get install qemu-user-static, mount binfmt_misc on "
            f"{binfmt} (bash scripts/host-setup does both)")


def require_engine_runs(client: Client, platform: Platform) -> None:
    """The engine can run containers of platform; checked where the engine is this host."""
    engine = engine_platform(client)
    if platform != engine and str(client.api.base_url).startswith("http+docker://localhost"):
        require_binfmt(platform)


# MIDR_EL1 of an Arm Neoverse V2 (Grace): a plausible CPU identity for an emulated arm64
# container. torch's oneDNN reads it from sysfs at import and crashes without it (qemu-user
# shows the x86 host's CPU tree, which has none).
ARM64_MIDR = "0x00000000410fd4f0"
CPU_SYSFS = "/sys/devices/system/cpu"


@contextlib.contextmanager
def cpu_sysfs(client: Client, platform: Platform) -> Iterator[dict[str, dict[str, str]]]:
    """Volumes for a container of platform: where it runs emulated on this host's engine, a
    read-only CPU sysfs tree of that platform over the host's; else none."""
    local = str(client.api.base_url).startswith("http+docker://localhost")
    if platform != ARM64 or engine_platform(client) == platform or not local:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="sparkbake-cpu-") as folder:
        root = Path(folder)
        count = os.cpu_count() or 1
        for name in ("online", "possible", "present"):
            (root / name).write_text(f"0-{count - 1}\n")
        for cpu in range(count):
            ids = root / f"cpu{cpu}" / "regs" / "identification"
            ids.mkdir(parents=True)
            (ids / "midr_el1").write_text(ARM64_MIDR + "\n")
            (ids / "revidr_el1").write_text("0x0000000000000000\n")
            (root / f"cpu{cpu}" / "online").write_text("1\n")
        root.chmod(0o755)
        yield {folder: {"bind": CPU_SYSFS, "mode": "ro"}}
