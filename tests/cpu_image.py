"""The cpu-3.73 image, built (or found built) with oneDNN served from the mirror on 127.0.0.1:
what the tests that start vLLM run (a cold compile where the compile cache is empty)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.gitdaemon import git_daemon

REPO = Path(__file__).resolve().parents[1]
# the mirrors beside the checkout, or where SPARKBAKE_MIRRORS says (as scripts/git-mirrors)
MIRRORS = Path(os.environ.get("SPARKBAKE_MIRRORS") or REPO.parent / "shared" / "mirrors")
MIRROR = MIRRORS / "oneDNN-v3.13.git.tar.gz"
TAG = "cpu-3.73"


def sparkbake(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkbake", *args], cwd=REPO, text=True,
                          capture_output=True, env={**os.environ, **(env or {})}, check=False)


def build(mirror_root: Path) -> str:
    """build-image of the tag with GitHub's URLs mapped to a git daemon serving the mirror;
    the tag's name. AssertionError with the output's end when the build fails."""
    with git_daemon(mirror_root) as daemon:
        owner = daemon.base / "oneapi-src"
        owner.mkdir(exist_ok=True)
        if not (owner / "oneDNN.git").exists():
            with tarfile.open(MIRROR) as archive:
                archive.extractall(owner, filter="data")
        mapped = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{daemon.url('')}.insteadOf",
                  "GIT_CONFIG_VALUE_0": "https://github.com/"}
        done = sparkbake("build-image", TAG, env=mapped)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return TAG
