"""In-image smoke checks of a sparkbake image. Standard library only (Python >= 3.10).

Usage: smoke_check.py [--root DIR] EXPECTED

EXPECTED is a JSON document (or the path of a file holding one) with what the image must
carry, as the host computed it: tag, inputs, upstream, series, cuda_arch, sm_arch, env,
patched_files = {"files": [{"path", "sha256" (null: deleted), "patch"}], "not_installed",
"problem"}, entrypoint = {"suite", "argv", "accept": [{"name", "env", "command"}],
"reject": [{"name", "env", "rules"}]}, jit_required (the image must carry a CUDA
toolchain), gpu = {"mode": "auto|require|skip", "unavailable": null or why no GPU can
be seen} and layer_model = {"config": the model's config.json, "path"} or {"none": why
none}. --root prefixes /opt/sparkbake and /opt/venv, so the checks can run against a fake
image root on a host. Prints ONE JSON
document on stdout, as its last line:
{"checks": [{"name", "status": "passed|failed|skipped", "detail", "seconds", "record"?}]}.
Exit status: 0 when no check failed, 1 when one did, 2 when EXPECTED is unreadable.
smoke_backends.py, smoke_common.py, smoke_entry.py, smoke_gpu.py, smoke_jit.py, smoke_kv.py,
smoke_layers.py, smoke_platform.py, smoke_roles.py and smoke_vllm.py lie beside this file.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smoke_backends import check_backend_capability
from smoke_common import (
    CheckFailed,
    CheckSkipped,
    Image,
    one_line,
    public_version,
    sha256_of,
    short,
    top_level_packages,
)
from smoke_entry import check_entrypoint_print, check_preflight_rejects
from smoke_gpu import check_gpu, check_gpu_capability, check_gpu_op
from smoke_jit import check_asked, check_jit_toolchain
from smoke_kv import check_kv_plan
from smoke_layers import check_layer_weights
from smoke_roles import check_node_roles
from smoke_vllm import check_vllm_serve_args

MANIFEST_KEYS = ("tag", "inputs", "upstream", "series", "cuda_arch", "env")


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


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_vllm_import(image: Image, expected: dict[str, Any]) -> str:
    """`import vllm` and its version: the upstream pin's when it is vllm from PyPI, else the
    version of the vllm wheel the manifest lists (a git or dir pin of a vLLM fork)."""
    pin = expected.get("upstream") or {}
    pinned = pin.get("kind") == "pypi" and canonical(str(pin.get("name"))) == "vllm"
    wheel = next((w for w in image.wheels() if canonical(str(w.get("name"))) == "vllm"), None)
    if not pinned and wheel is None:
        raise CheckSkipped(f"the upstream is a {pin.get('kind', '?')} pin, not vllm from PyPI, "
                           "and no vllm wheel is installed (wheels-import imports its wheels)")
    if pinned:
        want, source = str(pin["version"]), "the upstream pin"
    else:
        assert wheel is not None  # neither pinned nor a wheel was skipped above
        want = wheel_version(str(wheel.get("file"))) or "?"
        source = f"the wheel {wheel.get('file')}"
    try:
        installed = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError as exc:
        raise CheckFailed(f"vllm is not installed ({source} says {want})") from exc
    try:
        module = importlib.import_module("vllm")
    except Exception as exc:  # any import failure is the finding
        raise CheckFailed(f"import vllm failed: {one_line(exc)}") from exc
    version = str(getattr(module, "__version__", "none"))
    if public_version(installed) != public_version(want):
        raise CheckFailed(f"vllm {installed} is installed, {source} is {want}")
    if public_version(version) != public_version(want):
        raise CheckFailed(f"vllm.__version__ is {version}, {source} is {want}")
    return f"import vllm: {version} ({source}: {want})"


def check_patched_files(image: Image, expected: dict[str, Any]) -> str:
    """Each Python file the series patch, where it lands in site-packages, has the patched
    tree's sha256 (a deleted one is absent)."""
    if "patched_files" not in expected:
        raise CheckSkipped("not asked: the host gave no patched files to compare")
    spec = expected["patched_files"] or {}
    if spec.get("problem"):
        raise CheckFailed(str(spec["problem"]))
    files: list[dict[str, Any]] = spec.get("files", [])
    not_installed = ", ".join(spec.get("not_installed", []))
    if not files:
        raise CheckSkipped(spec.get("none") or "no patched Python file lands in site-packages"
                           + (f" (not installed: {not_installed})" if not_installed else ""))
    wrong = [problem for f in files if (problem := patched_file_problem(image, f))]
    if wrong:
        raise CheckFailed("; ".join(wrong))
    tail = f"; not installed by any wheel: {not_installed}" if not_installed else ""
    return (f"{len(files)} patched Python file(s) as in the patched tree: "
            f"{', '.join(f['path'] for f in files)}{tail}")


def patched_file_problem(image: Image, file: dict[str, Any]) -> str:
    relative, want, patch = str(file["path"]), file.get("sha256"), file.get("patch", "?")
    found = image.find_site_file(relative)
    if want is None:
        return f"{relative} is installed, but {patch} deletes it" if found else ""
    if found is None:
        return f"{relative} is not in site-packages (patched by {patch})"
    actual = sha256_of(found)
    if actual != want:
        return (f"{relative}: installed sha256 {actual[:12]} differs from the patched tree's "
                f"{str(want)[:12]} ({patch})")
    return ""


