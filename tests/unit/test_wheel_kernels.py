"""The compiled libraries of the tag's wheels (wheelkernels): found by their ELF header, left
out of copies that pip installs into the same files and RECORD but those, and keyed by what
the wheels' RECORDs say of them."""

from __future__ import annotations

import filecmp
import functools
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkbake.bake import wheelkernels
from sparkbake.config import platforms
from sparkbake.config.platforms import Platform
from sparkbake.wheelfile import contents

SOURCE_DATE = 1735689600
ARM64 = platforms.parse("linux/arm64")
# an ELF header for aarch64 (e_machine 183 at byte 18), then a body
LIBRARY = b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little") + bytes(range(256)) * 64
WHEEL = "pkg-1.0-cp311-abi3-manylinux_2_28_aarch64.whl"
FORMATS: list[int | str] = [1, 2]


def make_wheel(folder: Path, files: dict[str, bytes], modes: dict[str, int] | None = None,
               name: str = WHEEL) -> Path:
    entries = {path: contents.Entry((modes or {}).get(path, 0o644), functools.partial(bytes, data))
               for path, data in {
                   **files,
                   "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\n"
                                                 b"Version: 1.0\n",
                   "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                                              b"Tag: cp311-abi3-manylinux_2_28_aarch64\n"}.items()}
    folder.mkdir(parents=True, exist_ok=True)
    contents.write(folder / name, entries, SOURCE_DATE)
    return folder / name


def pip_install(wheels: Path, site: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--no-compile", "--target", str(site),
                    "--python-version=3.11", "--implementation=cp",
                    "--platform=manylinux_2_28_aarch64", "--only-binary=:all:",
                    "--find-links", str(wheels), "pkg"], check=True)


FILES = {"pkg/__init__.py": b"VERSION = 1\n", "pkg/_C.abi3.so": LIBRARY,
         "pkg/sub/_ops.abi3.so": LIBRARY[::-1][:100] + LIBRARY[:20],
         "pkg/not_elf.so": b"just text\n"}


def kernels_of(wheels: Path, modes: dict[str, int] | None = None) -> wheelkernels.Kernels:
    """The kernels of a wheel of FILES made in the folder wheels."""
    make_wheel(wheels, FILES, modes)
    found = wheelkernels.find(wheels, ("pkg",))
    assert found is not None
    return found


def test_the_members_found_are_those_that_begin_with_an_elf_header(tmp_path: Path) -> None:
    found = kernels_of(tmp_path / "wheels", {"pkg/_C.abi3.so": 0o755})
    assert [(m.name, m.executable) for m in found.members] == [("pkg/_C.abi3.so", True)]
    assert wheelkernels.find(tmp_path / "wheels", ("other",)) == wheelkernels.Kernels(())


def test_pip_installs_the_copies_without_them_into_the_same_files_and_record(
        tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    found = kernels_of(wheels)
    pip_install(wheels, tmp_path / "whole")
    pip_install(wheelkernels.trimmed(found, wheels, tmp_path / "trimmed"), tmp_path / "lean")
    compared = filecmp.dircmp(tmp_path / "whole", tmp_path / "lean")
    assert compared.left_only == [] and compared.right_only == []
    package = compared.subdirs["pkg"]
    assert package.left_only == ["_C.abi3.so"] and package.right_only == []
    record = "pkg-1.0.dist-info/RECORD"
    assert (tmp_path / "whole" / record).read_text() == (tmp_path / "lean" / record).read_text()
    assert "pkg/_C.abi3.so" in (tmp_path / "lean" / record).read_text()
    assert (tmp_path / "lean" / "pkg" / "not_elf.so").read_bytes() == b"just text\n"


def test_the_layer_is_theirs_only_when_its_files_are_exactly_the_members_bytes(
        tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    found = kernels_of(wheels)
    root = tmp_path / "root"
    site = root / "opt" / "venv" / "site-packages"
    pip_install(wheels, site)
    paths = ("opt/venv/site-packages/pkg/_C.abi3.so",)
    assert wheelkernels.installed_exactly(found, site, paths, root)
    assert not wheelkernels.installed_exactly(
        found, site, (*paths, "opt/venv/site-packages/pkg/not_elf.so"), root)
    assert not wheelkernels.installed_exactly(found, site, (), root)
    (site / "pkg" / "_C.abi3.so").write_bytes(LIBRARY + b"\0")  # another package wrote it
    assert not wheelkernels.installed_exactly(found, site, paths, root)


@pytest.mark.parametrize("files", [
    {"pkg-1.0.data/platlib/pkg/_C.abi3.so": LIBRARY},  # pip puts it elsewhere
])
def test_members_that_cannot_be_left_out_safely_give_none(tmp_path: Path,
                                                          files: dict[str, bytes]) -> None:
    make_wheel(tmp_path / "wheels", files)
    assert wheelkernels.find(tmp_path / "wheels", ("pkg",)) is None


def test_a_record_without_the_members_hash_gives_none(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "seed", FILES)
    # a copy whose RECORD names the library without a hash
    with zipfile.ZipFile(wheel) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    record = "pkg-1.0.dist-info/RECORD"
    members[record] = b"\n".join(line if not line.startswith(b"pkg/_C.abi3.so,") else
                                 b"pkg/_C.abi3.so,," for line in members[record].splitlines())
    (tmp_path / "wheels").mkdir()
    with zipfile.ZipFile(tmp_path / "wheels" / WHEEL, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    assert wheelkernels.find(tmp_path / "wheels", ("pkg",)) is None


def test_the_key_follows_the_members_python_platform_and_source_date(tmp_path: Path) -> None:
    first = wheelkernels.find(make_wheel(tmp_path / "a", FILES).parent, ("pkg",))
    changed = wheelkernels.find(make_wheel(tmp_path / "b", {
        **FILES, "pkg/_C.abi3.so": LIBRARY + b"\1"}).parent, ("pkg",))
    python_only = wheelkernels.find(make_wheel(tmp_path / "c", {
        **FILES, "pkg/__init__.py": b"VERSION = 2\n"}).parent, ("pkg",))
    assert first is not None and changed is not None and python_only is not None

    def key(kernels: wheelkernels.Kernels, python: str = "3.11",
            platform: Platform = ARM64, date: int = SOURCE_DATE) -> str:
        return wheelkernels.key(kernels, python, platform, date, FORMATS)

    assert key(first) == key(python_only)
    others = {key(changed), key(first, python="3.12"),
              key(first, platform=platforms.parse("linux/amd64")), key(first, date=0),
              wheelkernels.key(first, "3.11", ARM64, SOURCE_DATE, [1, 3])}
    assert key(first) not in others and len(others) == 5

