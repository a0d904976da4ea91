"""Wheels read and written on this host: entries in memory, written so that the same entries
and source date always give the same bytes (the seeded wheel, the version stamp). An entry
read from a wheel and left as it is keeps its compressed bytes, and its RECORD hash where the
wheel's RECORD lists it: the seeded wheel's gigabyte of kernels is copied, never inflated,
hashed or deflated again (rawzip)."""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sparkbake.hashing import record_hash
from sparkbake.wheelfile.rawzip import Member, Writer

__all__ = ["FORMAT", "ZIP_EPOCH", "Entries", "Entry", "dist_info", "read", "spelled_name",
           "write"]

FORMAT = 3  # raise when write() gives other bytes for the same entries (3: members copied)
ZIP_EPOCH = 315532800  # 1980-01-01: the earliest time a zip entry stores


@dataclass(frozen=True)
class Entry:
    """A file of a wheel: its mode and how to read its bytes; where it is a wheel's member
    unchanged, that member (copied compressed) and the RECORD hash the wheel lists for it."""

    mode: int
    read: Callable[[], bytes]
    stored: Member | None = None
    digest: str = ""  # `sha256=...` as RECORD writes it; "" when the bytes must be hashed


Entries = dict[str, Entry]  # by path in the wheel; RECORD is left out, write() makes it


def spelled_name(file_name: str) -> str:
    """A wheel's distribution name as its file name spells it (`flash_attn`, `PyYAML`): the
    records keep it so, where packaging's parse_wheel_filename gives the normalized name. A
    wheel name escapes `-` in its distribution, so the name ends at the first `-`."""
    return file_name.partition("-")[0]


def dist_info(names: Iterable[str]) -> str:
    """The wheel's metadata folder, `<name>-<version>.dist-info`: the one holding METADATA."""
    found = sorted({name.split("/", 1)[0] for name in names
                    if name.count("/") == 1 and name.endswith(".dist-info/METADATA")})
    if len(found) != 1:
        raise ValueError(f"a wheel has one .dist-info folder with METADATA, found {found}")
    return found[0]


def read(archive: zipfile.ZipFile) -> Entries:
    """Every file of a wheel open from its path but its RECORD; the bytes are read when
    written, and only those of members changed or not listed in RECORD."""
    if archive.filename is None:
        raise ValueError("a wheel is read from its file, whose members are copied")
    path = Path(archive.filename)
    infos = [i for i in archive.infolist() if not i.filename.endswith("/")]
    record = dist_info(i.filename for i in infos) + "/RECORD"
    listed = _listed(archive, record) if record in archive.NameToInfo else {}
    return {info.filename: Entry(info.external_attr >> 16 or 0o644,
                                 functools.partial(archive.read, info), Member(path, info),
                                 _digest(listed, info))
            for info in infos if info.filename != record}


def write(dest: Path, files: Entries, source_date: int) -> str:
    """A wheel whose bytes depend only on files and source_date: sorted entries but the
    metadata last (as wheels write it), one time, RECORD made anew. Returns its sha256."""
    stamp = time.gmtime(max(source_date, ZIP_EPOCH))[:6]
    metadata = dist_info(files) + "/"
    record = metadata + "RECORD"
    lines = io.StringIO()
    rows = csv.writer(lines, lineterminator="\n")  # quoted where a path holds a comma
    with dest.open("wb") as handle, contextlib.ExitStack() as stack:
        out = Writer(handle, stamp)
        sources: dict[Path, BinaryIO] = {}

        def source(path: Path) -> BinaryIO:
            if path not in sources:
                sources[path] = stack.enter_context(path.open("rb"))
            return sources[path]

        for name in sorted(files, key=lambda name: (name.startswith(metadata), name)):
            rows.writerow((name, *_write_entry(out, name, files[name], source)))
        rows.writerow((record, "", ""))
        out.add(record, lines.getvalue().encode(), 0o644)
        return out.close()


def _write_entry(out: Writer, name: str, entry: Entry,
                 source: Callable[[Path], BinaryIO]) -> tuple[str, int]:
    """Write one entry; its RECORD hash and size."""
    if entry.stored is None:
        data = entry.read()
        out.add(name, data, entry.mode)
        return record_hash(data), len(data)
    out.copy(name, source(entry.stored.archive), entry.stored.info, entry.mode)
    if entry.digest:
        return entry.digest, entry.stored.info.file_size
    data = entry.read()
    return record_hash(data), len(data)


def _listed(archive: zipfile.ZipFile, record: str) -> dict[str, tuple[str, int]]:
    """The wheel's RECORD: each path's sha256 and size, where it gives both."""
    listed: dict[str, tuple[str, int]] = {}
    text = archive.read(record).decode("utf-8", errors="replace")
    for row in csv.reader(text.splitlines()):
        if len(row) == 3 and row[1].startswith("sha256=") and row[2].isdigit():
            listed[row[0]] = (row[1], int(row[2]))
    return listed


def _digest(listed: dict[str, tuple[str, int]], info: zipfile.ZipInfo) -> str:
    """RECORD's hash of the member when RECORD gives the member's own size with it (the
    wheel's sha256 is checked, so its RECORD is as trusted as its files), else ""."""
    digest, size = listed.get(info.filename, ("", -1))
    return digest if size == info.file_size else ""