def check_kernels(image: Image, expected: dict[str, Any]) -> str:
    kernels = image.kernels()
    if not kernels:
        raise CheckSkipped("the manifest lists no kernels")
    sm_arch = str(expected["sm_arch"])
    # a CPU build's libraries carry no device code: any SASS (none) will do
    loadable = None if expected.get("device") == "cpu" else \
        set(expected.get("sass_loadable") or [sm_arch])
    other = set(expected.get("other_arch") or [])
    return "; ".join(check_kernel(image, kernel, sm_arch, loadable, other) for kernel in kernels)


def check_kernel(image: Image, kernel: dict[str, Any], sm_arch: str, loadable: set[str] | None,
                 other_arch: set[str]) -> str:
    """The installed library is the manifest's; unless declared for other devices (or built
    for the CPU: loadable None), it has SASS a device of sm_arch loads, and it loads (all
    but the GPU driver, without one)."""
    relative = str(kernel["path"])
    path = image.site_file(relative)
    recorded, actual = kernel.get("sha256"), sha256_of(path)
    if not recorded:
        raise CheckFailed(f"{relative}: the manifest records no sha256")
    if actual != recorded:
        raise CheckFailed(f"{relative}: sha256 {actual[:12]} differs from the manifest's "
                          f"{str(recorded)[:12]}")
    sass = list(kernel.get("sass", []))
    if relative in other_arch:
        return f"{relative} [{', '.join(sass)}: for other devices, sha256 only]"
    if loadable is not None and not loadable & set(sass):
        built = ", ".join(sass) or "nothing"
        raise CheckFailed(f"{relative}: no SASS for {sm_arch} (built for {built})")
    if loadable is None:  # the CPU's
        return f"{relative} [{load_alone(image, path)}]"
    try:
        ctypes.CDLL(str(path))
    except OSError as exc:
        missing = unresolved(image, path) if DRIVER in str(exc) and not has_driver() else None
        if missing != {DRIVER}:
            raise CheckFailed(f"{relative} does not load: {one_line(exc)}") from exc
        return f"{relative} [{', '.join(sass)}; every library it needs but {DRIVER}]"
    return f"{relative} [{', '.join(sass)}]"


DRIVER = "libcuda.so.1"  # the GPU driver's library: the NVIDIA container runtime mounts it
LOAD = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"


def load_alone(image: Image, path: Path) -> str:
    """The library loaded in a process of its own, the image's library folders searched as
    once torch is imported: a CPU build's ISA variants (`_C`, `_C_AVX512`, `_C_AVX2`) each
    register torch's `_C` namespace, which torch aborts on the second time in one process
    (vLLM loads the one its CPU runs)."""
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(library_folders(image))}
    done = subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True,
                          text=True, env=env, check=False, timeout=300)
    if done.returncode == 0:
        return "loads"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
    raise CheckFailed(f"{path.name} does not load ({how}): "
                      f"{lines[-1].strip() if lines else 'no output'}")


def has_driver() -> bool:
    try:
        ctypes.CDLL(DRIVER)
    except OSError:
        return False
    return True


def library_folders(image: Image) -> list[str]:
    """The image's own library folders (torch's, nvidia's wheels), which its loader finds
    once torch is imported."""
    return [str(p) for site in image.site_dirs
            for p in [site / "torch" / "lib", *sorted(site.glob("nvidia/*/lib"))]
            if p.is_dir()]


def unresolved(image: Image, library: Path) -> set[str] | None:
    """What `ldd` cannot find for library, with the image's own library folders (torch's,
    nvidia's wheels) searched as its loader would find them once torch is imported."""
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(library_folders(image))}
    try:
        listing = subprocess.run(["ldd", str(library)], capture_output=True, text=True,
                                 env=env, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {line.split()[0] for line in listing.stdout.splitlines() if "not found" in line}


Check = Callable[[Image, dict[str, Any]], str | tuple[str, dict[str, Any]]]
CHECKS: list[tuple[str, Check]] = [
    ("manifest", check_manifest),
    ("env-defaults", check_env_defaults),
    ("wheels-import", check_wheels_import),  # before kernels: imports load their libraries
    ("vllm-import", check_vllm_import),
    ("patched-files", check_patched_files),
    ("kernels", check_kernels),
    ("asked", check_asked),
    ("jit-toolchain", check_jit_toolchain),
    ("entrypoint-print", check_entrypoint_print),
    ("vllm-serve-args", check_vllm_serve_args),
    ("node-roles", check_node_roles),
    ("backend-capability", check_backend_capability),
    ("layer-weights", check_layer_weights),
    ("kv-plan", check_kv_plan),
    ("preflight-rejects", check_preflight_rejects),
    ("gpu", check_gpu),
    ("gpu-capability", check_gpu_capability),
    ("gpu-op", check_gpu_op),
]


def run_check(name: str, check: Check, image: Image, expected: dict[str, Any]) -> dict[str, Any]:
    """A check's outcome; a check may return (detail, record) to keep what it found."""
    start, record = time.monotonic(), None
    try:
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON document
            returned = check(image, expected)
        status, detail = "passed", returned
        if isinstance(returned, tuple):
            detail, record = returned
    except CheckSkipped as exc:
        status, detail = "skipped", str(exc)
    except CheckFailed as exc:
        status, detail, record = "failed", str(exc), exc.record
    except Exception as exc:  # a broken check is a failed check, never a crash
        status, detail = "failed", one_line(exc)
    seconds = round(time.monotonic() - start, 3)
    result = {"name": name, "status": status, "detail": detail, "seconds": seconds}
    return {**result, "record": record} if record is not None else result


def read_expected(argument: str) -> dict[str, Any]:
    text = argument if argument.lstrip().startswith("{") else Path(argument).read_text()
    expected = json.loads(text)
    if not isinstance(expected, dict):
        raise ValueError("expected values must be a JSON object")
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
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
