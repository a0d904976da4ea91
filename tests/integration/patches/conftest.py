"""The real vLLM 0.32.0 and 0.33.0 sdists, fetched once per session by sparkbake's fetch,
and a small fork repository whose commits are real upstream changes between the two.

Test series are imported from the fork with `sparkbake import-series`, so every patch is
a `git format-patch` file carrying blob ids of the real 0.32.0 files (three-way works).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.planning import make
from tests.conftest import Project, versions_yaml

SHA_0_32 = "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"
SHA_0_33 = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
TAGS = {
    # 3 real upstream fixes, the real scheduler doc change, 3 local tuning patches
    "old-full": ("vllm-0.32.0", "[upstream-fixes, scheduler-doc, spark-tuning]"),
    "old-conflict": ("vllm-0.32.0", "[upstream-fixes, local-conflict]"),
    "new-fixes": ("vllm-0.33.0", "[upstream-fixes, mm-offset]"),
    "unsafe": ("vllm-0.32.0", "[unsafe]"),
}
VERSIONS = versions_yaml(
    repository="localhost:5000/patches",
    upstreams=f'  vllm-0.32.0: {{pypi: {{name: vllm, version: "0.32.0", sha256: "{SHA_0_32}"}}}}\n'
              f'  vllm-0.33.0: {{pypi: {{name: vllm, version: "0.33.0", sha256: "{SHA_0_33}"}}}}\n',
    tags="".join(f"  {name}: {{upstream: {up}, series: {series}}}\n"
                 for name, (up, series) in TAGS.items()))
FILES = ["vllm/exceptions.py", "vllm/forward_context.py",
         "vllm/distributed/device_communicators/pynccl.py", "vllm/config/scheduler.py",
         "vllm/config/multimodal.py", "vllm/version.py"]
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin",
           "GIT_AUTHOR_NAME": "Fork Dev", "GIT_AUTHOR_EMAIL": "dev@fork.example",
           "GIT_COMMITTER_NAME": "Fork Dev", "GIT_COMMITTER_EMAIL": "dev@fork.example"}


@dataclass(frozen=True)
class Trees:
    """The fetched sdists (build/sources of a shared project) and the fork."""

    sources: Path  # a build/sources folder with both pristine trees
    old: Path  # vLLM 0.32.0
    new: Path  # vLLM 0.33.0
    fork: Path  # git repository: tags base, fixes, tuning, sched, conflict


@dataclass(frozen=True)
class VllmProject(Project):
    """A project of its own around the vLLM trees (not a copy of tests/data)."""

    def run(self, *args: str) -> tuple[int, str, str]:
        """`sparkbake --config ... args`: exit code, stdout, stderr."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = self.sparkbake(*args)
        return code, out.getvalue(), err.getvalue()

    def series(self, name: str) -> Path:
        return self.root / "patches" / name


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=GIT_ENV)
    return done.stdout.strip()


def commit_file(repo: Path, path: str, text: str, message: str) -> None:
    (repo / path).write_text(text)
    git(repo, "commit", "-q", "-a", "-m", message)


def edit(repo: Path, path: str, old: str, new: str, message: str) -> None:
    text = (repo / path).read_text()
    assert text.count(old) == 1, (path, old)
    commit_file(repo, path, text.replace(old, new), message)


