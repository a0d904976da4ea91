"""images/farm_sccache.py, the `sccache` a farm builder runs first, as a process: a unit that
fails through the farm (sccache's exit 254 when a server's compiler is killed) runs again
through the builder's farm-less sccache server; one that fails there too fails. The sccache
behind it is a stand-in script: it fails while the farm is configured."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbake import resources

# fails with sccache's 254 through the farm (its port is not the farm-less one), and then
# with 1 as well when FAIL_HERE is set; records each call
STAND_IN = """#!/bin/sh
echo "$SCCACHE_SERVER_PORT $SCCACHE_CONF $*" >> "$CALLS"
if [ "$SCCACHE_SERVER_PORT" != 4228 ]; then exit 254; fi
if [ -n "$FAIL_HERE" ]; then exit 1; fi
exit 0
"""


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """bin/ with the wrapper first, real/ with the stand-in sccache after it."""
    wrapper, real = tmp_path / "bin", tmp_path / "real"
    wrapper.mkdir()
    real.mkdir()
    shutil.copy(resources.path("farm_sccache.py"), wrapper / "sccache")
    (real / "sccache").write_text(STAND_IN)
    (real / "sccache").chmod(0o755)
    return wrapper, real


def run(folders: tuple[Path, Path], tmp_path: Path, *args: str,
        **environ: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    wrapper, real = folders
    calls = tmp_path / "calls"
    env = {"PATH": f"{wrapper}{os.pathsep}{real}{os.pathsep}/usr/bin:/bin",
           "CALLS": str(calls), "SPARKBAKE_FARM": "1", "SCCACHE_CONF": "/farm/client.toml",
           "SPARKBAKE_NO_FARM_CONF": str(tmp_path / "no-farm.toml"), **environ}
    done = subprocess.run([sys.executable, str(wrapper / "sccache"), *args], env=env,
                          capture_output=True, text=True, check=False)
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_a_unit_failed_through_the_farm_is_compiled_here(
        folders: tuple[Path, Path], tmp_path: Path) -> None:
    done, calls = run(folders, tmp_path, "nvcc", "-c", "a.cu", "-o", "a.o")
    assert done.returncode == 0
    assert done.stderr == ("sparkbake sccache: nvcc failed through the compile farm "
                           "(exit 254); compiling it here\n")
    assert calls == [" /farm/client.toml nvcc -c a.cu -o a.o",
                     f"4228 {tmp_path / 'no-farm.toml'} nvcc -c a.cu -o a.o"]
    assert (tmp_path / "no-farm.toml").read_text().startswith("#")  # no [dist]


def test_a_unit_that_fails_here_too_fails(folders: tuple[Path, Path], tmp_path: Path) -> None:
    done, calls = run(folders, tmp_path, "g++", "-c", "a.cpp", FAIL_HERE="1")
    assert done.returncode == 1
    assert len(calls) == 2


def test_sccache_commands_and_a_build_without_the_farm_are_passed_through(
        folders: tuple[Path, Path], tmp_path: Path) -> None:
    done, calls = run(folders, tmp_path, "--show-stats")
    assert done.returncode == 254 and calls == [" /farm/client.toml --show-stats"]
    done, calls = run(folders, tmp_path, "gcc", "-c", "b.c", SPARKBAKE_FARM="0")
    assert done.returncode == 254 and done.stderr == ""
    assert calls[-1] == " /farm/client.toml gcc -c b.c"
