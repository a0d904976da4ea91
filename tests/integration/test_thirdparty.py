"""Third-party CMake sources for real: a git daemon on 127.0.0.1 serves tinydep, which the
CMake fixture (tests/data/cmake-upstream) declares with FetchContent. lock pins it, fetch
verifies it, the builder compiles offline against it; each refusal has its exit code."""

from __future__ import annotations

import difflib
import json
import re
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.config.settings import Settings
from sparkbake.core.stages import Stage
from sparkbake.fetch import sourcelock, thirdparty
from sparkbake.hashing import file_sha256, tree_hash
from sparkbake.oci import docker_engine, image_layout
from sparkbake.pipeline import build
from sparkbake.run import Run
from tests.conftest import DATA, Project, copy_project, plain_console, versions_yaml
from tests.farm_down import down_leaving_nothing
from tests.gitdaemon import Daemon, git, git_daemon
from tests.integration.test_pipeline import add_patch, read_from_image

pytestmark = pytest.mark.docker

TAG = "cmake-fixture"
BASES = """\
  debian:
    debootstrap: {suite: bookworm, variant: minbase, packages: [python3, python3-venv, g++]}
    python: "3.11"
"""
UPSTREAMS = """\
  tinycmake:
    dir: cmake-upstream
    source_date_epoch: 1735689600
"""
# A builder base no engine can pull (nothing listens on its registry's port): a build that
# reaches the builder base stops there (exit 8) and names it; one that stops before does not.
UNPULLABLE = "127.0.0.1:9/sparkbake-never-pulled:1@sha256:" + "0" * 64
CUDA_BASE = f'  cuda:\n    image: {UNPULLABLE}\n    python: "3.11"\n'
LOCK = Path("locks/sources/tinycmake.json")
BUILDER_LOCK = Path("locks/debian.amd64.txt")
MARKER = b"tinydep value 4242"


def cmake_project(root: Path, daemon: Daemon, series: str = "",
                  builder: str = "debian") -> Project:
    """tests/data copied, with a versions.yaml of the CMake fixture whose dependency URL
    names the daemon's port (builder: `cuda` for the unpullable one)."""
    project = copy_project(root)
    project.config_path.write_text(versions_yaml(
        repository="localhost:5000/sparkbake-cmake", bases=BASES + CUDA_BASE,
        upstreams=UPSTREAMS, builder=builder,
        tags=f"  {TAG}:\n    upstream: tinycmake\n    series: [{series}]\n"))
    cmakelists = project.root / "cmake-upstream" / "CMakeLists.txt"
    cmakelists.write_text(cmakelists.read_text().replace("127.0.0.1:9418",
                                                         f"127.0.0.1:{daemon.port}"))
    return project


def lock_sources(project: Project) -> Path | None:
    """The sources lock through the library (no pip resolution): what `lock` does first."""
    loaded = project.config()
    tag = loaded.tag(TAG)
    return thirdparty.lock(loaded, tag, project.root / "cmake-upstream",
                           Settings.of_process(), console=plain_console())


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str]]:
    with git_daemon(tmp_path_factory.mktemp("git")) as served:
        yield served, served.publish("tinydep.git", DATA / "tinydep")


