"""The source date of a tag: where it comes from, and that every build gets it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.config.versions import DirUpstream, GitUpstream, PypiUpstream
from sparkbake.fetch import upstream_tree
from sparkbake.patch.apply import PatchedTree
from sparkbake.wheels import container_build
from tests.conftest import DATA, copy_project, cp_project, plain_console, settings_of

COMMIT_TIME = 1_600_000_000


def git_repo(folder: Path) -> str:
    """A one-commit repository whose commit time is COMMIT_TIME; returns the commit."""
    folder.mkdir()
    (folder / "setup.py").write_text("# upstream\n")
    env = {**os.environ, "GIT_COMMITTER_DATE": f"@{COMMIT_TIME} +0000",
           "GIT_AUTHOR_DATE": f"@{COMMIT_TIME} +0000", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", "-C", str(folder), *cmd], check=True, env=env)
    return subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def settings() -> Settings:
    return settings_of(PIP_INDEX_URL="x")


def test_a_git_pin_dates_its_tree_by_the_commit_and_a_declared_date_wins(tmp_path: Path) -> None:
    commit = git_repo(tmp_path / "repo")
    upstream = GitUpstream(key="fork", url="./repo", commit=commit,
                           source=str(tmp_path / "repo"))
    entry = tmp_path / "entry"
    upstream_tree.fetch(upstream, entry, settings(), console=plain_console())
    assert upstream_tree.source_date(upstream, entry) == COMMIT_TIME
    declared = GitUpstream(key="fork", url="./repo", commit=commit,
                           source=str(tmp_path / "repo"), source_date_epoch=1_700_000_000)
    assert upstream_tree.source_date(declared, entry) == 1_700_000_000


def test_a_cached_git_tree_without_its_date_is_fetched_again(tmp_path: Path) -> None:
    commit = git_repo(tmp_path / "repo")
    upstream = GitUpstream(key="fork", url="./repo", commit=commit,
                           source=str(tmp_path / "repo"))
    entry = tmp_path / "entry"
    (entry / "tree").mkdir(parents=True)  # as an older sparkbake left it
    upstream_tree.fetch(upstream, entry, settings(), console=plain_console())
    assert (entry / "tree" / "setup.py").is_file()
    assert upstream_tree.source_date(upstream, entry) == COMMIT_TIME


def test_sdists_without_a_declared_date_get_1980_and_a_declared_date_wins(
        tmp_path: Path) -> None:
    sdist = PypiUpstream(key="v", name="vllm", version="1", sha256="0" * 64)
    found = upstream_tree.source_date(sdist, tmp_path)
    assert found == upstream_tree.DEFAULT_SOURCE_DATE == 315532800
    dated = DirUpstream(key="d", path=tmp_path, source_date_epoch=1735689600)
    assert upstream_tree.source_date(dated, tmp_path) == 1735689600


def test_a_folder_in_git_is_dated_by_its_last_commit_not_its_file_times(tmp_path: Path) -> None:
    git_repo(tmp_path / "repo")
    os.utime(tmp_path / "repo" / "setup.py", (1_700_000_000, 1_700_000_000))  # a checkout's
    folder = DirUpstream(key="d", path=tmp_path / "repo")
    upstream_tree.fetch(folder, tmp_path / "entry", settings(), console=plain_console())
    assert upstream_tree.source_date(folder, tmp_path / "entry") == COMMIT_TIME


def test_a_folder_outside_git_gets_the_fixed_date_whatever_its_file_times(
        tmp_path: Path) -> None:
    """Two copies of a project made at different times (cp -r stamps the copy's time) date
    their upstream folder alike, and pin it alike."""
    first, second = tmp_path / "one" / "upstream", tmp_path / "two" / "upstream"
    (first / "pkg").mkdir(parents=True)
    for name in ("setup.py", "pkg/mod.py"):
        (first / name).write_text("#\n")
    shutil.copytree(first, second)
    for path in (second, *second.rglob("*")):
        os.utime(path, (1_790_000_000, 1_790_000_000))  # copied later
    for folder in (first, second):
        upstream = DirUpstream(key="d", path=folder)
        upstream_tree.fetch(upstream, folder.parent / "entry", settings(), console=plain_console())
        assert upstream_tree.source_date(upstream, folder.parent / "entry") == 315532800
        assert upstream_tree.dir_dating(folder) == (
            315532800, "a fixed date: not in git, no source_date_epoch")
    assert planning.upstream_pin(DirUpstream(key="d", path=first)) == \
        planning.upstream_pin(DirUpstream(key="d", path=second))


def test_a_folder_in_git_with_changes_keeps_its_commit_date(tmp_path: Path) -> None:
    git_repo(tmp_path / "repo")
    (tmp_path / "repo" / "setup.py").write_text("# changed, not committed\n")
    os.utime(tmp_path / "repo" / "setup.py", (1_700_000_000, 1_700_000_000))
    changed = DirUpstream(key="d", path=tmp_path / "repo")
    upstream_tree.fetch(changed, tmp_path / "repo-entry", settings(), console=plain_console())
    assert upstream_tree.source_date(changed, tmp_path / "repo-entry") == COMMIT_TIME
    assert upstream_tree.dir_dating(tmp_path / "repo") == (COMMIT_TIME, "its last commit")


def test_a_folder_whose_commit_is_older_than_1980_is_dated_1980(tmp_path: Path) -> None:
    env = {**os.environ, "GIT_COMMITTER_DATE": "@100000000 +0000",
           "GIT_AUTHOR_DATE": "@100000000 +0000", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "setup.py").write_text("#\n")
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "old"]):
        subprocess.run(["git", "-C", str(tmp_path / "old"), *cmd], check=True, env=env)
    folder = DirUpstream(key="d", path=tmp_path / "old")
    upstream_tree.fetch(folder, tmp_path / "entry", settings(), console=plain_console())
    assert upstream_tree.source_date(folder, tmp_path / "entry") == 315532800


def test_without_git_a_folder_gets_the_fixed_date_and_its_date_is_part_of_its_pin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git_repo(tmp_path / "repo")
    os.utime(tmp_path / "repo" / "setup.py", (1_700_000_000, 1_700_000_000))
    folder = DirUpstream(key="d", path=tmp_path / "repo")
    assert planning.upstream_pin(folder)["date"] == str(COMMIT_TIME)
    # no git where the system keeps it: no traceback either
    monkeypatch.setitem(upstream_tree.GIT_DATE_ENVIRONMENT, "PATH", str(tmp_path / "no-tools"))
    assert upstream_tree.dir_date(tmp_path / "repo") == 315532800
    assert planning.upstream_pin(folder)["date"] == "315532800"
    declared = DirUpstream(key="d", path=tmp_path / "repo", source_date_epoch=1735689600)
    assert "date" not in planning.upstream_pin(declared)


def test_a_cached_folder_without_its_date_is_copied_again(tmp_path: Path) -> None:
    git_repo(tmp_path / "repo")
    folder = DirUpstream(key="d", path=tmp_path / "repo")
    (tmp_path / "entry" / "tree").mkdir(parents=True)  # as an older sparkbake left it
    upstream_tree.fetch(folder, tmp_path / "entry", settings(), console=plain_console())
    assert (tmp_path / "entry" / "tree" / "setup.py").is_file()
    assert upstream_tree.source_date(folder, tmp_path / "entry") == COMMIT_TIME


def test_the_builder_gets_the_source_date_and_reproducible_build_switches(
        tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    tag = project.config().tag("fixture")
    request = container_build.BuildRequest(
        tag=tag, builder="b", patched=PatchedTree(path=DATA / "upstream", key="k", tree_hash="h"),
        folder=tmp_path / "w", kernels=tmp_path / "k", log=tmp_path / "log",
        jobs=container_build.Jobs(2, 1, "test"), memory=None,
        compile_cache=settings().compile_cache, source_date=1735689600)
    environment = container_build._container_args(request, tmp_path / "out", None)["environment"]
    assert environment["SOURCE_DATE_EPOCH"] == "1735689600"
    assert "NVCC_APPEND_FLAGS" not in environment  # -objtemp only where sccache is off
    assert environment["PYTHONHASHSEED"] == "0"


def test_two_cp_copies_of_a_project_made_apart_plan_the_same_inputs(tmp_path: Path) -> None:
    first = versions.load(cp_project(tmp_path / "first"))
    second = versions.load(cp_project(tmp_path / "second", later=1_790_000_000))
    assert first.tag("fixture").upstream.source_date_epoch is None
    plans = [planning.make(config, config.tag("fixture")) for config in (first, second)]
    assert plans[0].inputs == plans[1].inputs
