"""fetch on real inputs: the vLLM 0.33.0 sdist from the package index, a git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkbake.__main__ import main
from tests.conftest import versions_yaml

VLLM_SHA256 = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
TAGS = """\
  vllm: {upstream: vllm, series: []}
  fork: {upstream: fork, series: []}
  missing: {upstream: missing, series: []}
"""


def write_config(root: Path, version: str = "0.33.0", sha256: str = VLLM_SHA256,
                 commit: str = "0" * 40) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "versions.yaml"
    path.write_text(versions_yaml(tags=TAGS, upstreams=(
        f'  vllm: {{pypi: {{name: vllm, version: "{version}", sha256: "{sha256}"}}}}\n'
        f'  fork: {{git: {{url: ./fork, commit: "{commit}"}}}}\n'
        "  missing: {dir: ./nowhere}\n")))
    return path


def sparkbake(config: Path, *args: str) -> int:
    return main(["--config", str(config), *args])


def entries(root: Path) -> list[str]:
    sources = root / "build" / "sources"
    return sorted(p.name for p in sources.iterdir()) if sources.exists() else []


def test_the_vllm_sdist_is_fetched_verified_unpacked_then_cached(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert sparkbake(config, "fetch", "vllm") == 0
    [key] = entries(tmp_path)
    tree = tmp_path / "build" / "sources" / key / "tree"
    assert (tree / "vllm" / "__init__.py").is_file()
    assert (tree / "CMakeLists.txt").is_file()
    assert (tree / "csrc").is_dir()
    assert "\nVersion: 0.33.0\n" in (tree / "PKG-INFO").read_text()
    assert not list((tmp_path / "build" / "sources" / key).glob("*.tar.gz"))  # archive removed
    capsys.readouterr()
    assert sparkbake(config, "fetch", "vllm") == 0
    assert "cached" in capsys.readouterr().err


def test_a_wrong_sha256_refuses_and_deletes_the_download(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, sha256="0" * 64)
    assert sparkbake(config, "fetch", "vllm") == 2
    err = capsys.readouterr().err
    assert f"has sha256 {VLLM_SHA256}, versions.yaml pins {'0' * 64}; download deleted" in err
    assert entries(tmp_path) == []  # neither the entry nor its temporary folder is left


def test_a_version_the_index_lacks_is_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, version="0.0.0.post999")
    assert sparkbake(config, "fetch", "vllm") == 2
    assert "no sdist vllm 0.0.0.post999 on the package index" in capsys.readouterr().err


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                         text=True, env=env)
    return out.stdout.strip()


def make_fork(root: Path) -> tuple[str, str]:
    repo = root / "fork"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "kernel.cu").write_text("// first\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "kernel.cu").write_text("// second\n")
    git(repo, "commit", "-qam", "second")
    return first, git(repo, "rev-parse", "HEAD")


def test_a_git_upstream_is_fetched_at_its_pinned_commit(tmp_path: Path) -> None:
    first, _ = make_fork(tmp_path)
    config = write_config(tmp_path, commit=first)
    assert sparkbake(config, "fetch", "fork") == 0
    [key] = entries(tmp_path)
    tree = tmp_path / "build" / "sources" / key / "tree"
    assert (tree / "kernel.cu").read_text() == "// first\n"
    assert not (tree / ".git").exists()


def test_a_commit_the_repository_lacks_is_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_fork(tmp_path)
    config = write_config(tmp_path, commit="1" * 40)
    assert sparkbake(config, "fetch", "fork") == 2
    assert f"fetching ./fork at {'1' * 12} failed" in capsys.readouterr().err
    assert entries(tmp_path) == []


def test_a_missing_dir_upstream_is_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert sparkbake(config, "fetch", "missing") == 2
    assert "nowhere is not a folder" in capsys.readouterr().err