@pytest.fixture(scope="module")
def built(daemon: tuple[Daemon, str], debian_base: str,
          tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The CMake fixture locked with `lock` and built with `build-image`, once."""
    project = cmake_project(tmp_path_factory.mktemp("cmake") / "project", daemon[0])
    assert project.sparkbake("lock", TAG) == 0
    # the committed builder lock, as every other test's builder image has it
    shutil.copy(DATA / BUILDER_LOCK, project.root / BUILDER_LOCK)
    assert project.sparkbake("build-image", TAG) == 0
    return project


def test_lock_pins_the_branch_to_its_commit_and_the_fetched_tree(
        built: Project, daemon: tuple[Daemon, str]) -> None:
    served, commit = daemon
    text = (built.root / LOCK).read_text()
    data = json.loads(text)
    [entry] = data["sources"]
    assert entry == {
        "name": "tinydep", "kind": "git", "url": served.url("tinydep.git"), "ref": "main",
        "pin": commit, "submodules": "all", "env": ["TINYDEP_SRC_DIR"], "form": "declare",
        "tree": tree_hash(DATA / "tinydep"), "declared": "CMakeLists.txt:15"}
    locked = sourcelock.read(built.root / LOCK)
    assert locked is not None
    sourcelock.write(built.root / "again.json", locked)
    assert (built.root / "again.json").read_text() == text  # stable JSON


def test_the_offline_build_compiles_the_dependency_value_into_the_library(
        built: Project, docker_client: docker_engine.Client) -> None:
    plan = built.plan(TAG)
    folder = built.root / "wheels" / plan.wheels_key
    report = json.loads((folder / "wheels.json").read_text())
    [wheel] = report["wheels"]
    [kernel] = wheel["kernels"]
    assert kernel["sass"] == ["sm_121a"]
    with zipfile.ZipFile(folder / wheel["file"]) as archive:
        assert MARKER in archive.read(kernel["path"])
    log = built.log(TAG, "wheels")
    assert "set(FETCHCONTENT_FULLY_DISCONNECTED ON CACHE BOOL" in log
    assert 'set(FETCHCONTENT_SOURCE_DIR_TINYDEP "/thirdparty/tinydep" CACHE PATH' in log
    locked = json.loads((built.root / LOCK).read_text())["sources"][0]
    recorded = {k: locked[k] for k in ("name", "url", "ref", "pin", "tree")}
    assert report["thirdparty"] == [recorded]
    manifest = json.loads(read_from_image(docker_client, plan.tag.image_ref,
                                          "/opt/sparkbake/manifest.json"))
    assert manifest["thirdparty"] == [recorded]
    assert plan.stage_inputs[Stage.KERNELS]["third-party sources"] == [
        f"tinydep@{locked['pin'][:16]}:{locked['tree'][:16]}"]


def test_plan_lists_the_locked_sources(built: Project,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert built.sparkbake("plan", TAG) == 0
    assert "tinycmake (dir) + 1 third-party sources (locked)" in capsys.readouterr().out
    assert built.sparkbake("plan", TAG, "--json") == 0
    assert json.loads(capsys.readouterr().out)["sources"][0].startswith("tinydep@")


def test_a_second_clean_build_gives_the_same_wheel(
        built: Project, daemon: tuple[Daemon, str], tmp_path: Path) -> None:
    again = cmake_project(tmp_path / "again", daemon[0])
    (again.root / LOCK).parent.mkdir(parents=True)
    shutil.copy(built.root / LOCK, again.root / LOCK)
    assert again.sparkbake("wheels", TAG) == 0
    first = json.loads((built.root / "wheels" / built.plan(TAG).wheels_key /
                        "wheels.json").read_text())["wheels"]
    second = json.loads((again.root / "wheels" / again.plan(TAG).wheels_key /
                         "wheels.json").read_text())["wheels"]
    assert [w["sha256"] for w in second] == [w["sha256"] for w in first]
    assert (again.root / "build" / "thirdparty" / daemon[1] / "tree" / "include").is_dir()


def image_digest(project: Project) -> str:
    found = image_layout.Layout(project.root / "build" / "oci", plain_console()).find(TAG)
    assert found is not None
    return found.digest


@pytest.mark.required("prove-compile-cache")
def test_the_cmake_cuda_project_built_through_the_compile_farm_is_the_local_image(
        built: Project, daemon: tuple[Daemon, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A vLLM-style build (CMake, a .cu through nvcc, a FetchContent dependency) cold through
    `compile-farm up --local 2`: its units compile remotely and its image is the local one."""
    monkeypatch.setenv("SPARKBAKE_CACHE", str(tmp_path / "host-cache"))  # a cold cache
    monkeypatch.delenv("SPARKBAKE_COMPILE_CACHE", raising=False)
    project = cmake_project(tmp_path / "farm", daemon[0])
    (project.root / LOCK).parent.mkdir(parents=True)
    shutil.copy(built.root / LOCK, project.root / LOCK)
    shutil.copy(DATA / BUILDER_LOCK, project.root / BUILDER_LOCK)
    capsys.readouterr()
    try:
        assert project.sparkbake("compile-farm", "up", "--local", "2") == 0
        assert project.sparkbake("build-image", TAG) == 0
    finally:
        down_leaving_nothing(project)
    found = re.search(r"^compiled remotely: (\d+) of (\d+)$", capsys.readouterr().err,
                      re.MULTILINE)
    assert found, "no 'compiled remotely' line"
    remote, compiled = int(found[1]), int(found[2])
    assert compiled >= 4 and remote >= 0.8 * compiled, found[0]  # nvcc's steps, at least
    assert image_digest(project) == image_digest(built)


def test_a_lock_whose_tree_hash_was_edited_is_refused_at_fetch(
        built: Project, daemon: tuple[Daemon, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    project = cmake_project(tmp_path / "edited", daemon[0])
    data = json.loads((built.root / LOCK).read_text())
    data["sources"][0]["tree"] = "0" * 64
    (project.root / LOCK).parent.mkdir(parents=True)
    (project.root / LOCK).write_text(json.dumps(data))
    assert project.sparkbake("fetch", TAG) == 2
    err = capsys.readouterr().err
    assert "tinydep" in err and "the sources lock says 0000000000000000; refused" in err
    assert not (project.root / "build" / "thirdparty" / daemon[1]).exists()


def test_a_declaration_a_patch_adds_is_refused_naming_its_line(
        built: Project, daemon: tuple[Daemon, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    project = cmake_project(tmp_path / "patched", daemon[0], series="extra")
    (project.root / LOCK).parent.mkdir(parents=True)
    shutil.copy(built.root / LOCK, project.root / LOCK)
    cmakelists = project.root / "cmake-upstream" / "CMakeLists.txt"
    old = cmakelists.read_text()
    anchor = "FetchContent_MakeAvailable(tinydep)\n"
    new = old.replace(anchor, anchor + "FetchContent_Declare(tinyextra GIT_REPOSITORY "
                      "${TINYDEP_REPOSITORY} GIT_TAG main)\n")
    line = new.splitlines().index(anchor.strip()) + 2
    add_patch(project, "extra", "0001-cmake-a-second-dependency.patch",
              unified_diff("CMakeLists.txt", old, new))
    assert project.sparkbake("wheels", TAG) == 2
    err = capsys.readouterr().err
    assert f"CMakeLists.txt:{line}: FetchContent tinyextra" in err
    assert "is not in the sources lock tinycmake.json" in err
    assert f"run `sparkbake lock {TAG}`" in err


def unified_diff(name: str, old: str, new: str) -> str:
    body = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                f"a/{name}", f"b/{name}")
    return f"diff --git a/{name} b/{name}\n" + "".join(body)


def test_lock_warns_of_a_moving_ref_and_a_moved_branch_changes_nothing(
        daemon: tuple[Daemon, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with git_daemon(tmp_path / "own") as served:
        commit = served.publish("tinydep.git", DATA / "tinydep")
        project = cmake_project(tmp_path / "moving", served)
        assert lock_sources(project) == project.root / LOCK
        assert f"pins 'main', a moving ref (refs/heads/main); locked to its commit " \
               f"{commit[:12]}" in capsys.readouterr().err
        work = served.base.parent / "work" / "tinydep.git"
        (work / "include" / "tinydep.h").write_text("#define TINYDEP_VALUE 1\n")
        git(work, "commit", "-qam", "moved")
        git(work, "push", "-q", str(served.base / "tinydep.git"), "main")
        assert project.sparkbake("fetch", TAG) == 0
        fetched = project.root / "build" / "thirdparty" / commit / "tree"
        assert tree_hash(fetched) == tree_hash(DATA / "tinydep")


def test_an_unreachable_server_is_exit_8_naming_its_url(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with git_daemon(tmp_path / "gone") as served:
        served.publish("tinydep.git", DATA / "tinydep")
        project = cmake_project(tmp_path / "stopped", served)
        lock_sources(project)
        shutil.rmtree(project.root / "build" / "thirdparty")  # a host that has not fetched
        served.stop()
        url = served.url("tinydep.git")
        capsys.readouterr()
        assert project.sparkbake("fetch", TAG) == 8
        assert f"cannot fetch 1 third-party sources: {url} unreachable" in capsys.readouterr().err
        assert project.sparkbake("lock", TAG) == 8
        err = capsys.readouterr().err
        assert f"cannot reach the servers of 1 CMake dependencies: {url}" in err
        assert file_sha256(project.root / LOCK)  # the lock made before is left as it was
        # the package index was asked first: the builder lock is made all the same
        assert f"(the package locks are made: {BUILDER_LOCK})" in err
        assert (project.root / BUILDER_LOCK).is_file()


def host(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    """The host's CI / --locked settings: none, but those given."""
    for name in ("CI", "SPARKBAKE_LOCKED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_a_missing_sources_lock_is_made_with_a_notice_before_the_builder_base(
        daemon: tuple[Daemon, str], docker_client: docker_engine.Client, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    host(monkeypatch)
    project = cmake_project(tmp_path / "first", daemon[0], builder="cuda")
    assert project.sparkbake("wheels", TAG) == 8  # past the lock, at the builder base
    err = capsys.readouterr().err
    notice = err.index(f"sources lock: {LOCK} missing: making it now; commit it (CI and "
                       "--locked refuse a missing lock)")
    assert notice < err.index(f"base 'cuda': cannot pull {UNPULLABLE}")
    # made in a stage of its own, as `lock` makes it: the git commands go to its log
    assert "git ls-remote" in project.log(TAG, "lock") and "git ls-remote" not in err
    [entry] = json.loads((project.root / LOCK).read_text())["sources"]
    assert (entry["name"], entry["pin"]) == ("tinydep", daemon[1])
    assert (project.root / "build" / "thirdparty" / daemon[1] / "tree" / "include").is_dir()


def test_a_build_that_made_the_sources_lock_goes_on_with_a_plan_that_has_it(
        daemon: tuple[Daemon, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host(monkeypatch)
    project = cmake_project(tmp_path / "planned", daemon[0])
    loaded = project.config()
    work = build.Build(Run.of(loaded, Settings.of_process(), plain_console()),
                       planning.make(loaded, loaded.tag(TAG)))
    tree = build.patched(work)
    made = build.with_locks(work, tree)
    assert made.plan.stage_inputs[Stage.KERNELS]["third-party sources"] == [
        f"tinydep@{daemon[1][:16]}:{tree_hash(DATA / 'tinydep')[:16]}"]
    # the wheels are built and kept under the key that `plan` gives from now on
    assert made.plan.wheels_key == project.plan(TAG).wheels_key != work.plan.wheels_key
    assert build.with_locks(made, tree) is made


def test_under_ci_a_missing_sources_lock_stops_the_build_before_the_builder_base(
        daemon: tuple[Daemon, str], docker_client: docker_engine.Client, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    host(monkeypatch, CI="true")
    project = cmake_project(tmp_path / "ci", daemon[0], builder="cuda")
    assert project.sparkbake("wheels", TAG) == 2
    err = capsys.readouterr().err
    assert f"no sources lock for upstream 'tinycmake' ({project.root / LOCK}); CI and " \
           "--locked never make a lock" in err
    assert f"make it: sparkbake --config {project.config_path} lock {TAG}, and commit it" in err
    assert UNPULLABLE not in err  # the builder base was not tried
    assert not (project.root / LOCK).exists()


def test_a_sources_lock_that_lacks_a_declaration_stops_the_build_before_the_builder_base(
        daemon: tuple[Daemon, str], docker_client: docker_engine.Client, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    host(monkeypatch)
    project = cmake_project(tmp_path / "lacking", daemon[0], builder="cuda")
    lock_sources(project)
    committed = (project.root / LOCK).read_text()
    cmakelists = project.root / "cmake-upstream" / "CMakeLists.txt"
    cmakelists.write_text(cmakelists.read_text() + "FetchContent_Declare(tinyextra "
                          "GIT_REPOSITORY ${TINYDEP_REPOSITORY} GIT_TAG main)\n")
    capsys.readouterr()
    assert project.sparkbake("wheels", TAG) == 2
    err = capsys.readouterr().err
    assert "FetchContent tinyextra" in err and "is not in the sources lock tinycmake.json" in err
    assert UNPULLABLE not in err  # the builder base was not tried
    assert (project.root / LOCK).read_text() == committed  # not remade on the fly
