"""/opt/venv split by file from the RECORDs: every file in exactly one part, the union the
whole venv, the runtime part the same whatever the upstream holds; the layers of the parts
kept by key."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from sparkbake.bake import venvsplit
from sparkbake.bake.layercache import LayerCache, content_key
from sparkbake.oci import image_layout, layers
from tests.conftest import plain_console

PY = "3.11"
SITE = f"opt/venv/lib/python{PY}/site-packages"
ELF = b"\x7fELF\x02\x01\x01" + b"\0" * 11 + (183).to_bytes(2, "little") + b"kernel"
DATE = 1735689600


def write(root: Path, name: str, data: bytes = b"x", mode: int = 0o644) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def dist(root: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """An installed distribution: its files (relative to site-packages, `../../../bin/x` for
    a script) and a RECORD listing them and its own dist-info."""
    for path, data in files.items():
        write(root, _image_path(path), data)
    info = f"{name}-{version}.dist-info"
    write(root, f"{SITE}/{info}/METADATA",
          f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode())
    rows = [*files, f"{info}/METADATA", f"{info}/RECORD"]
    write(root, f"{SITE}/{info}/RECORD", "".join(f"{r},,\n" for r in rows).encode())


def _image_path(name: str) -> str:
    return "opt/venv/" + name.removeprefix("../../../") if name.startswith("../") else \
        f"{SITE}/{name}"


def skeleton(root: Path) -> None:
    """What python3 -m venv makes: interpreter links, pyvenv.cfg, an empty include/."""
    (root / "opt/venv/bin").mkdir(parents=True)
    (root / "opt/venv/bin/python3").symlink_to("/usr/bin/python3")
    (root / "opt/venv/bin/python").symlink_to("python3")
    (root / "opt/venv/include").mkdir()
    (root / "opt/venv/lib64").symlink_to("lib")
    write(root, "opt/venv/pyvenv.cfg", b"home = /usr/bin\n")
    dist(root, "pip", "23.0.1", {"pip/__init__.py": b"", "../../../bin/pip": b"#!"})


def upstream(root: Path, marker: bytes = b"one") -> None:
    """tinykern: a kernel library, Python with bytecode, a script; in a namespace folder
    (`nvidia/`) that a runtime package shares."""
    dist(root, "tinykern", "0.1.0+sb.1", {
        "tinykern/__init__.py": marker, "tinykern/_kernels.cpython-311-aarch64-linux-gnu.so": ELF,
        "tinykern/sub/data.json": b"{}", "nvidia/tinykern_ext.so": ELF,
        "../../../bin/tinykern": b"#!/opt/venv/bin/python3\n"})
    write(root, f"{SITE}/tinykern/__pycache__/__init__.cpython-311.pyc", b"pyc" + marker)


def runtime(root: Path) -> None:
    dist(root, "nvidia_cublas", "13.0", {"nvidia/cublas/lib/libcublas.so.13": ELF,
                                         "nvidia/__init__.py": b""})
    write(root, f"{SITE}/nvidia/__pycache__/__init__.cpython-311.pyc", b"pyc")
    (root / "opt/venv/cuda").symlink_to(f"lib/python{PY}/site-packages/nvidia/cu13")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    skeleton(root)
    runtime(root)
    upstream(root)
    return root


def every_path(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_the_upstreams_files_split_into_compiled_libraries_and_the_rest(root: Path) -> None:
    parts = venvsplit.split(root, PY, ["TinyKern"])
    assert parts.kernels == (f"{SITE}/nvidia/tinykern_ext.so",
                             f"{SITE}/tinykern/_kernels.cpython-311-aarch64-linux-gnu.so")
    assert set(parts.python) == {
        f"{SITE}/tinykern/__init__.py", f"{SITE}/tinykern/__pycache__/__init__.cpython-311.pyc",
        f"{SITE}/tinykern/sub/data.json", "opt/venv/bin/tinykern",
        *(f"{SITE}/tinykern-0.1.0+sb.1.dist-info/{n}" for n in ("METADATA", "RECORD"))}


def test_every_path_is_in_exactly_one_part_and_the_union_is_the_venv(root: Path) -> None:
    parts = venvsplit.split(root, PY, ["tinykern"])
    files = [*parts.runtime, *parts.kernels, *parts.python]
    assert len(files) == len(set(files))  # no path in two parts
    folders_above = {"/".join(p.split("/")[:d]) for p in files for d in range(1, p.count("/") + 1)}
    assert set(files) | folders_above == every_path(root)


def test_a_blank_line_in_a_record_is_passed_over(root: Path) -> None:
    record = root / SITE / "tinykern-0.1.0+sb.1.dist-info" / "RECORD"
    record.write_text(record.read_text().replace("\n", "\n\n", 1) + ",,\n")  # and no path
    parts = venvsplit.split(root, PY, ["tinykern"])
    assert f"{SITE}/tinykern/_kernels.cpython-311-aarch64-linux-gnu.so" in parts.kernels
    assert f"{SITE}/tinykern/sub/data.json" in parts.python


def test_the_runtime_part_holds_the_skeleton_links_and_shared_folders_not_the_upstreams(
        root: Path) -> None:
    runtime_part = set(venvsplit.split(root, PY, ["tinykern"]).runtime)
    assert {"opt/venv/bin/python", "opt/venv/lib64", "opt/venv/cuda", "opt/venv/include",
            "opt/venv/pyvenv.cfg", "opt/venv/bin/pip", f"{SITE}/nvidia",
            f"{SITE}/nvidia/__pycache__/__init__.cpython-311.pyc"} <= runtime_part
    assert not any("tinykern" in name for name in runtime_part)


def test_the_runtime_part_is_the_same_whatever_the_upstream_holds(tmp_path: Path) -> None:
    layers_made = []
    for name, marker in (("a", b"one"), ("b", b"two, with more")):
        root = tmp_path / name
        skeleton(root)
        runtime(root)
        upstream(root, marker)
        if name == "b":  # another Python file in a new folder
            dist(root, "tinykern_extra", "1", {"tinykern_extra/x.py": b""})
        parts = venvsplit.split(root, PY, ["tinykern", "tinykern-extra"])
        layers_made.append(layers.from_paths(root, parts.runtime, tmp_path / f"{name}.tar.gz",
                                             DATE).digest)
    assert layers_made[0] == layers_made[1]


def test_the_parts_layers_hold_what_one_layer_of_the_venv_holds(root: Path,
                                                                 tmp_path: Path) -> None:
    parts = venvsplit.split(root, PY, ["tinykern"])
    whole = layers.entries(layers.from_folder(root, tmp_path / "all.tar.gz", DATE).path)
    split: dict[str, layers.Entry] = {}
    for index, names in enumerate((parts.runtime, parts.kernels, parts.python)):
        split |= layers.entries(layers.from_paths(root, names, tmp_path / f"{index}.tar.gz",
                                                  DATE).path)
    assert split == whole


def test_a_layer_is_kept_by_key_and_made_again_when_its_blob_is_gone(
        root: Path, tmp_path: Path) -> None:
    layout = image_layout.Layout(tmp_path / "oci", console=plain_console())
    cache = LayerCache(tmp_path / "layers", layout)
    names = venvsplit.split(root, PY, ["tinykern"]).kernels
    key = content_key(root, names, DATE)
    made: list[str] = []

    def make() -> layers.Layer:
        made.append("made")
        return layers.from_paths(root, names, tmp_path / "kernels.tar.gz", DATE)

    first, cached = cache.layer("kernels", key, make)
    again, cached_again = cache.layer("kernels", key, make)
    assert (cached, cached_again, made) == (False, True, ["made"])
    assert again == first and first.path == layout.blob(first.digest)
    with tarfile.open(first.path) as tar:
        assert tar.getnames()[-1].endswith("_kernels.cpython-311-aarch64-linux-gnu.so")
    shutil.rmtree(tmp_path / "oci")  # a cleaned layout: the record alone is no layer
    assert cache.layer("kernels", key, make)[1] is False and len(made) == 2


def test_the_content_key_changes_with_a_byte_a_mode_or_the_date(root: Path) -> None:
    names = venvsplit.split(root, PY, ["tinykern"]).python
    key = content_key(root, names, DATE)
    assert content_key(root, names, DATE + 1) != key
    script = root / "opt/venv/bin/tinykern"
    script.chmod(0o755)
    assert content_key(root, names, DATE) != key
    script.chmod(0o644)
    assert content_key(root, names, DATE) == key
    write(root, f"{SITE}/tinykern/__init__.py", b"two")
    assert content_key(root, names, DATE) != key
