"""In-image smoke checks of a sparkbake image. Standard library only (Python 3.11).

Usage: smoke_check.py [--root DIR] EXPECTED

EXPECTED is a JSON document (or the path of a file holding one) with the values the image
must carry: tag, inputs, upstream, series, cuda_arch, sm_arch, env and
gpu = {"mode": "auto|require|skip", "unavailable": null or why no GPU can be seen}.
--root prefixes /opt/sparkbake and /opt/venv, so the checks can run against a fake image
root on a host. Prints ONE JSON document on stdout, as its last line:
{"checks": [{"name", "status": "passed|failed|skipped", "detail", "seconds"}]}.
Exit status: 0 when no check failed, 1 when one did, 2 when EXPECTED is unreadable.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import importlib
import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MANIFEST = "opt/sparkbake/manifest.json"
VENV = "opt/venv"
MANIFEST_KEYS = ("tag", "inputs", "upstream", "series", "cuda_arch", "env")
SHORT = 72


class CheckFailed(Exception):
    """A check found the image wrong; the message is the one-line detail."""


class CheckSkipped(Exception):
    """A check does not apply; the message says why."""


class Image:
    """The image under check: its root, its manifest (read once) and its site-packages."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifest_path = root / MANIFEST
        self.site_dirs = sorted((root / VENV / "lib").glob("python3*/site-packages"))
        self._manifest: dict[str, Any] | None = None

    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            if not self.manifest_path.is_file():
                raise CheckFailed(f"{self.manifest_path} does not exist")
            loaded = json.loads(self.manifest_path.read_text())
            if not isinstance(loaded, dict):
                raise CheckFailed(f"{self.manifest_path} is not a JSON object")
            self._manifest = loaded
        return self._manifest

    def wheels(self) -> list[dict[str, Any]]:
        wheels = self.manifest().get("wheels", [])
        return list(wheels) if isinstance(wheels, list) else []

    def kernels(self) -> list[dict[str, Any]]:
        return [kernel for wheel in self.wheels() for kernel in wheel.get("kernels", [])]

    def site_file(self, relative: str) -> Path:
        """A file relative to site-packages: the first site dir that has it."""
        for site in self.site_dirs:
            if (site / relative).exists():
                return site / relative
        where = ", ".join(str(s) for s in self.site_dirs) or f"{self.root / VENV}/lib/python3*"
        raise CheckFailed(f"{relative} is not in site-packages ({where})")


def short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= SHORT else text[: SHORT - 3] + "..."


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- the checks: each returns its detail, or raises CheckFailed / CheckSkipped ---------------


def check_manifest(image: Image, expected: dict[str, Any]) -> str:
    manifest = image.manifest()
    actual = comparable_manifest(manifest, expected)
    wrong = [
        f"{key}: image has {short(actual.get(key))}, expected {short(expected.get(key))}"
        for key in MANIFEST_KEYS
        if actual.get(key) != expected.get(key)
    ]
    if wrong:
        raise CheckFailed("; ".join(wrong))
    return f"tag {manifest['tag']}, inputs {str(manifest['inputs'])[:12]}"


