"""Content hashes: trees (mtimes and .git do not count) and plain data (key order does not)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from sparkbake.hashing import data_hash, file_sha256, tree_files, tree_hash


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (root / "pkg" / "sub" / "kernel.cu").write_text("__global__ void k() {}\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o644)
    (root / "link").symlink_to("pkg/__init__.py")
    return root


def test_file_sha256_is_the_sha256_of_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    data = os.urandom(3 * (1 << 20) + 17)  # more than one read chunk
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()


def test_tree_hash_is_stable(tree: Path) -> None:
    assert tree_hash(tree) == tree_hash(tree)
    assert len(tree_hash(tree)) == 64


def test_tree_hash_ignores_mtimes(tree: Path) -> None:
    before = tree_hash(tree)
    for path in (tree / "pkg" / "__init__.py", tree / "run.sh", tree / "pkg"):
        os.utime(path, (1_000_000, 1_000_000))
    assert tree_hash(tree) == before


def test_tree_hash_ignores_the_location(tree: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tree, copy, symlinks=True)
    assert tree_hash(copy) == tree_hash(tree)


def test_tree_hash_ignores_git_folders(tree: Path) -> None:
    before = tree_hash(tree)
    (tree / ".git" / "objects").mkdir(parents=True)
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tree / ".git" / "objects" / "ab").write_bytes(b"\x00blob")
    (tree / "pkg" / ".git").mkdir()  # nested, e.g. a vendored checkout
    (tree / "pkg" / ".git" / "config").write_text("[core]\n")
    assert tree_hash(tree) == before
    assert not any(".git" in p.parts for p in tree_files(tree))


def test_tree_hash_skip_is_configurable(tree: Path) -> None:
    before = tree_hash(tree, skip=("build",))
    (tree / "build").mkdir()
    (tree / "build" / "out.o").write_bytes(b"obj")
    assert tree_hash(tree, skip=("build",)) == before
    assert tree_hash(tree) != tree_hash(tree, skip=("build",))


def test_tree_hash_ignores_a_git_file(tree: Path) -> None:
    before = tree_hash(tree)
    (tree / ".git").write_text("gitdir: /somewhere/.git/worktrees/tree\n")
    assert tree_hash(tree) == before


def test_tree_hash_changes_with_content(tree: Path) -> None:
    before = tree_hash(tree)
    (tree / "pkg" / "sub" / "kernel.cu").write_text("__global__ void k() { }\n")
    assert tree_hash(tree) != before


def test_tree_hash_changes_with_a_new_or_renamed_file(tree: Path) -> None:
    before = tree_hash(tree)
    (tree / "pkg" / "sub" / "kernel.cu").rename(tree / "pkg" / "sub" / "kernel2.cu")
    renamed = tree_hash(tree)
    assert renamed != before
    (tree / "pkg" / "new.py").write_text("")
    assert tree_hash(tree) not in (before, renamed)


def test_tree_hash_changes_with_the_executable_bit(tree: Path) -> None:
    before = tree_hash(tree)
    (tree / "run.sh").chmod(0o755)
    executable = tree_hash(tree)
    assert executable != before
    (tree / "run.sh").chmod(0o644)
    assert tree_hash(tree) == before


def test_tree_hash_changes_with_the_symlink_target(tree: Path) -> None:
    before = tree_hash(tree)
    (tree / "link").unlink()
    (tree / "link").symlink_to("run.sh")
    assert tree_hash(tree) != before


def test_a_symlink_is_not_its_target(tree: Path) -> None:
    before = tree_hash(tree)
    content = (tree / "pkg" / "__init__.py").read_bytes()
    (tree / "link").unlink()
    (tree / "link").write_bytes(content)  # same bytes, but a file now
    assert tree_hash(tree) != before


def test_a_symlink_to_a_folder_counts_as_a_link(tree: Path) -> None:
    (tree / "dirlink").symlink_to("pkg", target_is_directory=True)
    files = tree_files(tree)
    assert Path("dirlink") in files
    assert not any(p.parts[0] == "dirlink" and len(p.parts) > 1 for p in files)
    before = tree_hash(tree)
    (tree / "dirlink").unlink()
    (tree / "dirlink").symlink_to("pkg/sub", target_is_directory=True)
    assert tree_hash(tree) != before


def test_a_dangling_symlink_is_hashed_by_its_target(tree: Path) -> None:
    (tree / "dangling").symlink_to("nowhere")
    before = tree_hash(tree)
    (tree / "dangling").unlink()
    (tree / "dangling").symlink_to("nowhere-else")
    assert tree_hash(tree) != before


def test_tree_files_are_sorted_and_relative(tree: Path) -> None:
    assert tree_files(tree) == [Path("link"), Path("pkg/__init__.py"),
                                Path("pkg/sub/kernel.cu"), Path("run.sh")]


def test_data_hash_ignores_key_order() -> None:
    one = {"a": 1, "b": {"x": [1, 2], "y": "z"}, "c": None}
    two = {"c": None, "b": {"y": "z", "x": [1, 2]}, "a": 1}
    assert data_hash(one) == data_hash(two)
    assert len(data_hash(one)) == 64


def test_data_hash_changes_with_values_and_list_order() -> None:
    base = {"series": ["a", "b"], "env": {"X": "1"}}
    assert data_hash(base) != data_hash({"series": ["b", "a"], "env": {"X": "1"}})
    assert data_hash(base) != data_hash({"series": ["a", "b"], "env": {"X": "2"}})
    assert data_hash({"x": "1"}) != data_hash({"x": 1})


def test_data_hash_treats_tuples_as_lists_and_paths_as_strings() -> None:
    assert data_hash({"env": (("A", "1"),)}) == data_hash({"env": [["A", "1"]]})
    assert data_hash({"p": Path("a/b")}) == data_hash({"p": "a/b"})
