"""Image layers written the same way every time, and read back entry by entry.

A layer is a tar with its entries in path order, every mtime set to the source date, owner
root (0/0, no names), no extended attributes, and hard links stored as plain files; it is
gzip-compressed with no file name and no time in the gzip header, block by block on every
core (blockgzip: the same bytes whatever the number of cores). Equal trees give equal bytes,
so equal digests.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sparkbake.errors import BakeError
from sparkbake.oci import blockgzip
from sparkbake.oci.blockgzip import BlockGzip
from sparkbake.oci.image_layout import LAYER_TYPE

__all__ = ["COMPRESSION", "MEDIA_TYPE", "Entry", "Layer", "compress", "entries", "from_archive",
           "from_files", "from_folder", "from_paths"]

MEDIA_TYPE = LAYER_TYPE
COMPRESSION = blockgzip.FORMAT  # the compressor, its level and block size: part of layer keys
CHUNK = 1 << 20
KINDS = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir",
         tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink"}


@dataclass(frozen=True)
class Layer:
    """A compressed layer file: its blob digest and size, and the digest of its tar."""

    path: Path
    digest: str  # sha256:<hex> of the gzip bytes
    size: int
    diff_id: str  # sha256:<hex> of the uncompressed tar


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through it."""

    def __init__(self, sink: IO[bytes] | BlockGzip) -> None:
        super().__init__()
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.size += len(view)
        self.sink.write(view)
        return len(view)

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


class _Writer:
    """Writes a tar through gzip into path, hashing both; workers: threads that gzip (the
    bytes are the same for any count: blockgzip)."""

    def __init__(self, path: Path, workers: int) -> None:
        self.path = path
        path.unlink(missing_ok=True)  # a new file: never write through a link into a layout
        self.file = path.open("wb")
        self.blob = _Hashing(self.file)
        self.gzip = BlockGzip(self.blob, workers=workers)
        self.tar_stream = _Hashing(self.gzip)

    def tar(self) -> tarfile.TarFile:
        return tarfile.open(fileobj=self.tar_stream, mode="w|", format=tarfile.PAX_FORMAT)

    def close(self) -> Layer:
        self.gzip.close()
        self.file.close()
        return Layer(self.path, self.blob.digest, self.blob.size, self.tar_stream.digest)