def comparable_manifest(manifest: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """The manifest cut to what is expected: series to name + sha256, upstream to the pin's
    keys (the manifest may add more, such as the upstream's key in versions.yaml)."""
    actual = dict(manifest)
    actual["series"] = [
        {"name": s.get("name"), "sha256": s.get("sha256")} for s in manifest.get("series", [])
    ]
    upstream, pin = manifest.get("upstream"), expected.get("upstream")
    if isinstance(upstream, dict) and isinstance(pin, dict):
        actual["upstream"] = {key: upstream.get(key) for key in pin}
    return actual


def check_env_defaults(image: Image, expected: dict[str, Any]) -> str:
    wanted: dict[str, str] = expected.get("env", {})
    wrong = []
    for name, value in sorted(wanted.items()):
        actual = os.environ.get(name)
        if actual is None:
            wrong.append(f"{name} is unset, expected {value!r}")
        elif actual != value:
            wrong.append(f"{name}={actual!r}, expected {value!r}")
    if wrong:
        raise CheckFailed("; ".join(wrong))
    return f"{len(wanted)} variable(s) set" if wanted else "the tag sets no env defaults"


def check_wheels_import(image: Image, expected: dict[str, Any]) -> str:
    wheels = image.wheels()
    if not wheels:
        raise CheckSkipped("the manifest lists no wheels")
    return "; ".join(import_wheel(wheel) for wheel in wheels)


def import_wheel(wheel: dict[str, Any]) -> str:
    name = str(wheel.get("name") or wheel["file"].split("-")[0])
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise CheckFailed(f"{name} is not installed (wheel {wheel.get('file')})") from exc
    built = wheel_version(str(wheel.get("file", "")))
    if built is not None and same_version(dist.version) != same_version(built):
        raise CheckFailed(f"{name} {dist.version} is installed, the wheel is {built}")
    packages = top_level_packages(dist)
    for package in packages:
        try:
            importlib.import_module(package)
        except Exception as exc:  # any import failure is the finding
            raise CheckFailed(f"import {package} (from {name}) failed: {one_line(exc)}") from exc
    return f"{name} {dist.version} ({', '.join(packages) or 'no packages'})"


def wheel_version(file_name: str) -> str | None:
    """The version in a wheel file name `{dist}-{version}(-{build})?-{py}-{abi}-{plat}.whl`."""
    parts = file_name.removesuffix(".whl").split("-")
    return parts[1] if file_name.endswith(".whl") and len(parts) >= 5 else None


def same_version(version: str) -> str:
    """Enough of PEP 440 normalization to compare a file name's version with METADATA's."""
    return version.lower().replace("-", ".").replace("_", ".")


def top_level_packages(dist: importlib.metadata.Distribution) -> list[str]:
    """Import names of a distribution: top_level.txt, else the first parts of RECORD paths."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return sorted({line.strip() for line in listed.splitlines() if line.strip()})
    names = set()
    for file in dist.files or []:
        first = file.parts[0]
        in_package = len(file.parts) > 1 and not first.endswith((".dist-info", ".data"))
        if in_package and first.isidentifier():
            names.add(first)
        elif len(file.parts) == 1 and file.suffix in (".py", ".so") and first != "__init__.py":
            names.add(first.split(".")[0])
    return sorted(n for n in names if n != "__pycache__")


def check_kernels(image: Image, expected: dict[str, Any]) -> str:
    kernels = image.kernels()
    if not kernels:
        raise CheckSkipped("the manifest lists no kernels")
    sm_arch = str(expected["sm_arch"])
    return "; ".join(check_kernel(image, kernel, sm_arch) for kernel in kernels)


def check_kernel(image: Image, kernel: dict[str, Any], sm_arch: str) -> str:
    relative = str(kernel["path"])
    path = image.site_file(relative)
    recorded, actual = kernel.get("sha256"), sha256_of(path)
    if not recorded:
        raise CheckFailed(f"{relative}: the manifest records no sha256")
    if actual != recorded:
        raise CheckFailed(f"{relative}: sha256 {actual[:12]} differs from the manifest's "
                          f"{str(recorded)[:12]}")
    sass = list(kernel.get("sass", []))
    if sm_arch not in sass:
        built = ", ".join(sass) or "nothing"
        raise CheckFailed(f"{relative}: no SASS for {sm_arch} (built for {built})")
    try:
        ctypes.CDLL(str(path))
    except OSError as exc:
        raise CheckFailed(f"{relative} does not load: {one_line(exc)}") from exc
    return f"{relative} [{', '.join(sass)}]"


def check_gpu(image: Image, expected: dict[str, Any]) -> str:
    gpu = expected.get("gpu") or {}
    mode = gpu.get("mode", "auto")
    if mode == "skip":
        raise CheckSkipped("not asked for (--gpu skip)")
    count, how = device_count(image, gpu.get("unavailable"))
    if count > 0:
        return f"{count} GPU(s) visible ({how})"
    reason = f"no GPU visible: {how}"
    if mode == "require":
        raise CheckFailed(f"{reason} (--gpu require)")
    raise CheckSkipped(reason)


def device_count(image: Image, unavailable: str | None) -> tuple[int, str]:
    """How many GPUs the image sees, and through what (or why none)."""
    if unavailable:
        return 0, unavailable
    for kernel in image.kernels():
        library = ctypes.CDLL(str(image.site_file(str(kernel["path"]))))
        if hasattr(library, "sparkbake_device_count"):
            library.sparkbake_device_count.restype = ctypes.c_int
            count = int(library.sparkbake_device_count())
            return count, f"sparkbake_device_count() in {kernel['path']} returned {count}"
    return driver_device_count()


def driver_device_count() -> tuple[int, str]:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0, "libcuda.so.1 cannot be loaded (no NVIDIA driver in the container)"
    status = int(cuda.cuInit(0))
    if status != 0:
        return 0, f"cuInit failed with CUDA error {status}"
    count = ctypes.c_int(0)
    status = int(cuda.cuDeviceGetCount(ctypes.byref(count)))
    if status != 0:
        return 0, f"cuDeviceGetCount failed with CUDA error {status}"
    return count.value, f"libcuda reports {count.value} device(s)"


CHECKS: list[tuple[str, Callable[[Image, dict[str, Any]], str]]] = [
    ("manifest", check_manifest),
    ("env-defaults", check_env_defaults),
    ("wheels-import", check_wheels_import),  # before kernels: imports load their libraries
    ("kernels", check_kernels),
    ("gpu", check_gpu),
]


def run_check(name: str, check: Callable[[Image, dict[str, Any]], str], image: Image,
              expected: dict[str, Any]) -> dict[str, Any]:
    start = time.monotonic()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON document
            status, detail = "passed", check(image, expected)
    except CheckSkipped as exc:
        status, detail = "skipped", str(exc)
    except CheckFailed as exc:
        status, detail = "failed", str(exc)
    except Exception as exc:  # a broken check is a failed check, never a crash
        status, detail = "failed", one_line(exc)
    seconds = round(time.monotonic() - start, 3)
    return {"name": name, "status": status, "detail": detail, "seconds": seconds}


def read_expected(argument: str) -> dict[str, Any]:
    text = argument if argument.lstrip().startswith("{") else Path(argument).read_text()
    expected = json.loads(text)
    if not isinstance(expected, dict):
        raise ValueError("expected values must be a JSON object")
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/"),
                        help="prefix of /opt/sparkbake and /opt/venv (default: /)")
    parser.add_argument("expected", help="JSON of the expected values, or a file holding it")
    args = parser.parse_args(argv)
    try:
        expected = read_expected(args.expected)
    except (OSError, ValueError) as exc:
        print(f"smoke_check: cannot read the expected values: {one_line(exc)}", file=sys.stderr)
        return 2
    image = Image(args.root)
    for site in reversed(image.site_dirs):
        if str(site) not in sys.path:
            sys.path.insert(0, str(site))
    checks = [run_check(name, check, image, expected) for name, check in CHECKS]
    sys.stderr.flush()
    print(json.dumps({"checks": checks}), flush=True)
    return 1 if any(c["status"] == "failed" for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
