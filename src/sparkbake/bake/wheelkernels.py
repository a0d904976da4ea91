"""The upstream's compiled libraries as its wheels hold them, so that a bake whose kernels
layer is cached leaves them out of pip's install.

The kernels layer is the ELF files of the upstream's distributions (venvsplit); in the
tag's wheels they are the members that begin with an ELF header, two thirds of a vLLM
wheel's bytes. A bake that made the layer from a venv where those files are exactly the
members' bytes (checked against their RECORD hashes) keeps it under the members' key too.
A later bake of wheels with the same members takes the layer by that key and gives pip
copies of the wheels without them (members copied compressed: `rawzip`): pip writes the
same RECORD, since it keeps the rows of files a wheel lacks as the wheel wrote them.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name, parse_wheel_filename

from sparkbake.bake.elfcheck import machine_of
from sparkbake.config.platforms import Platform
from sparkbake.hashing import data_hash, record_hash_of_file
from sparkbake.wheelfile import contents, rawzip

__all__ = ["Kernels", "find", "installed_exactly", "key", "trimmed"]

PART = "kernels-of-wheels"  # the layer cache's records by the members' key


@dataclass(frozen=True)
class Member:
    wheel: Path
    name: str  # its path in the wheel, which is its path in site-packages
    digest: str  # RECORD's `sha256=...`
    size: int
    executable: bool


@dataclass(frozen=True)
class Kernels:
    """The ELF members of the tag's wheels."""

    members: tuple[Member, ...]


def find(folder: Path, names: tuple[str, ...]) -> Kernels | None:
    """The ELF members of the wheels of the named distributions in folder; None where one
    cannot be left out safely: RECORD gives no hash of its size, or it lies in a `.data`
    folder (pip puts that elsewhere than its path)."""
    wanted = {canonicalize_name(name) for name in names}
    found: list[Member] = []
    for wheel in sorted(folder.glob("*.whl")):
        if parse_wheel_filename(wheel.name)[0] not in wanted:
            continue
        with zipfile.ZipFile(wheel) as archive:
            entries = contents.read(archive)
            for name, entry in sorted(entries.items()):
                with archive.open(name) as member:
                    if machine_of(member.read(20)) is None:
                        continue
                if not entry.digest or PurePosixPath(name).parts[0].endswith(".data"):
                    return None
                info = archive.getinfo(name)
                found.append(Member(wheel, name, entry.digest, info.file_size,
                                    bool(entry.mode & 0o111)))
    return Kernels(tuple(found))


def key(kernels: Kernels, python: str, platform: Platform, source_date: int,
        formats: list[int | str]) -> str:
    """The kernels layer's key by what the wheels say of its files: paths, bytes, modes;
    the image's Python (their folder), platform and source date; the writers' formats."""
    return data_hash({"formats": formats, "python": python, "platform": str(platform),
                      "source_date": source_date,
                      "members": [[m.name, m.digest, m.size, m.executable]
                                  for m in kernels.members]})


def installed_exactly(kernels: Kernels, packages: Path, layer_paths: tuple[str, ...],
                      relative_to: Path) -> bool:
    """Whether the kernels layer's files (layer_paths, relative to relative_to) are the
    members installed into packages (site-packages), byte for byte as RECORD says: only
    then may the layer be kept under the members' key."""
    expected = {(packages / m.name).relative_to(relative_to).as_posix(): m
                for m in kernels.members}
    if set(layer_paths) != set(expected):
        return False
    return all(record_hash_of_file(relative_to / path) == member.digest
               for path, member in expected.items())


def trimmed(kernels: Kernels, folder: Path, dest: Path) -> Path:
    """Copies of folder's wheels under dest (the same names) without the kernels' members;
    returns dest."""
    left_out: dict[Path, set[str]] = {}
    for member in kernels.members:
        left_out.setdefault(member.wheel, set()).add(member.name)
    dest.mkdir(parents=True)
    for wheel in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive, wheel.open("rb") as source, \
                (dest / wheel.name).open("wb") as out:
            infos = archive.infolist()
            writer = rawzip.Writer(out, infos[0].date_time if infos else (1980, 1, 1, 0, 0, 0))
            for info in infos:
                if info.filename not in left_out.get(wheel, set()):
                    writer.copy(info.filename, source, info, info.external_attr >> 16 or 0o644)
            writer.close()
    return dest
