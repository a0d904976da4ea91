"""The sources lock reaches CMake whatever the build driver passes: tests/data/cmake-selfdriven
runs `cmake` itself with its own toolchain file and never reads CMAKE_ARGS, and declares two
dependencies (tinyconf with SOURCE_SUBDIR). Locked, then the servers' tag and branch move; the
offline builder compiles the locked commits. A driver that escapes the lock is named."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.config.settings import Settings
from sparkbake.fetch import thirdparty
from tests.conftest import DATA, Project, copy_project, plain_console, versions_yaml
from tests.gitdaemon import Daemon, git, git_daemon
from tests.integration.test_thirdparty import BASES, BUILDER_LOCK

pytestmark = pytest.mark.docker

TAG = "selfdriven-fixture"
LOCK = Path("locks/sources/selfdriven.json")
MARKER = b"tinydep value 4242 conf 77 scale 3"  # both dependencies and the own toolchain


def selfdriven_project(root: Path, daemon: Daemon) -> Project:
    project = copy_project(root)
    project.config_path.write_text(versions_yaml(
        repository="localhost:5000/sparkbake-selfdriven", bases=BASES,
        upstreams="  selfdriven:\n    dir: cmake-selfdriven\n    source_date_epoch: 1735689600\n",
        tags=f"  {TAG}:\n    upstream: selfdriven\n    series: []\n"))
    cmakelists = project.root / "cmake-selfdriven" / "CMakeLists.txt"
    cmakelists.write_text(cmakelists.read_text().replace("127.0.0.1:9418",
                                                         f"127.0.0.1:{daemon.port}"))
    shutil.copy(DATA / BUILDER_LOCK, project.root / BUILDER_LOCK)
    return project


def move(daemon: Daemon, name: str, path: str, text: str, ref: str) -> None:
    """A new commit on the server's repository name, and ref (a branch or tag) moved to it."""
    work = daemon.base.parent / "work" / name
    (work / path).write_text(text)
    git(work, "commit", "-qam", "moved")
    if ref.startswith("v"):
        git(work, "tag", "-f", "-a", ref, "-m", "moved")
    git(work, "push", "-q", "-f", str(daemon.base / name), "HEAD:refs/heads/main",
        *([f"refs/tags/{ref}"] if ref.startswith("v") else []))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, dict[str, str]]]:
    with git_daemon(tmp_path_factory.mktemp("git")) as daemon:
        commits = {"tinydep": daemon.publish("tinydep.git", DATA / "tinydep"),
                   "tinyconf": daemon.publish("tinyconf.git", DATA / "tinyconf",
                                              tags=("v1.0",))}
        yield daemon, commits


@pytest.fixture(scope="module")
def built(served: tuple[Daemon, dict[str, str]], debian_base: str,
          tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Locked, then tinyconf's tag and tinydep's branch moved on the server; then built."""
    daemon, _ = served
    project = selfdriven_project(tmp_path_factory.mktemp("selfdriven") / "project", daemon)
    loaded = project.config()
    thirdparty.lock(loaded, loaded.tag(TAG), project.root / "cmake-selfdriven",
                    Settings.of_process(), console=plain_console())
    move(daemon, "tinyconf.git", "cmake/CMakeLists.txt",
         "set_property(GLOBAL PROPERTY TINYCONF_VALUE 99)\n", "v1.0")
    move(daemon, "tinydep.git", "include/tinydep.h",
         '#define TINYDEP_VALUE 1\n#define TINYDEP_MARKER "moved"\n', "main")
    assert project.sparkbake("wheels", TAG) == 0
    return project


def test_the_lock_pins_the_tag_and_the_branch_of_both_declarations(
        built: Project, served: tuple[Daemon, dict[str, str]]) -> None:
    entries = {e["name"]: e for e in json.loads((built.root / LOCK).read_text())["sources"]}
    assert {name: (e["ref"], e["pin"]) for name, e in entries.items()} == {
        "tinyconf": ("v1.0", served[1]["tinyconf"]), "tinydep": ("main", served[1]["tinydep"])}


def test_a_driver_with_its_own_cmake_command_and_toolchain_builds_the_locked_commits(
        built: Project) -> None:
    folder = built.root / "wheels" / built.plan(TAG).wheels_key
    [wheel] = json.loads((folder / "wheels.json").read_text())["wheels"]
    [kernel] = wheel["kernels"]
    with zipfile.ZipFile(folder / wheel["file"]) as archive:
        library = archive.read(kernel["path"])
    assert MARKER in library  # not the moved tag's 99 nor the moved branch's marker
    log = built.log(TAG, "wheels")
    assert "sparkbake cmake: the sources lock pre-loaded (-C /build/sparkbake-sources.cmake)" \
        in log
    assert 'set(FETCHCONTENT_SOURCE_DIR_TINYCONF "/thirdparty/tinyconf"' in log
    [configure] = [line for line in log.splitlines() if line.strip().startswith("+ cmake -S ")]
    assert "-DCMAKE_TOOLCHAIN_FILE=" in configure and "FETCHCONTENT" not in configure


def test_a_driver_that_escapes_the_lock_is_named_with_the_declaration_and_why(
        built: Project, served: tuple[Daemon, dict[str, str]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    project = selfdriven_project(tmp_path / "escaping", served[0])
    shutil.copytree(built.root / "locks" / "sources", project.root / "locks" / "sources")
    setup = project.root / "cmake-selfdriven" / "setup.py"
    # cmake by its full path, with the project's own toolchain file: nothing of the lock's
    setup.write_text(setup.read_text().replace('CMAKE = "cmake"',
                                               'CMAKE = "/opt/builder/bin/cmake"'))
    lines = (project.root / "cmake-selfdriven" / "CMakeLists.txt").read_text().splitlines()
    line = lines.index("FetchContent_Declare(") + 1
    capsys.readouterr()
    assert project.sparkbake("wheels", TAG) == 4
    err = capsys.readouterr().err
    assert f"CMakeLists.txt:{line}: FetchContent tinydep ({served[0].url('tinydep.git')}) " \
           "tried to download; the sources lock had it at /thirdparty/tinydep\n" \
           "  not used: CMake ran without the builder's cmake (called by another path) and " \
           "with a toolchain file of its own, which takes the place of CMAKE_TOOLCHAIN_FILE" \
           in err
    assert "run `cmake` from PATH in the build driver, or include " \
           "$ENV{SPARKBAKE_SOURCES_CMAKE} in its toolchain file (a patch)" in err
