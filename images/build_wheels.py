"""Runs inside the sparkbake builder: build the tree's wheels, then list each kernel's SASS.

/src is the patched tree (read-only), /out receives the wheels and build-report.json.
Standard library only: this file is copied into the builder image.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SOURCE = Path("/src")
OUTPUT = Path("/out")
WORK = Path("/build/src")  # a fixed path, so build paths are the same on every run
CUBIN = re.compile(r"\.(sm_\d+[af]?)\.cubin")


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    shutil.copytree(SOURCE, WORK, symlinks=True)
    normalize_modes(WORK)
    cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
           "--no-index", "-w", str(OUTPUT), str(WORK)]
    print("+ " + " ".join(cmd), flush=True)
    status = subprocess.run(cmd, check=False).returncode
    if status != 0:
        return status
    wheels = [describe(wheel) for wheel in sorted(OUTPUT.glob("*.whl"))]
    report = {"wheels": wheels, "nvcc": nvcc_version()}
    (OUTPUT / "build-report.json").write_text(json.dumps(report, indent=2))
    return 0


def normalize_modes(root: Path) -> None:
    """Modes as git records them (0644, or 0755 when executable): the host's umask, which
    made the tree, must not reach the wheels (zip entries carry file modes)."""
    for path in root.rglob("*"):
        if not path.is_symlink():
            executable = path.is_dir() or path.stat().st_mode & 0o111
            path.chmod(0o755 if executable else 0o644)


def describe(wheel: Path) -> dict[str, object]:
    """The wheel's shared libraries that carry device code, each with its SASS arches."""
    kernels = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as scratch:
        for member in archive.namelist():
            if not re.search(r"\.so(\.\d+)*$", member):
                continue
            extracted = archive.extract(member, scratch)
            sass = list_sass(Path(extracted))
            if sass is not None:
                digest = hashlib.sha256(archive.read(member)).hexdigest()
                kernels.append({"path": member, "sha256": digest, "sass": sass})
    return {"file": wheel.name, "kernels": kernels}


def list_sass(library: Path) -> list[str] | None:
    """SASS arches in library per cuobjdump; None when it holds no device code."""
    listing = subprocess.run(["cuobjdump", "--list-elf", str(library)],
                             capture_output=True, text=True, check=False)
    if listing.returncode != 0:
        if "does not contain device code" in listing.stderr + listing.stdout:
            return None
        print(f"cuobjdump failed on {library.name}: {listing.stderr.strip()}", flush=True)
        sys.exit(3)
    return sorted(set(CUBIN.findall(listing.stdout)))


def nvcc_version() -> str:
    found = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=False)
    return found.stdout.strip().splitlines()[-1] if found.returncode == 0 else "none"


if __name__ == "__main__":
    sys.exit(main())
