"""Finding a CMake tree's downloads, the sources lock's format and coverage check, the
builder's arguments: pure logic, no network, no Docker."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from sparkbake import planning
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.config.versions import KernelSeed
from sparkbake.core.folders import Folders
from sparkbake.core.stages import Stage
from sparkbake.errors import ConfigError, EngineError
from sparkbake.fetch import sourcelock, thirdparty
from sparkbake.fetch.cmake_sources import commands, discover
from tests.conftest import TREE_UPSTREAM, plain_console, settings_of, versions_yaml
from tests.localserver import serving

CUTLASS = """\
# a comment with FetchContent_Declare(fake GIT_REPOSITORY x GIT_TAG y)
#[[ a bracket comment
FetchContent_Declare(fake2 GIT_REPOSITORY x GIT_TAG y) ]]
set(CUTLASS_REVISION "v4.7.1" CACHE STRING "the CUTLASS tag")
if (DEFINED ENV{VLLM_CUTLASS_SRC_DIR})
  set(VLLM_CUTLASS_SRC_DIR $ENV{VLLM_CUTLASS_SRC_DIR})
endif()
if(VLLM_CUTLASS_SRC_DIR)
  FetchContent_Declare(cutlass SOURCE_DIR ${VLLM_CUTLASS_SRC_DIR})
else()
  FetchContent_Declare(
      cutlass
      GIT_REPOSITORY https://github.com/nvidia/cutlass.git
      GIT_TAG ${CUTLASS_REVISION}
      GIT_PROGRESS TRUE
      GIT_SHALLOW TRUE
  )
endif()
"""
DEEPGEMM = """\
if (DEFINED ENV{DEEPGEMM_SRC_DIR})
  set(DEEPGEMM_SRC_DIR $ENV{DEEPGEMM_SRC_DIR})
