"""Wheels read and written on this host: entries in memory, written so that the same entries
and source date always give the same bytes (the seeded wheel, the version stamp)."""

from __future__ import annotations

import csv
import functools
import io
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from sparkbake.hashing import record_hash

__all__ = ["FORMAT", "ZIP_EPOCH", "Entries", "Entry", "dist_info", "read", "write"]

FORMAT = 2  # raise when write() gives other bytes for the same entries (2: RECORD as CSV)
ZIP_EPOCH = 315532800  # 1980-01-01: the earliest time a zip entry stores

Entry = tuple[int, Callable[[], bytes]]  # file mode, and how to read its bytes
Entries = dict[str, Entry]  # by path in the wheel; RECORD is left out, write() makes it


def dist_info(names: Iterable[str]) -> str:
    """The wheel's metadata folder, `<name>-<version>.dist-info`: the one holding METADATA."""
    found = sorted({name.split("/", 1)[0] for name in names
                    if name.count("/") == 1 and name.endswith(".dist-info/METADATA")})
    if len(found) != 1:
        raise ValueError(f"a wheel has one .dist-info folder with METADATA, found {found}")
    return found[0]


def read(archive: zipfile.ZipFile) -> Entries:
    """Every file of an open wheel but its RECORD; the bytes are read when written."""
    infos = [i for i in archive.infolist() if not i.filename.endswith("/")]
    record = dist_info(i.filename for i in infos) + "/RECORD"
    return {info.filename: (info.external_attr >> 16 or 0o644,
                            functools.partial(archive.read, info))
            for info in infos if info.filename != record}


def write(dest: Path, files: Entries, source_date: int) -> None:
    """A wheel whose bytes depend only on files and source_date: sorted entries but the
    metadata last (as wheels write it), one time, RECORD made anew."""
    stamp = time.gmtime(max(source_date, ZIP_EPOCH))[:6]
    metadata = dist_info(files) + "/"
    record = metadata + "RECORD"
    lines = io.StringIO()
    rows = csv.writer(lines, lineterminator="\n")  # quoted where a path holds a comma
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for name in sorted(files, key=lambda name: (name.startswith(metadata), name)):
            mode, read_bytes = files[name]
            data = read_bytes()
            out.writestr(_zip_info(name, stamp, mode), data)
            rows.writerow((name, record_hash(data), len(data)))
        rows.writerow((record, "", ""))
        out.writestr(_zip_info(record, stamp, 0o644), lines.getvalue())


def _zip_info(name: str, stamp: tuple[int, ...], mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=stamp)  # type: ignore[arg-type]
    info.external_attr = (mode & 0o7777 | 0o100000) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info
