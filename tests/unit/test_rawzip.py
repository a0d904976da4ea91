"""Zip members copied as their compressed bytes, and wheels rewritten with them: what zipfile,
unzip and pip read back, the same bytes every time, RECORD right without inflating."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkbake.errors import BuildError
from sparkbake.wheelfile import contents, rawzip

DATE = (2025, 1, 1, 0, 0, 0)
SOURCE_DATE = 1735689600
LIBRARY = bytes(range(256)) * 4096  # 1 MiB that deflates
SEED = "pkg-1.0-py3-none-any.whl"


class Unseekable(io.RawIOBase):
    """A stream zipfile cannot seek back in: it writes data descriptors (flag bit 3)."""

    def __init__(self, sink: io.BytesIO) -> None:
        self.sink = sink

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        return self.sink.write(bytes(data))  # type: ignore[call-overload]


def make_source(path: Path) -> dict[str, bytes]:
    """A zip with deflated and stored members, extra fields only in the local headers, a
    UTF-8 name and data descriptors: what the copier must read past."""
    members = {"pkg/_C.so": LIBRARY, "pkg/stored.txt": b"as it is\n",
               "pkg/données.py": "é = 1\n".encode(), "pkg/empty.py": b""}
    sink = io.BytesIO()
    with zipfile.ZipFile(Unseekable(sink), "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 5, 6, 7, 8, 10))
            info.compress_type = (zipfile.ZIP_STORED if name.endswith(".txt")
                                  else zipfile.ZIP_DEFLATED)
            info.external_attr = 0o100755 << 16
            info.extra = b"\xca\xfe\x04\x00abcd"  # an unknown extra field, 4 bytes
            archive.writestr(info, data)
    path.write_bytes(sink.getvalue())
    return members


def copy_all(source: Path, dest: Path, added: dict[str, bytes] | None = None) -> str:
    with zipfile.ZipFile(source) as archive, source.open("rb") as raw, dest.open("wb") as out:
        writer = rawzip.Writer(out, DATE)
        for info in archive.infolist():
            writer.copy(info.filename, raw, info, 0o644)
        for name, data in (added or {}).items():
            writer.add(name, data, 0o755)
        return writer.close()


def test_copied_members_read_back_as_the_source_with_the_given_headers(tmp_path: Path) -> None:
    members = make_source(tmp_path / "source.zip")
    sha256 = copy_all(tmp_path / "source.zip", tmp_path / "copy.zip", {"pkg/new.py": b"x = 1\n"})
    assert sha256 == hashlib.sha256((tmp_path / "copy.zip").read_bytes()).hexdigest()
    with zipfile.ZipFile(tmp_path / "copy.zip") as archive:
        assert archive.testzip() is None
        assert {n: archive.read(n) for n in archive.namelist()} == \
            {**members, "pkg/new.py": b"x = 1\n"}
        infos = archive.infolist()
    assert {info.date_time for info in infos} == {DATE}
    assert [info.external_attr >> 16 for info in infos] == [0o100644] * 4 + [0o100755]
    assert {info.flag_bits & 0x8 for info in infos} == {0}  # sizes in the local headers
    assert {info.extra for info in infos} == {b""}
    with zipfile.ZipFile(tmp_path / "source.zip") as source:
        packed = {i.filename: (i.compress_type, i.compress_size) for i in source.infolist()}
    assert {i.filename: (i.compress_type, i.compress_size) for i in infos[:4]} == packed


def test_unzip_tests_the_copy(tmp_path: Path) -> None:
    if shutil.which("unzip") is None:
        pytest.skip("no unzip on this host")
    make_source(tmp_path / "source.zip")
    copy_all(tmp_path / "source.zip", tmp_path / "copy.zip", {"pkg/new.py": b"x = 1\n"})
    subprocess.run(["unzip", "-tq", str(tmp_path / "copy.zip")], check=True,
                   capture_output=True)


def test_the_same_members_give_the_same_bytes(tmp_path: Path) -> None:
    make_source(tmp_path / "source.zip")
    first = copy_all(tmp_path / "source.zip", tmp_path / "a.zip")
    (tmp_path / "moved.zip").write_bytes(b"prefix" + (tmp_path / "source.zip").read_bytes())
    assert copy_all(tmp_path / "moved.zip", tmp_path / "b.zip") == first  # offsets differ
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()


def test_a_truncated_member_and_a_foreign_method_are_refused(tmp_path: Path) -> None:
    make_source(tmp_path / "source.zip")
    with zipfile.ZipFile(tmp_path / "source.zip") as archive:
        info = archive.getinfo("pkg/_C.so")
    end = info.header_offset + 30 + len(info.filename) + len(info.extra) + 1000
    (tmp_path / "cut.zip").write_bytes((tmp_path / "source.zip").read_bytes()[:end])
    with (tmp_path / "cut.zip").open("rb") as raw, io.BytesIO() as out, \
            pytest.raises(BuildError, match="truncated"):
        rawzip.Writer(out, DATE).copy(info.filename, raw, info, 0o644)
    info.compress_type = zipfile.ZIP_LZMA
    with pytest.raises(BuildError, match="stored or deflated"):
        rawzip.Writer(io.BytesIO(), DATE).copy(info.filename, io.BytesIO(), info, 0o644)


def test_an_archive_that_needs_zip64_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rawzip, "LIMIT", 100)
    writer = rawzip.Writer(io.BytesIO(), DATE)
    writer.add("a", b"small", 0o644)
    with pytest.raises(BuildError, match="needs zip64"):
        writer.add("b", bytes(200), 0o644)


def record_of(names_and_data: dict[str, bytes]) -> str:
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for name, data in names_and_data.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow((name, f"sha256={digest}", len(data)))
    return rows.getvalue()


def make_wheel(path: Path, record: str | None = None) -> dict[str, bytes]:
    files = {"pkg/__init__.py": b"VERSION = 1\n", "pkg/_C.so": LIBRARY,
             "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
             "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                                        b"Tag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("pkg-1.0.dist-info/RECORD", record_of(files) if record is None else record)
    return files


def rewrite(seed: Path, dest: Path) -> str:
    """The seed with a changed and an added file, as the overlay makes a wheel."""
    with zipfile.ZipFile(seed) as archive:
        files = contents.read(archive)
        files["pkg/__init__.py"] = contents.Entry(0o644, lambda: b"VERSION = 2\n")
        files["pkg/added.py"] = contents.Entry(0o644, lambda: b"added = True\n")
        return contents.write(dest, files, SOURCE_DATE)


def read_back(wheel: Path) -> tuple[dict[str, bytes], list[list[str]]]:
    with zipfile.ZipFile(wheel) as archive:
        assert archive.testzip() is None
        files = {name: archive.read(name) for name in archive.namelist()}
    record = files.pop("pkg-1.0.dist-info/RECORD").decode()
    return files, list(csv.reader(record.splitlines()))


def test_a_rewritten_wheel_keeps_the_unchanged_compressed_bytes_and_a_right_record(
        tmp_path: Path) -> None:
    (tmp_path / "seed").mkdir()
    seed = make_wheel(tmp_path / "seed" / SEED)
    (tmp_path / "out").mkdir()
    sha256 = rewrite(tmp_path / "seed" / SEED, tmp_path / "out" / SEED)
    assert sha256 == hashlib.sha256((tmp_path / "out" / SEED).read_bytes()).hexdigest()
    files, record = read_back(tmp_path / "out" / SEED)
    assert files == {**seed, "pkg/__init__.py": b"VERSION = 2\n",
                     "pkg/added.py": b"added = True\n"}
    assert record[:-1] == list(csv.reader(record_of(files).splitlines()))
    assert record[-1] == ["pkg-1.0.dist-info/RECORD", "", ""]
    with zipfile.ZipFile(tmp_path / "seed" / SEED) as before, \
            zipfile.ZipFile(tmp_path / "out" / SEED) as after:
        # level 9 in the seed: a member deflated again would be other bytes
        assert after.getinfo("pkg/_C.so").compress_size == \
            before.getinfo("pkg/_C.so").compress_size


def test_record_hashes_of_unchanged_members_come_from_the_seeds_record(tmp_path: Path) -> None:
    """Taken as listed (the library is not inflated to hash it); hashed where RECORD's size
    is not the member's, or it is not listed."""
    (tmp_path / "seed").mkdir()
    listed = "pkg/_C.so,sha256=as-listed,1048576\npkg-1.0.dist-info/WHEEL,sha256=wrong,1\n"
    seed = make_wheel(tmp_path / "seed" / SEED, record=listed)
    (tmp_path / "out").mkdir()
    rewrite(tmp_path / "seed" / SEED, tmp_path / "out" / SEED)
    _, record = read_back(tmp_path / "out" / SEED)
    hashed = dict(row[:2] for row in csv.reader(record_of(seed).splitlines()))
    rows = {row[0]: row[1] for row in record}
    assert rows["pkg/_C.so"] == "sha256=as-listed"
    assert rows["pkg-1.0.dist-info/WHEEL"] == hashed["pkg-1.0.dist-info/WHEEL"]
    assert rows["pkg-1.0.dist-info/METADATA"] == hashed["pkg-1.0.dist-info/METADATA"]


def test_a_rewritten_wheel_is_the_same_bytes_every_time_and_pip_installs_it(
        tmp_path: Path) -> None:
    (tmp_path / "seed").mkdir()
    make_wheel(tmp_path / "seed" / SEED)
    made = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        made.append(rewrite(tmp_path / "seed" / SEED, tmp_path / folder / SEED))
    assert made[0] == made[1]
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(site),
                    str(tmp_path / "a" / SEED)], check=True)
    assert (site / "pkg" / "_C.so").read_bytes() == LIBRARY
    assert (site / "pkg" / "added.py").read_bytes() == b"added = True\n"