def make_fork(fork: Path, old: Path, new: Path) -> None:
    for name in FILES:
        (fork / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(old / name, fork / name)
    git(fork, "init", "-q", "-b", "main")
    git(fork, "add", "-A")
    git(fork, "commit", "-q", "-m", "vLLM 0.32.0 files")
    git(fork, "tag", "base")
    _upstream_fixes(fork, new)
    _tuning(fork)
    git(fork, "checkout", "-q", "-b", "sched", "base")
    commit_file(fork, "vllm/config/scheduler.py", (new / "vllm/config/scheduler.py").read_text(),
                "scheduler: document prefill_schedule_interval for all deployments\n\n"
                "Backport of the vLLM 0.33.0 docstring. Drop when moving to 0.33.0.")
    git(fork, "tag", "sched")
    git(fork, "checkout", "-q", "-b", "conflict", "base")
    edit(fork, "vllm/forward_context.py",
         "    if cudagraph_runtime_mode != CUDAGraphMode.NONE and num_tokens is not None:\n",
         "    if num_tokens is not None and cudagraph_runtime_mode != CUDAGraphMode.NONE:\n",
         "forward_context: test num_tokens first\n\nA local change to the line that 0.33.0 "
         "rewrote, so it conflicts.")
    git(fork, "tag", "conflict")


def _upstream_fixes(fork: Path, new: Path) -> None:
    """Three real changes of vLLM 0.33.0, each as its own commit on 0.32.0."""
    subjects = {
        "vllm/exceptions.py": "exceptions: add ChatTemplateResolutionError",
        "vllm/forward_context.py": "forward_context: keep the batch size without cudagraphs",
        "vllm/distributed/device_communicators/pynccl.py": "pynccl: abort thread must not "
        "reference self",
    }
    for path, subject in subjects.items():
        commit_file(fork, path, (new / path).read_text(),
                    f"{subject}\n\nBackport from vLLM 0.33.0.\nUpstream status: merged in "
                    "0.33.0; drop this patch when moving to it.")
    git(fork, "tag", "fixes")


def _tuning(fork: Path) -> None:
    edit(fork, "vllm/version.py", "Failed to read commit hash", "Failed to read the version",
         "version: say what failed to load\n\nLocal wording. Not for upstream.")
    edit(fork, "vllm/config/multimodal.py", "    Set to `0` (default) to disable frontend",
         "    Set to `0` (the default) to disable frontend",
         "multimodal: say 'the default'\n\nLocal wording. Not for upstream.")
    edit(fork, "vllm/config/scheduler.py", "If set to False, disable async scheduling.",
         "If False, async scheduling is off.",
         "scheduler: reword async_scheduling\n\nLocal wording; made on 0.32.0, it merges "
         "three-way after the scheduler-doc backport.")
    git(fork, "tag", "tuning")


@pytest.fixture(scope="session")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Trees:
    root = tmp_path_factory.mktemp("vllm-sources")
    (root / "versions.yaml").write_text(VERSIONS)
    for tag in ("old-full", "new-fixes"):
        assert main(["--config", str(root / "versions.yaml"), "fetch", tag]) == 0
    loaded = versions.load(root / "versions.yaml")
    old = root / "build" / "sources" / make(loaded, loaded.tag("old-full")).fetch_key / "tree"
    new = root / "build" / "sources" / make(loaded, loaded.tag("new-fixes")).fetch_key / "tree"
    fork = root / "fork"
    fork.mkdir()
    make_fork(fork, old, new)
    return Trees(root / "build" / "sources", old, new, fork)


def new_project(root: Path, trees: Trees) -> VllmProject:
    """A project sharing the fetched trees, with the test series imported from the fork."""
    root.mkdir(parents=True)
    (root / "versions.yaml").write_text(VERSIONS)
    (root / "build").mkdir()
    (root / "build" / "sources").symlink_to(trees.sources)
    project = VllmProject(root)
    for series, commits in (("upstream-fixes", "base..fixes"), ("spark-tuning", "fixes..tuning"),
                            ("scheduler-doc", "base..sched"), ("local-conflict", "base..conflict"),
                            ("mm-offset", "tuning~2..tuning~1")):
        assert project.sparkbake("import-series", "--from", str(trees.fork), "--range", commits,
                                 series) == 0
    return project


@pytest.fixture
def vllm_project(tmp_path: Path, trees: Trees) -> VllmProject:
    """A fresh project a test may edit and patch."""
    return new_project(tmp_path / "project", trees)


@pytest.fixture(scope="session")
def applied(tmp_path_factory: pytest.TempPathFactory, trees: Trees) -> VllmProject:
    """old-full patched once (and checked out to <root>/checkout): shared, never edited."""
    project = new_project(tmp_path_factory.mktemp("applied") / "project", trees)
    code, _, err = project.run("patch", "old-full", "--checkout", str(project.root / "checkout"))
    (project.root / "patch.log").write_text(err)
    assert code == 0, err[-2000:]
    return project
