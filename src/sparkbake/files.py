"""Cache entries are written beside their place and renamed in: never half there."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkbake.errors import damaged_record

__all__ = ["atomic_dir", "atomic_write", "link_or_copy", "naming", "read_json", "scratch_dir"]


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary folder that becomes `final` only if the block completes."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write(final: Path, data: str | bytes) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        os.replace(name, final)
    except BaseException:  # a full disk, an interrupt: no half-written file stays behind
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


def link_or_copy(source: Path, dest: Path) -> None:
    """dest as a hard link to source (no bytes copied), or a copy across file systems."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)


@contextlib.contextmanager
def scratch_dir(parent: Path, prefix: str, keep: bool = False) -> Iterator[Path]:
    """A temporary folder under parent, removed afterwards unless keep is set."""
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError of the block that names no file (a write to a full disk) names path."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def read_json(path: Path) -> Any:
    """A JSON record sparkbake wrote; one that does not parse is a DamagedRecord naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise damaged_record(path, exc) from exc