endif()
set(_REPO "https://github.com/vllm-project/DeepGEMM.git")
set(_TAG "0820030756945b2daec208e8e8255268360f337d")
FetchContent_Populate(
  deepgemm
  SOURCE_DIR "${_src}"
  GIT_REPOSITORY "${_REPO}"
  GIT_TAG "${_TAG}"
  GIT_SUBMODULES "third-party/cutlass" "third-party/deep_jit"
)
"""
ARCHIVE = """\
FetchContent_Declare(json URL [=[https://example.invalid/json-3.11.3.tar.xz]=]
  URL_HASH SHA256=D6C65AA6A28A4F2BD4C3CF8B6C1B9D3E6E4F5C7B1A2B3C4D5E6F708192A3B4C5)
"""


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_commands_skip_comments_and_unquote_arguments() -> None:
    found = commands('set(A "x y" [[z]])  # set(B 1)\nmessage(STATUS "a\\"b")\n')
    assert [(c.name, c.args, c.line) for c in found] == [
        ("set", ("A", "x y", "z"), 1), ("message", ("STATUS", 'a"b'), 2)]


def test_a_git_declaration_resolves_its_cache_variable_and_finds_its_env(tmp_path: Path) -> None:
    found = discover(tree(tmp_path, {"CMakeLists.txt": CUTLASS}))
    [cutlass] = found.declarations
    assert (cutlass.name, cutlass.kind, cutlass.url, cutlass.ref, cutlass.written) == (
        "cutlass", "git", "https://github.com/nvidia/cutlass.git", "v4.7.1",
        "${CUTLASS_REVISION}")
    assert cutlass.submodules is None  # not given: CMake takes them all
    assert (cutlass.env, cutlass.form, cutlass.where) == (
        ("VLLM_CUTLASS_SRC_DIR",), "declare", "CMakeLists.txt:11")


def test_populate_with_its_own_details_and_submodules(tmp_path: Path) -> None:
    found = discover(tree(tmp_path, {"cmake/deepgemm.cmake": DEEPGEMM}))
    [deepgemm] = found.declarations
    assert deepgemm.form == "populate"
    assert deepgemm.ref == "0820030756945b2daec208e8e8255268360f337d"
    assert deepgemm.submodules == ("third-party/cutlass", "third-party/deep_jit")
    assert deepgemm.env == ("DEEPGEMM_SRC_DIR",)


def test_a_url_declaration_keeps_its_sha256(tmp_path: Path) -> None:
    [json_lib] = discover(tree(tmp_path, {"CMakeLists.txt": ARCHIVE})).declarations
    assert json_lib.kind == "url"
    assert json_lib.url == "https://example.invalid/json-3.11.3.tar.xz"
    assert json_lib.ref == "sha256:d6c65aa6a28a4f2bd4c3cf8b6c1b9d3e6e4f5c7b1a2b3c4d5e6f708192a3b4c5"


def test_an_md5_url_hash_is_refused(tmp_path: Path) -> None:
    tree(tmp_path, {"CMakeLists.txt": "FetchContent_Declare(x URL u URL_HASH MD5=ab)\n"})
    with pytest.raises(ConfigError, match=r"CMakeLists.txt:1: FetchContent x: URL_HASH MD5=ab"):
        discover(tmp_path)


def test_an_unresolved_variable_names_the_declaration_and_its_line(tmp_path: Path) -> None:
    tree(tmp_path, {"CMakeLists.txt": "set(A 1)\n", "cmake/x.cmake":
                    "\nFetchContent_Declare(x GIT_REPOSITORY u GIT_TAG $ENV{X_TAG})\n"})
    with pytest.raises(ConfigError) as raised:
        discover(tmp_path)
    assert raised.value.message.startswith("cmake/x.cmake:2: FetchContent x: GIT_TAG "
                                           "$ENV{X_TAG} cannot be resolved")


def test_cmakelists_values_reach_the_other_files_and_skipped_files_are_said_why(
        tmp_path: Path) -> None:
    tree(tmp_path, {"CMakeLists.txt": 'set(TAG "v1")\n',
                    "cmake/a.cmake": "FetchContent_Declare(a GIT_REPOSITORY u GIT_TAG ${TAG})\n",
                    "cmake/cpu.cmake": "FetchContent_Declare(b GIT_REPOSITORY v GIT_TAG w)\n"})
    found = discover(tmp_path, {"cmake/cpu.cmake": "the CPU build's"})
    assert [(d.name, d.ref) for d in found.declarations] == [("a", "v1")]
    assert [(s.name, s.file, s.line, s.reason) for s in found.left_out] == [
        ("b", "cmake/cpu.cmake", 1, "the CPU build's")]


def test_a_glob_or_a_file_and_line_leaves_out_only_what_it_names(tmp_path: Path) -> None:
    # the CPU build's layout: one name declared twice in one file, once per architecture
    tree(tmp_path, {"CMakeLists.txt": "FetchContent_Declare(c GIT_REPOSITORY u GIT_TAG v)\n",
                    "cmake/ext/a.cmake": "FetchContent_Declare(a GIT_REPOSITORY u GIT_TAG v)\n",
                    "cmake/ext/b.cmake": "FetchContent_Declare(b GIT_REPOSITORY u GIT_TAG v)\n",
                    "cmake/cpu.cmake": "FetchContent_Declare(d GIT_REPOSITORY u GIT_TAG arm)\n"
                                       "FetchContent_Declare(d GIT_REPOSITORY u GIT_TAG x86)\n"})
    with pytest.raises(ConfigError, match=r"cmake/cpu\.cmake:2: FetchContent d is declared again"):
        discover(tmp_path)
    found = discover(tmp_path, {"cmake/ext/*.cmake": "CUDA's", "cmake/cpu.cmake:1": "arm"})
    assert [(d.name, d.ref, d.line) for d in found.declarations] == [("c", "v", 1),
                                                                      ("d", "x86", 2)]
    assert sorted((s.name, s.file, s.line, s.reason) for s in found.left_out) == [
        ("a", "cmake/ext/a.cmake", 1, "CUDA's"), ("b", "cmake/ext/b.cmake", 1, "CUDA's"),
        ("d", "cmake/cpu.cmake", 1, "arm")]


def test_one_name_declared_twice_differently_is_refused(tmp_path: Path) -> None:
    tree(tmp_path, {"CMakeLists.txt": "FetchContent_Declare(a GIT_REPOSITORY u GIT_TAG v1)\n"
                    "FetchContent_Declare(a GIT_REPOSITORY u GIT_TAG v2)\n"})
    with pytest.raises(ConfigError, match=r"CMakeLists\.txt:2: FetchContent a is declared again"):
        discover(tmp_path)


def locked(name: str = "cutlass", **changes: Any) -> sourcelock.Locked:
    base = sourcelock.Locked(name, "git", "https://github.com/nvidia/cutlass.git", "v4.7.1",
                             "a" * 40, None, ("X_SRC_DIR",), "declare", "b" * 64,
                             "CMakeLists.txt:11")
    return dataclasses.replace(base, **changes)


def test_the_lock_is_stable_json_and_reads_back(tmp_path: Path) -> None:
    lock = sourcelock.SourcesLock("up", (locked("z"), locked("a", submodules=("c",))))
    sourcelock.write(tmp_path / "l.json", lock)
    text = (tmp_path / "l.json").read_text()
    assert [s["name"] for s in json.loads(text)["sources"]] == ["a", "z"]
    again = sourcelock.read(tmp_path / "l.json")
    assert again is not None and again.get("a") == locked("a", submodules=("c",))
    sourcelock.write(tmp_path / "m.json", again)
    assert (tmp_path / "m.json").read_text() == text


def test_a_lock_with_a_short_commit_is_a_config_error(tmp_path: Path) -> None:
    sourcelock.write(tmp_path / "l.json", sourcelock.SourcesLock("up", (locked(pin="abc"),)))
    with pytest.raises(ConfigError, match="not a sources lock"):
        sourcelock.read(tmp_path / "l.json")


def coverage_tag(tmp_path: Path) -> versions.Tag:
    (tmp_path / "upstream").mkdir()
    (tmp_path / "versions.yaml").write_text(
        versions_yaml(tags="  t: {upstream: tree, series: []}\n"))
    return versions.load(tmp_path / "versions.yaml").tag("t")


def test_a_declaration_the_lock_lacks_or_has_otherwise_is_exit_2(tmp_path: Path) -> None:
    found = discover(tree(tmp_path / "src", {"CMakeLists.txt": CUTLASS}))
    tag = coverage_tag(tmp_path)
    path = tmp_path / "locks" / "sources" / "tree.json"
    sourcelock.require_covered(path, sourcelock.SourcesLock("tree", (locked(),)), found, tag)
    with pytest.raises(ConfigError) as raised:
        sourcelock.require_covered(path, None, found, tag)
    assert raised.value.exit_code == 2
    assert str(raised.value) == (
        "CMakeLists.txt:11: FetchContent cutlass (https://github.com/nvidia/cutlass.git v4.7.1)"
        " is not in the sources lock tree.json\n  -> run `sparkbake lock t` and commit "
        "sources/tree.json")
    moved = sourcelock.SourcesLock("tree", (locked(ref="v4.8.0"),))
    with pytest.raises(ConfigError, match="differs from its entry in the sources lock"):
        sourcelock.require_covered(path, moved, found, tag)


def test_a_40_hex_ref_is_kept_without_asking_the_server(tmp_path: Path) -> None:
    [deepgemm] = discover(tree(tmp_path, {"x.cmake": DEEPGEMM})).declarations
    assert sourcelock.resolve_ref(deepgemm, console=plain_console()) == (deepgemm.ref, False)


def test_the_builder_gets_fetchcontent_dirs_and_the_populate_forms_own_variables() -> None:
    fetched = (thirdparty.Fetched(locked("vllm-flash-attn"), Path("/c/1/tree")),
               thirdparty.Fetched(locked("deepgemm", form="populate",
                                         env=("DEEPGEMM_SRC_DIR",)), Path("/c/2/tree")))
    volumes, environment = thirdparty.builder_args(fetched)
    assert volumes == {"/c/1/tree": {"bind": "/thirdparty/vllm-flash-attn", "mode": "ro"},
                       "/c/2/tree": {"bind": "/thirdparty/deepgemm", "mode": "ro"}}
    assert environment == {
        "SPARKBAKE_FETCHCONTENT": '{"deepgemm": "/thirdparty/deepgemm", '
                                  '"vllm-flash-attn": "/thirdparty/vllm-flash-attn"}',
        "DEEPGEMM_SRC_DIR": "/thirdparty/deepgemm"}
    assert thirdparty.builder_args(()) == ({}, {})


def test_cmake_skip_in_versions_yaml(tmp_path: Path) -> None:
    (tmp_path / "upstream").mkdir()
    text = versions_yaml(tags="  t: {upstream: tree, series: []}\n", upstreams=TREE_UPSTREAM + (
        '    cmake_skip:\n      cmake/cpu_extension.cmake: "the CPU build\'s"\n'))
    (tmp_path / "versions.yaml").write_text(text)
    tag = versions.load(tmp_path / "versions.yaml").tag("t")
    assert tag.upstream.cmake_skip == (("cmake/cpu_extension.cmake", "the CPU build's"),)
    (tmp_path / "versions.yaml").write_text(text.replace('"the CPU build\'s"', "[1]"))
    with pytest.raises(ConfigError, match=r"versions.yaml:\d+: cmake_skip wants"):
        versions.load(tmp_path / "versions.yaml")
    for key, accepted in (("cmake/*.cmake:314", True), ("cmake/a.cmake:0", False),
                          ("../x.cmake", False), ("/abs.cmake", False)):
        (tmp_path / "versions.yaml").write_text(text.replace("cmake/cpu_extension.cmake", key))
        if accepted:
            assert versions.load(tmp_path / "versions.yaml").tag("t").upstream.cmake_skip == (
                (key, "the CPU build's"),)
        else:
            with pytest.raises(ConfigError, match=r"cmake_skip wants <path in the tree, a glob"):
                versions.load(tmp_path / "versions.yaml")


def test_an_upstreams_device_and_overrides_in_versions_yaml(tmp_path: Path) -> None:
    (tmp_path / "upstream").mkdir()
    text = versions_yaml(tags="  t: {upstream: tree, series: []}\n", upstreams=TREE_UPSTREAM + (
        "    device: cpu\n    overrides: [torch==2.14.0]\n"))
    (tmp_path / "versions.yaml").write_text(text)
    upstream = versions.load(tmp_path / "versions.yaml").tag("t").upstream
    assert (upstream.device, upstream.overrides) == ("cpu", ("torch==2.14.0",))
    (tmp_path / "versions.yaml").write_text(text.replace("device: cpu", "device: rocm"))
    with pytest.raises(ConfigError, match=r"versions.yaml:\d+: .*device.*cuda or cpu"):
        versions.load(tmp_path / "versions.yaml")


def test_the_sources_lock_enters_the_kernel_and_wheels_keys(tmp_path: Path) -> None:
    tag = coverage_tag(tmp_path)
    loaded = versions.load(tmp_path / "versions.yaml")
    before = planning.make(loaded, tag)
    sourcelock.write(tmp_path / "locks" / "sources" / "tree.json",
                     sourcelock.SourcesLock("tree", (locked(),)))
    after = planning.make(loaded, tag)
    assert (after.fetch_key, after.patch_key) == (before.fetch_key, before.patch_key)
    assert after.kernel_key != before.kernel_key and after.wheels_key != before.wheels_key
    assert after.stage_inputs[Stage.KERNELS]["third-party sources"] == [f"cutlass@{'a' * 16}:"
                                                                    f"{'b' * 16}"]
    assert "third-party sources" not in before.stage_inputs[Stage.KERNELS]


# a branch on a port where nothing listens: making its lock asks the server and fails at once
CLOSED = "FetchContent_Declare(tinydep GIT_REPOSITORY git://127.0.0.1:9/tinydep.git GIT_TAG main)\n"
DEVELOPER = settings_of(PIP_INDEX_URL="http://127.0.0.1:9/simple")  # neither CI nor --locked
CI = DEVELOPER.with_environ(CI="true")
LOCKED = dataclasses.replace(DEVELOPER, locked_option=True)


def first_use(tmp_path: Path) -> tuple[versions.Config, versions.Tag, Path]:
    """A tag whose tree declares one download, and no sources lock."""
    tag = coverage_tag(tmp_path)
    return versions.load(tmp_path / "versions.yaml"), tag, tree(tmp_path / "src",
                                                                 {"CMakeLists.txt": CLOSED})


@pytest.mark.parametrize("settings", [CI, LOCKED], ids=["ci", "locked"])
def test_under_ci_or_locked_a_missing_sources_lock_is_exit_2_naming_the_command(
        tmp_path: Path, settings: Settings) -> None:
    loaded, tag, src = first_use(tmp_path)
    with pytest.raises(ConfigError) as raised:
        thirdparty.missing_lock(loaded, tag, src, settings)
    assert raised.value.exit_code == 2
    path = tmp_path / "locks" / "sources" / "tree.json"
    assert str(raised.value) == (
        f"no sources lock for upstream 'tree' ({path}); CI and --locked never make a lock\n"
        "  -> make it: sparkbake lock t, and commit it")


def test_a_missing_sources_lock_is_made_with_a_notice_on_a_developers_host(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loaded, tag, src = first_use(tmp_path)
    assert thirdparty.missing_lock(loaded, tag, src, DEVELOPER)
    # it is made: the dependency's (here closed) server is asked
    with pytest.raises(EngineError) as raised:
        thirdparty.lock_on_first_use(loaded, tag, src, DEVELOPER, console=plain_console())
    assert raised.value.message == ("cannot reach the servers of 1 CMake dependencies: "
                                    "git://127.0.0.1:9/tinydep.git")
    assert "sources lock: locks/sources/tree.json missing: making it now; commit it (CI and " \
           "--locked refuse a missing lock)" in capsys.readouterr().err


@pytest.mark.parametrize("settings", [DEVELOPER, CI], ids=["developer", "ci"])
def test_an_existing_sources_lock_a_tree_without_downloads_or_a_kernel_seed_need_none_made(
        tmp_path: Path, settings: Settings) -> None:
    loaded, tag, src = first_use(tmp_path)
    seeded = dataclasses.replace(tag, kernels=KernelSeed(wheel="v-1-cp38-abi3-linux_x86_64.whl",
                                                         sha256="0" * 64))
    assert not thirdparty.missing_lock(loaded, seeded, src, settings)
    empty = tree(tmp_path / "plain", {"CMakeLists.txt": "project(plain)\n"})
    assert not thirdparty.missing_lock(loaded, tag, empty, settings)
    # one that lacks the tree's declaration: left for prepare to refuse, never remade
    sourcelock.write(tmp_path / "locks" / "sources" / "tree.json",
                     sourcelock.SourcesLock("tree", (locked(),)))
    assert not thirdparty.missing_lock(loaded, tag, src, settings)


# vLLM 0.34.0's cmake/external_projects/triton_kernels.cmake: the archive URL made from the
# git URL with string(), and no URL_HASH
TRITON_KERNELS = """\
set(TRITON_GIT "https://github.com/triton-lang/triton.git")
set(TRITON_KERNELS_TAG "v3.5.1")
string(REGEX REPLACE "\\\\.git$" "" TRITON_REPO_URL "${TRITON_GIT}")
string(REPLACE "https://github.com/" "https://codeload.github.com/"
       TRITON_REPO_URL "${TRITON_REPO_URL}")
set(TRITON_KERNELS_URL "${TRITON_REPO_URL}/tar.gz/${TRITON_KERNELS_TAG}")
FetchContent_Declare(triton_kernels URL ${TRITON_KERNELS_URL} DOWNLOAD_EXTRACT_TIMESTAMP TRUE)
"""


def test_string_replace_and_regex_replace_resolve_a_url_as_cmake_does(tmp_path: Path) -> None:
    [triton] = discover(tree(tmp_path, {"cmake/triton_kernels.cmake": TRITON_KERNELS})
                        ).declarations
    assert (triton.kind, triton.url, triton.ref) == (
        "url", "https://codeload.github.com/triton-lang/triton/tar.gz/v3.5.1", "")
    grouped = 'set(V "a-1.2")\nstring(REGEX REPLACE "^a-([0-9]+)\\\\.([0-9]+)$" "\\\\2.\\\\1" W ' \
              '"${V}")\nFetchContent_Declare(x GIT_REPOSITORY u GIT_TAG ${W})\n'
    [x] = discover(tree(tmp_path / "g", {"CMakeLists.txt": grouped})).declarations
    assert x.ref == "2.1"


def test_a_string_mode_not_followed_leaves_its_variable_unknown(tmp_path: Path) -> None:
    # never the value before it: string(TOLOWER) changed it
    tree(tmp_path, {"CMakeLists.txt": 'set(T "V1")\nstring(TOLOWER "${T}" T)\n'
                                      "FetchContent_Declare(x GIT_REPOSITORY u GIT_TAG ${T})\n"})
    with pytest.raises(ConfigError, match=r"CMakeLists.txt:3: FetchContent x: GIT_TAG \$\{T\} "
                                          "cannot be resolved"):
        discover(tmp_path)


def tarball(text: str) -> bytes:
    """A .tar.gz of one folder holding dep.txt."""
    data, out = text.encode(), io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        member = tarfile.TarInfo("dep-1/dep.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def test_a_url_without_url_hash_is_locked_to_what_it_served_and_held_to_it(
        tmp_path: Path) -> None:
    served = {"body": tarball("one")}

    class Archive(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(served["body"])

        def log_message(self, *args: object) -> None:
            pass

    tag = coverage_tag(tmp_path)
    loaded = versions.load(tmp_path / "versions.yaml")
    with serving(Archive) as port:
        url = f"http://127.0.0.1:{port}/tar.gz/v1"
        src = tree(tmp_path / "src", {"CMakeLists.txt": f"FetchContent_Declare(dep URL {url})\n"})
        path = thirdparty.lock(loaded, tag, src, DEVELOPER, console=plain_console())
        assert path is not None
        lock = sourcelock.read(path)
        assert lock is not None
        [dep] = lock.sources
        first_sha256 = hashlib.sha256(served["body"]).hexdigest()
        assert (dep.kind, dep.ref, dep.pin) == ("url", "", first_sha256)
        [fetched] = thirdparty.fetch_locked(loaded, tag, DEVELOPER, plain_console())
        assert (fetched.path / "dep.txt").read_text() == "one"
        # the server now serves other bytes: a clean cache refuses them, naming the lock
        served["body"] = tarball("two")
        shutil.rmtree(Folders.of(loaded).thirdparty)
        with pytest.raises(ConfigError) as raised:
            thirdparty.fetch_locked(loaded, tag, DEVELOPER, plain_console())
    second_sha256 = hashlib.sha256(served["body"]).hexdigest()
    assert raised.value.message == (f"dep: {url} has sha256 {second_sha256}, "
                                    f"the sources lock pins {first_sha256}")
    assert "remake the lock" in raised.value.remedy