def _info(name: str, kind: bytes, mode: int, mtime: int, size: int = 0,
          linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode & 0o7777, mtime
    info.size, info.linkname = size, linkname
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _parts(name: str) -> list[str]:
    return [part for part in name.split("/") if part not in ("", ".")]


def _parents(paths: list[str]) -> list[str]:
    """Every folder above the given paths, outermost first."""
    found = {"/".join(_parts(p)[:depth]) for p in paths for depth in range(1, len(_parts(p)))}
    return sorted(found, key=_parts)


def from_files(files: Mapping[str, tuple[bytes | None, int]], dest: Path, mtime: int, *,
               workers: int = 1) -> Layer:
    """A layer holding files (path -> (content, mode); content None: a folder of that mode)
    and their folders (0755); workers: the threads that compress it."""
    writer = _Writer(dest, workers)
    entries = {path: (None, 0o755) for path in _parents(list(files))} | dict(files)
    with writer.tar() as tar:
        for path, (content, mode) in sorted(entries.items(), key=lambda item: _parts(item[0])):
            if content is None:
                tar.addfile(_info(path, tarfile.DIRTYPE, mode, mtime))
            else:
                tar.addfile(_info(path, tarfile.REGTYPE, mode, mtime, len(content)),
                            io.BytesIO(content))
    return writer.close()


def from_archive(source: Path, dest: Path, prefix: str, mtime: int, *,
                 workers: int = 1) -> Layer:
    """The tar `docker cp` made of a container path, as a layer below prefix (e.g. `opt`)."""
    writer = _Writer(dest, workers)
    with tarfile.open(source) as archive, writer.tar() as tar:
        members = sorted(archive.getmembers(), key=lambda m: _parts(m.name))
        for folder in [*_parents([prefix]), "/".join(_parts(prefix))]:
            tar.addfile(_info(folder, tarfile.DIRTYPE, 0o755, mtime))
        for member in members:
            name = "/".join([*_parts(prefix), *_parts(member.name)])
            tar.addfile(*_normalized(archive, member, name, mtime))
    return writer.close()


def from_folder(root: Path, dest: Path, mtime: int, *, workers: int = 1) -> Layer:
    """Everything under root as a layer (root is the image's `/`)."""
    return from_paths(root, [p.relative_to(root).as_posix() for p in root.rglob("*")], dest,
                      mtime, workers=workers)


def from_paths(root: Path, names: Iterable[str], dest: Path, mtime: int, *,
               workers: int = 1) -> Layer:
    """The given paths under root (files, links, folders; relative, `/`-separated) and the
    folders above them, as a layer (root is the image's `/`): modes as git records them
    (0755 for folders and executables, else 0644), whatever the host's umask was."""
    writer = _Writer(dest, workers)
    chosen = set(names)
    with writer.tar() as tar:
        for name in sorted(chosen | set(_parents(list(chosen))), key=_parts):
            info = _info_of(root / name, name, mtime)
            if info.isfile():
                with (root / name).open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
    return writer.close()


def _info_of(path: Path, name: str, mtime: int) -> tarfile.TarInfo:
    if path.is_symlink():
        return _info(name, tarfile.SYMTYPE, 0o777, mtime, linkname=os.readlink(path))
    if path.is_dir():
        return _info(name, tarfile.DIRTYPE, 0o755, mtime)
    if path.is_file():
        mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
        return _info(name, tarfile.REGTYPE, mode, mtime, path.stat().st_size)
    raise BakeError(f"/{name}: a special file cannot go into a layer",
                    "install nothing that creates devices or pipes")


def _normalized(archive: tarfile.TarFile, member: tarfile.TarInfo, name: str,
                mtime: int) -> tuple[tarfile.TarInfo, IO[bytes] | None]:
    if member.isdir():
        return _info(name, tarfile.DIRTYPE, member.mode, mtime), None
    if member.issym():
        return _info(name, tarfile.SYMTYPE, member.mode, mtime, linkname=member.linkname), None
    if member.isfile() or member.islnk():  # a hard link becomes a copy: order-independent
        content = archive.getmember(member.linkname) if member.islnk() else member
        data = archive.extractfile(content)
        assert data is not None
        return _info(name, tarfile.REGTYPE, member.mode, mtime, content.size), data
    raise BakeError(f"{name}: a special file (tar type {member.type!r}) cannot go into a layer",
                    "install nothing that creates devices or pipes")


def compress(source: IO[bytes], dest: Path, *, workers: int = 1) -> Layer:
    """Gzip a tar as it is (a base layer): its diff_id is the digest of source's bytes."""
    writer = _Writer(dest, workers)
    while chunk := source.read(CHUNK):
        writer.tar_stream.write(chunk)
    return writer.close()


@dataclass(frozen=True)
class Entry:
    """One path of a layer, as `verify` compares it."""

    kind: str  # file, dir, symlink, hardlink, other
    mode: int
    owner: str  # uid:gid
    mtime: int
    size: int
    sha256: str  # of a file's content; "" for others
    target: str  # of a link

    def describe(self) -> str:
        what = f"{self.size} bytes sha256:{self.sha256[:16]}" if self.kind == "file" else \
            (f"-> {self.target}" if self.target else self.kind)
        return f"{what} mode {self.mode:o} owner {self.owner} mtime {self.mtime}"


def entries(blob: Path) -> dict[str, Entry]:
    """Every path of a layer blob (gzip or plain tar) with what verify compares."""
    return dict(_entries(blob))


def _entries(blob: Path) -> Iterator[tuple[str, Entry]]:
    with tarfile.open(blob, "r|*") as tar:
        for member in tar:
            digest = ""
            if member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                sha = hashlib.sha256()
                while chunk := data.read(CHUNK):
                    sha.update(chunk)
                digest = sha.hexdigest()
            yield "/".join(_parts(member.name)), Entry(
                KINDS.get(member.type, "other"), member.mode, f"{member.uid}:{member.gid}",
                int(member.mtime), member.size if member.isfile() else 0, digest,
                member.linkname)
