"""The smoke where no container engine exists: a bundle from `sparkbake device-bundle` (the
image's root cut down to what the checker uses, the checker, what it checks against, and runc
as Debian packages) run in an OCI runtime, with the host's NVIDIA devices and driver libraries
given to the container as the NVIDIA container toolkit gives them.

Standard library and sparkbake's records only, so it runs from a source checkout on a machine
with nothing installed: `PYTHONPATH=src python3 -m sparkbake.smoke.oci_runtime BUNDLE --out
RECORD.json`. Runs as root (runc makes the namespaces and the device cgroup). Exit status: 0
when every check passed, 6 when one failed, 2 for a bad bundle, 8 when the runtime could not
run it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkbake import records
from sparkbake.core.smoke_record import SmokeReport, failed_names, parse_checks
from sparkbake.smoke.device_bundle import (
    PACKAGES,
    ROOT,
    Bundle,
    BundleError,
    unpack_bundle,
    unpack_deb,
)

__all__ = ["DeviceNode", "DeviceRecord", "driver_libraries", "main", "nvidia_devices",
           "runtime_config"]

# what libnvidia-container mounts for a compute workload (its "utility" and "compute"
# capabilities), of which the smoke's checks load libcuda (cuInit, the capability) and
# libnvidia-ml (through libcuda)
DRIVER_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1")
LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"
DEFAULT_DEVICES = ((1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2))
RUN_TIMEOUT = 600


@dataclass(frozen=True)
class DeviceNode:
    path: str
    major: int
    minor: int
    mode: int


def nvidia_devices(dev: Path = Path("/dev")) -> list[DeviceNode]:
    """The NVIDIA character devices the container gets: /dev/nvidia*, /dev/nvidia-caps/*."""
    paths = sorted([*dev.glob("nvidia*"), *dev.glob("nvidia-caps/*")])
    nodes = []
    for path in paths:
        info = path.stat()
        if stat.S_ISCHR(info.st_mode):
            nodes.append(DeviceNode(f"/dev/{path.relative_to(dev)}", os.major(info.st_rdev),
                                    os.minor(info.st_rdev), stat.S_IMODE(info.st_mode)))
    return nodes


def driver_libraries(ldconfig_output: str) -> dict[str, str]:
    """{soname: host file} for the driver libraries, from `ldconfig -p` (the first of each)."""
    found: dict[str, str] = {}
    for line in ldconfig_output.splitlines():
        name, _, path = line.strip().partition(" => ")
        soname = name.split(" ", 1)[0]
        if soname in DRIVER_LIBRARIES and soname not in found and "x86-64" in name:
            found[soname] = os.path.realpath(path.strip())
    return found


def runtime_config(bundle: Bundle, devices: list[DeviceNode],
                   libraries: dict[str, str]) -> dict[str, Any]:
    """The OCI runtime config: the checker as the process, no network (a new, empty network
    namespace, as the engine's --network none), the NVIDIA devices and driver libraries."""
    bind = ["rbind", "ro", "nosuid", "nodev"]
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "mode=1777"]},
        *({"destination": f"{LIBRARY_DIR}/{soname}", "type": "bind", "source": host,
           "options": bind} for soname, host in sorted(libraries.items())),
    ]
    allowed = [*DEFAULT_DEVICES, *((d.major, d.minor) for d in devices)]
    return {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0},
                    "args": list(bundle.checker), "env": list(bundle.env), "cwd": "/",
                    "noNewPrivileges": True},
        "root": {"path": ROOT, "readonly": False},
        "hostname": "sparkbake-smoke",
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": kind} for kind in ("pid", "network", "ipc", "uts", "mount")],
            "devices": [{"path": d.path, "type": "c", "major": d.major, "minor": d.minor,
                         "fileMode": d.mode, "uid": 0, "gid": 0} for d in devices],
            "resources": {"devices": [
                {"allow": False, "access": "rwm"},
                *({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}
                  for major, minor in allowed)]},
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def runtime_tools(folder: Path, bundle: Bundle) -> tuple[Path, dict[str, str]]:
    """runc from the bundle's packages, unpacked into folder: its path and the environment
    it runs with (its libraries first on the loader's path)."""
    tools = folder / "tools"
    for package in bundle.packages:
        unpack_deb(folder / PACKAGES / package.file, tools)
    runc = next((p for p in (tools / "usr/sbin/runc", tools / "usr/bin/runc") if p.is_file()),
                None)
    if runc is None:
        raise BundleError("the bundle's packages hold no runc",
                          "make the bundle again with `sparkbake device-bundle TAG`")
    folders = (tools / "usr/lib/x86_64-linux-gnu", tools / "lib/x86_64-linux-gnu")
    libraries = [str(p) for p in folders if p.is_dir()]
    return runc, {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(libraries)}


def run_in_bundle(folder: Path, runc: Path, env: dict[str, str]) -> tuple[
        subprocess.CompletedProcess[str], str]:
    """Run the bundle's process with runc, the container removed after; (what it did,
    runc's version line)."""
    version = subprocess.run([str(runc), "--version"], capture_output=True, text=True, env=env,
                             check=False)
    if version.returncode != 0:
        raise BundleError(f"runc from the bundle does not start: {version.stderr.strip()}",
                          "carry the runc package of a Debian release this machine's C library "
                          "runs", code=8)
    ident = f"sparkbake-smoke-{os.getpid()}"
    state = folder / "runc-state"
    command = [str(runc), "--root", str(state), "run", "--bundle", str(folder), ident]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False,
                              timeout=RUN_TIMEOUT)
    finally:
        subprocess.run([str(runc), "--root", str(state), "delete", "--force", ident],
                       capture_output=True, env=env, check=False)
    return done, version.stdout.splitlines()[0] if version.stdout else "runc"


def gpu_names() -> list[str]:
    """The GPUs the driver reports (/proc/driver/nvidia/gpus/*/information), by model."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        for line in info.read_text().splitlines():
            if line.startswith("Model:"):
                names.append(line.partition(":")[2].strip())
    return names


