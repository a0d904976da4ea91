"""Content hashes: of files, of trees, of plain data. Every cache key is one of these."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["data_hash", "file_sha256", "record_hash", "record_hash_of_file", "tree_files",
           "tree_hash"]

CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    return _file_digest(path).hexdigest()


def record_hash(data: bytes) -> str:
    """A file's hash as a wheel's RECORD writes it: sha256=<urlsafe base64, no padding>."""
    return _record_form(hashlib.sha256(data).digest())


def record_hash_of_file(path: Path) -> str:
    """record_hash of a file's bytes, read in chunks."""
    return _record_form(_file_digest(path).digest())


def _file_digest(path: Path) -> hashlib._Hash:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest


def _record_form(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def data_hash(data: Any) -> str:
    """sha256 of canonical JSON: the key of a stage from its inputs."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def tree_files(root: Path, skip: Iterable[str] = (".git",)) -> list[Path]:
    """Every file and symlink under root, sorted, relative to root; skipped names pruned."""
    skipped = set(skip)
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skipped)
        base = Path(folder)
        found.extend(base / name for name in files if name not in skipped)
        found.extend(base / d for d in dirs if (base / d).is_symlink())
    return sorted(p.relative_to(root) for p in found)


def tree_hash(root: Path, skip: Iterable[str] = (".git",)) -> str:
    """Hash of paths, executable bits, symlink targets and contents; mtimes do not count."""
    digest = hashlib.sha256()
    for rel in tree_files(root, skip):
        path = root / rel
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            entry = f"L {rel} {os.readlink(path)}"
        else:
            executable = "x" if mode & stat.S_IXUSR else "-"
            entry = f"F {rel} {executable} {file_sha256(path)}"
        digest.update(entry.encode() + b"\n")
    return digest.hexdigest()
