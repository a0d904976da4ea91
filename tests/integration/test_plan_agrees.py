"""`plan` says `cached` for exactly the stages the next run skips, for each kind of upstream:
a dir, a git repository, and an sdist on a package index (one this test serves on
127.0.0.1). Each stage is built once: fetch, patch, wheels, build-image in turn, each run
compared with the plan made just before it."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.core.stages import Stage
from tests.conftest import DATA, Project, copy_project

pytestmark = pytest.mark.docker

COMMANDS = ("fetch", "patch", "wheels", "build-image")
UNPACKAGED = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
SHOWN = (Stage.FETCH, Stage.PATCH, Stage.WHEELS, Stage.BAKE)  # the stages a run reports


def plan_states(project: Project, tag: str, capsys: pytest.CaptureFixture[str]
                ) -> dict[str, str]:
    capsys.readouterr()
    project.sparkbake("plan", tag, "--json")
    stages = json.loads(capsys.readouterr().out)["stages"]
    return {s["name"]: s["state"] for s in stages if s["name"] in SHOWN}


def run_states(project: Project, command: str, tag: str,
               capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    capsys.readouterr()
    assert project.sparkbake(command, tag, "--json") == 0
    return {s["name"]: s["state"] for s in json.loads(capsys.readouterr().out)["stages"]}


def assert_plan_agrees(project: Project, tag: str, capsys: pytest.CaptureFixture[str]
                       ) -> None:
    """Before each command, the plan's cached stages are the run's cached ones."""
    for command in COMMANDS:
        said = plan_states(project, tag, capsys)
        ran = run_states(project, command, tag, capsys)
        assert {s: said[s] == "cached" for s in ran} == {s: ran[s] == "cached" for s in ran}, \
            (command, said, ran)
    said = plan_states(project, tag, capsys)
    assert said == dict.fromkeys(SHOWN, "cached")
    assert run_states(project, "build-image", tag, capsys) == dict.fromkeys(SHOWN, "cached")


def add_tag(project: Project, upstream: str, tag: str) -> None:
    """An upstream entry and a tag like `fixture` on it."""
    text = project.config_path.read_text()
    text = text.replace("upstreams:\n", f"upstreams:\n{upstream}", 1)
    text = text.replace("tags:\n", f"tags:\n  {tag}:\n    extends: fixture\n"
                        f"    upstream: {tag}\n", 1)
    project.config_path.write_text(text)


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_COMMITTER_DATE": "2025-06-01T00:00:00Z",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def sdist_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A PEP 503 index on 127.0.0.1 with tinykern 0.1.0's sdist (the fixture's tree); yields
    its URL and the sdist's sha256."""
    root = tmp_path / "index"
    (root / "simple" / "tinykern").mkdir(parents=True)
    sdist = root / "tinykern-0.1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(DATA / "upstream", arcname="tinykern-0.1.0",
                filter=lambda member: None if "__pycache__" in member.name else member)
    sha256 = hashlib.sha256(sdist.read_bytes()).hexdigest()
    (root / "simple" / "tinykern" / "index.html").write_text(
        f'<a href="../../tinykern-0.1.0.tar.gz#sha256={sha256}">tinykern-0.1.0.tar.gz</a>\n')

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(
        Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", sha256
    finally:
        server.shutdown()
        thread.join()


def test_plan_agrees_with_the_run_for_a_dir_upstream(
        tmp_path: Path, debian_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    project = copy_project(tmp_path / "project")
    assert_plan_agrees(project, "fixture", capsys)


def test_plan_agrees_with_the_run_for_a_git_upstream(
        tmp_path: Path, debian_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    project = copy_project(tmp_path / "project")
    repo = tmp_path / "tinykern.git"
    shutil.copytree(DATA / "upstream", repo, ignore=UNPACKAGED)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tinykern")
    commit = git(repo, "rev-parse", "HEAD")
    add_tag(project, f'  tk-git:\n    git: {{url: "{repo}", commit: "{commit}"}}\n', "tk-git")
    assert_plan_agrees(project, "tk-git", capsys)
    # a git tree needs its commit time beside it: without it the fetch runs again
    [entry] = (project.root / "build" / "sources").iterdir()
    (entry / "source-date-epoch").unlink()
    assert plan_states(project, "tk-git", capsys)[Stage.FETCH] == "missing"
    assert run_states(project, "fetch", "tk-git", capsys) == {Stage.FETCH: "ran"}


def test_plan_agrees_with_the_run_for_an_sdist_upstream(
        tmp_path: Path, debian_base: str, sdist_index: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    project = copy_project(tmp_path / "project")
    url, sha256 = sdist_index
    add_tag(project, "  tk-pypi:\n    pypi: {name: tinykern, version: \"0.1.0\", "
                     f'sha256: "{sha256}"}}\n', "tk-pypi")
    said = plan_states(project, "tk-pypi", capsys)
    with monkeypatch.context() as index:  # only the fetch reads this index: the builder's
        index.setenv("PIP_INDEX_URL", url)  # pip keeps the host's own
        assert run_states(project, "fetch", "tk-pypi", capsys) == {Stage.FETCH: "ran"}
    assert said[Stage.FETCH] == "missing"
    assert_plan_agrees(project, "tk-pypi", capsys)
