"""Bytecode of the venv's Python files as compileall writes it: checked-hash .pyc files that
name each source by its path in the image. Kept in the host's cache by what decides its
bytes (the Python that compiles, the path in the image, the source's bytes), so a
Python-only change compiles only the files it changed. An entry holds the sha256 of its
.pyc before it; one that does not match is dropped and its source compiled again."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import py_compile
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sparkbake.files import atomic_write

__all__ = ["Compiled", "compile_trees", "sources"]

MODE = py_compile.PycInvalidationMode.CHECKED_HASH
DIGEST = 32  # bytes of sha256 before an entry's .pyc
CHUNK = 64  # sources per task: one process start compiles many


@dataclass(frozen=True)
class Compiled:
    """How the bytecode of a tree was made: from the cache, compiled, or not at all (a file
    that does not compile, a template or Python 2, stays source only, as pip leaves it)."""

    reused: int = 0
    compiled: int = 0
    failed: int = 0
    dropped: int = 0  # damaged cache entries, compiled again

    def __add__(self, other: Compiled) -> Compiled:
        return Compiled(self.reused + other.reused, self.compiled + other.compiled,
                        self.failed + other.failed, self.dropped + other.dropped)


def sources(path: Path) -> list[Path]:
    """What compileall.compile_dir compiles under the folder path, in its order: .py files at
    any depth, none in __pycache__ nor under a linked folder (a linked file is compiled)."""
    found: list[Path] = []
    try:
        names = sorted(os.listdir(path))
    except OSError:  # as compileall: a folder it cannot list holds nothing to compile
        return found
    for name in names:
        if name == "__pycache__":
            continue
        entry = path / name
        if entry.is_dir():
            if not entry.is_symlink():
                found += sources(entry)
        elif name.endswith(".py") and entry.is_file():
            found.append(entry)
    return found


def compile_trees(trees: list[tuple[Path, str]], cache: Path | None,
                  workers: int) -> Compiled:
    """The bytecode of each source file or folder path, whose path in the image is where
    (trees: (path, where) pairs); each .pyc from cache when it holds it (None: no cache),
    else compiled and kept there. On workers processes."""
    jobs = []
    for path, where in trees:
        if path.is_dir():
            jobs += [(str(source), f"{where}/{source.relative_to(path).as_posix()}")
                     for source in sources(path)]
        elif path.suffix == ".py" and path.is_file():
            jobs.append((str(path), where))
    folder = None if cache is None else str(cache)
    chunks = [(jobs[start:start + CHUNK], folder) for start in range(0, len(jobs), CHUNK)]
    if workers < 2 or len(chunks) < 2:
        return sum(map(_compile_chunk, chunks), Compiled())
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(_compile_chunk, chunks), Compiled())


def _compile_chunk(chunk: tuple[list[tuple[str, str]], str | None]) -> Compiled:
    jobs, cache = chunk
    # as pip does: the compiler's warnings about the packages' code are not ours to show
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sum((_compile_one(source, where, cache) for source, where in jobs), Compiled())


def _compile_one(source: str, where: str, cache: str | None) -> Compiled:
    pyc = importlib.util.cache_from_source(source)
    if cache is None:
        return Compiled(compiled=1) if _compiled(source, pyc, where) else Compiled(failed=1)
    try:
        with open(source, "rb") as file:
            key = hashlib.sha256(_identity(where) + file.read()).hexdigest()
    except OSError:  # unreadable: compileall leaves it as source too
        return Compiled(failed=1)
    entry = Path(cache, key[:2], key)
    held, dropped = _held(entry)
    if held is not None:
        try:
            _write_pyc(pyc, held, source)
        except OSError:  # as compileall: a .pyc that cannot be written is left out
            return Compiled(failed=1)
        return Compiled(reused=1)
    if not _compiled(source, pyc, where):
        return Compiled(failed=1, dropped=dropped)
    _keep(entry, pyc)
    return Compiled(compiled=1, dropped=dropped)


def _held(entry: Path) -> tuple[bytes | None, int]:
    """The .pyc that entry holds, its digest checked; and 1 when it held a damaged one,
    now dropped. A cache that cannot be read holds nothing: the source is compiled."""
    try:
        held = entry.read_bytes()
    except OSError:
        return None, 0
    if hashlib.sha256(held[DIGEST:]).digest() == held[:DIGEST]:
        return held[DIGEST:], 0
    with contextlib.suppress(OSError):
        entry.unlink()
    return None, 1


def _keep(entry: Path, pyc: str) -> None:
    """pyc into the cache as entry; a cache that cannot be written (full, read-only, not a
    folder) keeps nothing, and the bake goes on."""
    with contextlib.suppress(OSError):
        made = Path(pyc).read_bytes()
        atomic_write(entry, hashlib.sha256(made).digest() + made)


def _identity(where: str) -> bytes:
    """What besides the source decides a .pyc's bytes: the compiling Python, its
    optimisation level, and the source's path as the .pyc names it."""
    text = f"{sys.version}\0{sys.flags.optimize}\0{MODE.name}\0{where}\0"
    return text.encode("utf-8", "surrogateescape")  # a file name need not be UTF-8


def _write_pyc(pyc: str, data: bytes, source: str) -> None:
    """pyc as py_compile writes it: through a file beside it, renamed; with the source's
    mode, made writable, without execute bits (and this process's umask)."""
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    mode = (os.stat(source).st_mode | 0o200) & 0o666
    temp = f"{pyc}.{os.getpid()}.tmp"
    descriptor = os.open(temp, os.O_EXCL | os.O_CREAT | os.O_WRONLY, mode)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.replace(temp, pyc)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _compiled(source: str, pyc: str, where: str) -> bool:
    """compileall.compile_file's compile of source into pyc, naming it where."""
    try:
        py_compile.compile(source, pyc, where, doraise=True, invalidation_mode=MODE)
    except (py_compile.PyCompileError, SyntaxError, UnicodeError, OSError):
        return False
    return True