def driver_version() -> str:
    """The NVIDIA kernel module's version (/proc/driver/nvidia/version), e.g. 580.159.04;
    "" without one."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return ""
    found = re.search(r"\b\d+\.\d+(?:\.\d+)?\b", text)
    return found.group(0) if found else text.splitlines()[0]


@dataclass(frozen=True)
class DeviceRecord:
    """What the device smoke writes: where it ran, what the container was given, and the
    smoke record of the image."""

    devices: tuple[str, ...]  # the GPUs, by model
    driver: str
    runtime: str
    given: tuple[str, ...]  # the device nodes and driver libraries, host paths
    smoke: SmokeReport


def prepare(archive: Path, folder: Path, code: str | None) -> tuple[
        Bundle, Path, dict[str, str], tuple[str, ...]]:
    """The bundle unpacked in folder, runc from its packages, and the runtime config with the
    host's NVIDIA devices and driver libraries (code: Python the container runs instead of
    the checks);
    (the bundle, runc, its environment, what the container is given)."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout
    bundle = unpack_bundle(archive, folder)
    runc, env = runtime_tools(folder, bundle)
    devices, libraries = nvidia_devices(), driver_libraries(listing)
    config = runtime_config(bundle, devices, libraries)
    if code is not None:  # Python code in place of the checks, by the checker's interpreter
        config["process"]["args"] = [bundle.checker[0], "-c", code]
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    given = (*(d.path for d in devices), *(f"{host} as {name}" for name, host in libraries.items()))
    return bundle, runc, env, given


def smoke(archive: Path) -> DeviceRecord:
    with tempfile.TemporaryDirectory(prefix="sparkbake-oci-") as temp:
        bundle, runc, env, given = prepare(archive, Path(temp), None)
        done, runtime = run_in_bundle(Path(temp), runc, env)
    found = parse_checks(done.stdout)
    if found is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        remedy = ("the cut root lacks a file the checker needs (named above): make the bundle "
                  "again with `sparkbake device-bundle TAG`" if done.returncode == 127 else
                  "run as root on a machine whose kernel allows namespaces and cgroups")
        raise BundleError(f"the checker gave no result under runc (exit {done.returncode}): "
                          f"{last}", remedy, code=8)
    checks = tuple(found)
    report = SmokeReport(tag=bundle.tag, image=bundle.image, image_id=bundle.image_id,
                         inputs=bundle.inputs, suite=bundle.suite, gpu="require", model=None,
                         passed=not failed_names(checks), checks=checks,
                         time=datetime.now(UTC).isoformat(timespec="seconds"))
    return DeviceRecord(tuple(gpu_names()), driver_version(), runtime, given, report)


def run_python(archive: Path, code: str) -> int:
    """Python code in the bundle's container, as the checker would run: what a check sees."""
    with tempfile.TemporaryDirectory(prefix="sparkbake-oci-") as temp:
        _, runc, env, _ = prepare(archive, Path(temp), code)
        done, _ = run_in_bundle(Path(temp), runc, env)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkbake.smoke.oci_runtime",
                                     description="run a device bundle's smoke checks in runc")
    parser.add_argument("bundle", type=Path, help="the file `sparkbake device-bundle` wrote")
    parser.add_argument("--out", type=Path, help="write the record here (JSON)")
    parser.add_argument("--python", metavar="CODE",
                        help="run this Python code in the container instead of the checks")
    args = parser.parse_args(argv)
    try:
        if args.python is not None:
            return run_python(args.bundle, args.python)
        record = smoke(args.bundle)
    except BundleError as error:
        print(f"error: {error}\n  hint: {error.remedy}", file=sys.stderr)
        return error.code
    if args.out:
        args.out.write_text(json.dumps(records.to_json(record), indent=2) + "\n")
    report = record.smoke
    width = max((len(c.name) for c in report.checks), default=0)
    for check in report.checks:
        print(f"  {check.status:<7}  {check.name:<{width}}  {check.detail}")
    where = "; ".join([", ".join(record.devices) or "no GPU",
                       f"driver {record.driver}" if record.driver else "no NVIDIA driver"])
    outcome = "passed" if report.passed else f"failed: {', '.join(failed_names(report.checks))}"
    print(f"{report.tag}: {outcome} ({where}; {record.runtime})")
    return 0 if report.passed else 6


if __name__ == "__main__":
    sys.exit(main())
