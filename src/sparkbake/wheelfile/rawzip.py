"""A zip file written member by member, where a member of another zip file is copied as its
compressed bytes (neither inflated nor deflated again): a wheel with a few changed files costs
a copy of its bytes, not a compression of them. The headers hold only what is given (name,
date, mode, method, CRC, sizes), so the same members give the same bytes on any machine.

No zip64: an archive that would need it (4 GiB, 65535 members) is refused, as is a member
that is encrypted or compressed other than stored or deflated (a wheel's are not)."""

from __future__ import annotations

import hashlib
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sparkbake.errors import BuildError

__all__ = ["Member", "Writer"]

LOCAL = struct.Struct("<4sHHHHHIIIHH")  # local file header, before name and extra field
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # central directory header, before the name
END = struct.Struct("<4sHHHHIIH")  # end of central directory record
LOCAL_SIGNATURE, CENTRAL_SIGNATURE, END_SIGNATURE = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
VERSION = 20  # 2.0, what zipfile writes for stored and deflated members
MADE_BY = 3 << 8 | VERSION  # Unix: the external attributes hold a file mode
UTF8_NAME = 0x800  # flag bit 11
ENCRYPTED = 0x1  # flag bit 0
LIMIT = 0xFFFFFFFF  # sizes and offsets at or past this need zip64
MEMBERS_LIMIT = 0xFFFF
CHUNK = 1 << 20
METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)


@dataclass(frozen=True)
class Member:
    """A member of a zip file on disk, as the file's central directory describes it."""

    archive: Path
    info: zipfile.ZipInfo


@dataclass(frozen=True)
class _Header:
    """What the central directory repeats of a member written."""

    name: bytes
    flags: int
    method: int
    crc: int
    compressed: int
    size: int
    mode: int
    offset: int


class Writer:
    """Members written to out in the order given, all dated date_time; close() writes the
    central directory and returns the sha256 of every byte written (no second read)."""

    def __init__(self, out: BinaryIO, date_time: tuple[int, ...]) -> None:
        self._out = out
        self._dos_time, self._dos_date = _dos(date_time)
        self._headers: list[_Header] = []
        self._offset = 0
        self._sha256 = hashlib.sha256()

    def add(self, name: str, data: bytes, mode: int) -> None:
        """data as a deflated member, compressed as zipfile compresses it."""
        deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
        packed = deflate.compress(data) + deflate.flush()
        self._member(name, zipfile.ZIP_DEFLATED, zlib.crc32(data), len(data), mode,
                     len(packed), iter((packed,)))

    def copy(self, name: str, source: BinaryIO, info: zipfile.ZipInfo, mode: int) -> None:
        """The member info of the zip file open as source, its compressed bytes and CRC as
        they are (pip and zipfile check the CRC when they inflate it)."""
        _require_copyable(info)
        self._member(name, info.compress_type, info.CRC, info.file_size, mode,
                     info.compress_size, _compressed(source, info))

    def close(self) -> str:
        """The central directory and its end record; returns the file's sha256 (hex)."""
        start = self._offset
        for header in self._headers:
            self._emit(CENTRAL.pack(
                CENTRAL_SIGNATURE, MADE_BY, VERSION, header.flags, header.method,
                self._dos_time, self._dos_date, header.crc, header.compressed, header.size,
                len(header.name), 0, 0, 0, 0, _external(header.mode), header.offset))
            self._emit(header.name)
        count, size = len(self._headers), self._offset - start
        if count > MEMBERS_LIMIT or self._offset >= LIMIT:
            raise _needs_zip64(f"{count} members, {self._offset} bytes")
        self._emit(END.pack(END_SIGNATURE, 0, 0, count, count, size, start, 0))
        return self._sha256.hexdigest()

    def _member(self, name: str, method: int, crc: int, size: int, mode: int,
                compressed: int, data: Iterator[bytes]) -> None:
        if max(size, compressed, self._offset) >= LIMIT:
            raise _needs_zip64(f"{name} ({size} bytes) at offset {self._offset}")
        encoded, flags = _encoded(name)
        header = _Header(encoded, flags, method, crc, compressed, size, mode, self._offset)
        self._emit(LOCAL.pack(LOCAL_SIGNATURE, VERSION, flags, method, self._dos_time,
                              self._dos_date, crc, compressed, size, len(encoded), 0))
        self._emit(encoded)
        written = 0
        for chunk in data:
            self._emit(chunk)
            written += len(chunk)
        if written != compressed:
            raise BuildError(f"{name}: {written} of its {compressed} compressed bytes could be "
                             "read", "the wheel is truncated: remove it and build again")
        self._headers.append(header)

    def _emit(self, data: bytes) -> None:
        self._out.write(data)
        self._sha256.update(data)
        self._offset += len(data)


def _compressed(source: BinaryIO, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The member's compressed bytes: after its local header, whose name and extra field may
    be other lengths than the central directory's."""
    source.seek(info.header_offset)
    fixed = source.read(LOCAL.size)
    if len(fixed) != LOCAL.size or fixed[:4] != LOCAL_SIGNATURE:
        raise BuildError(f"{info.filename}: no local header where the central directory "
                         "says", "the wheel is damaged: remove it and build again")
    *_, name_length, extra_length = LOCAL.unpack(fixed)
    source.seek(name_length + extra_length, 1)
    left = info.compress_size
    while left and (chunk := source.read(min(CHUNK, left))):
        left -= len(chunk)
        yield chunk


def _require_copyable(info: zipfile.ZipInfo) -> None:
    if info.flag_bits & ENCRYPTED or info.compress_type not in METHODS:
        raise BuildError(f"{info.filename} is encrypted or compressed with method "
                         f"{info.compress_type}; a wheel's members are stored or deflated",
                         "take the wheel from its build backend as it was written")


def _needs_zip64(what: str) -> BuildError:
    return BuildError(f"a wheel of {what} needs zip64, which sparkbake does not write",
                      "keep the wheel under 4 GiB and 65535 files")


def _encoded(name: str) -> tuple[bytes, int]:
    """The name's bytes and flags: ASCII as it is, else UTF-8 with bit 11 (zipfile's rule)."""
    try:
        return name.encode("ascii"), 0
    except UnicodeEncodeError:
        return name.encode("utf-8"), UTF8_NAME


def _external(mode: int) -> int:
    """A regular file's Unix mode in the high half, as zipfile reads it back."""
    return (stat.S_IFREG | mode & 0o7777) << 16


def _dos(date_time: tuple[int, ...]) -> tuple[int, int]:
    year, month, day, hour, minute, second = date_time[:6]
    return hour << 11 | minute << 5 | second // 2, (year - 1980) << 9 | month << 5 | day
