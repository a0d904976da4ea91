"""The venv's bytecode from the host's cache is the bytecode compileall writes, byte for byte
and mode for mode; a damaged entry is dropped and compiled again."""

from __future__ import annotations

import compileall
import py_compile
import shutil
import stat
import sys
from pathlib import Path

import packaging
import pytest

from sparkbake.bake import bytecode

WHERE = "/opt/venv/lib/python3.11/site-packages/packaging"


def _tree(tmp_path: Path, name: str) -> Path:
    """A copy of a real package, with a file that does not compile and an executable one."""
    folder = tmp_path / name / "packaging"
    shutil.copytree(Path(packaging.__file__).parent, folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "template.py").write_text("def broken(:\n")
    (folder / "tool.py").write_text("print('x')\n")
    (folder / "tool.py").chmod(0o755)
    (folder / "linked").symlink_to(folder / "licenses")  # a linked folder is not walked
    return folder


def _bytecode(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {path.relative_to(folder).as_posix(): (path.read_bytes(),
                                                  stat.S_IMODE(path.lstat().st_mode))
            for path in sorted(folder.rglob("*.pyc"))}


def _compileall(folder: Path) -> None:
    compileall.compile_dir(folder, ddir=WHERE, quiet=2, workers=1,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)


@pytest.mark.parametrize("workers", [1, 2])
def test_compiled_then_reused_bytecode_is_compileall_s(tmp_path: Path, workers: int) -> None:
    expected = _tree(tmp_path, "reference")
    _compileall(expected)
    cache = tmp_path / "cache"
    cold, warm = _tree(tmp_path, "cold"), _tree(tmp_path, "warm")
    first = bytecode.compile_trees([(cold, WHERE)], cache, workers)
    second = bytecode.compile_trees([(warm, WHERE)], cache, workers)
    assert _bytecode(cold) == _bytecode(expected) == _bytecode(warm)
    assert _bytecode(expected)[f"__pycache__/tool.{sys.implementation.cache_tag}.pyc"][1] == 0o644
    sources = len(bytecode.sources(cold))
    assert first == bytecode.Compiled(compiled=sources - 1, failed=1)
    assert second == bytecode.Compiled(reused=sources - 1, failed=1)


def test_a_changed_source_or_another_path_in_the_image_is_compiled_again(
        tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    bytecode.compile_trees([(_tree(tmp_path, "first"), WHERE)], cache, 1)
    changed = _tree(tmp_path, "changed")
    with (changed / "version.py").open("a") as source:
        source.write("# one more line\n")
    made = bytecode.compile_trees([(changed, WHERE)], cache, 1)
    assert (made.reused, made.compiled) == (len(bytecode.sources(changed)) - 2, 1)
    moved = bytecode.compile_trees([(_tree(tmp_path, "moved"), "/elsewhere")], cache, 1)
    assert moved.reused == 0


def test_a_damaged_entry_is_dropped_and_the_source_compiled_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    bytecode.compile_trees([(_tree(tmp_path, "first"), WHERE)], cache, 1)
    entries = sorted(path for path in cache.rglob("*") if path.is_file())
    data = bytearray(entries[0].read_bytes())
    data[-1] ^= 0xFF  # a flipped byte in the .pyc's code
    entries[0].write_bytes(bytes(data))
    again = _tree(tmp_path, "again")
    made = bytecode.compile_trees([(again, WHERE)], cache, 1)
    assert (made.dropped, made.compiled) == (1, 1)
    reference = _tree(tmp_path, "reference")
    _compileall(reference)
    assert _bytecode(again) == _bytecode(reference)
    assert bytecode.compile_trees([(_tree(tmp_path, "third"), WHERE)], cache, 1).dropped == 0


def test_one_module_file_and_no_cache(tmp_path: Path) -> None:
    module = tmp_path / "six.py"
    module.write_text("X = 1\n")
    made = bytecode.compile_trees([(module, "/opt/venv/six.py")], None, 1)
    assert made == bytecode.Compiled(compiled=1)
    assert (tmp_path / "__pycache__" / f"six.{sys.implementation.cache_tag}.pyc").is_file()


def test_a_cache_that_cannot_be_used_leaves_the_bytecode_as_a_compile_makes_it(
        tmp_path: Path) -> None:
    """A cache path that is a file (a cache not writable nor readable): every source is
    compiled, none kept, and the bake goes on."""
    blocked = tmp_path / "cache"
    blocked.write_text("not a folder")
    tree = _tree(tmp_path, "tree")
    made = bytecode.compile_trees([(tree, WHERE)], blocked, 1)
    assert (made.reused, made.compiled) == (0, len(bytecode.sources(tree)) - 1)
    reference = _tree(tmp_path, "reference")
    _compileall(reference)
    assert _bytecode(tree) == _bytecode(reference)


def test_a_dangling_module_link_is_left_alone_as_compileall_does(tmp_path: Path) -> None:
    module = tmp_path / "gone.py"
    module.symlink_to(tmp_path / "absent.py")
    made = bytecode.compile_trees([(module, "/opt/venv/gone.py")], tmp_path / "cache", 1)
    assert made == bytecode.Compiled()
