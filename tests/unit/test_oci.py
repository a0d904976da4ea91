"""The OCI writer without Docker: layers, config, manifest, layout, docker-archive, verify."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from sparkbake.config.platforms import AMD64, ARM64
from sparkbake.errors import BakeError
from sparkbake.oci import image_layout, layers
from sparkbake.oci.documents import ConfigDoc
from sparkbake.pipeline import verify
from tests.conftest import plain_console

EPOCH = 1735689600
BASE: ConfigDoc = {
    "architecture": "amd64", "os": "linux", "created": "2020-01-01T00:00:00Z",
    "config": {"Env": ["PATH=/usr/local/cuda/bin:/usr/bin", "LANG=C.UTF-8", "MODE=base"],
               "Cmd": ["bash"], "Labels": {"maintainer": "NVIDIA", "keep": "base"},
               "WorkingDir": "/work", "Hostname": "builder", "Image": "sha256:abc"},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]},
    "history": [{"created": "2020-01-01T00:00:00Z", "created_by": "base"}],
}


def change(**values: Any) -> image_layout.ConfigChange:
    fields: dict[str, Any] = {
        "created": EPOCH, "platform": AMD64,
        "layers": (("sha256:" + "2" * 64, "sparkbake: /opt/venv"),),
        "env": (("MODE", "tag"), ("NEW", "1")), "path": "/opt/venv/bin",
        "labels": (("keep", "tag"), ("dev.sparkbake.inputs", "x")),
        "entrypoint": ("/opt/venv/bin/python", "/opt/sparkbake/entrypoint.py"),
    }
    return image_layout.ConfigChange(**{**fields, **values})


def source_tar(path: Path, order: list[str], mtime: int, uid: int) -> None:
    """A tar as `docker cp` gives it: entries in any order, times and owners of the build."""
    members: dict[str, tuple[bytes, bytes, str]] = {
        "venv": (tarfile.DIRTYPE, b"", ""),
        "venv/bin": (tarfile.DIRTYPE, b"", ""),
        "venv/bin/python": (tarfile.SYMTYPE, b"", "/usr/bin/python3"),
        "venv/lib": (tarfile.DIRTYPE, b"", ""),
        "venv/lib/a.py": (tarfile.REGTYPE, b"print('a')\n", ""),
        "venv/lib/b.py": (tarfile.LNKTYPE, b"", "venv/lib/a.py"),
        "venv-z.txt": (tarfile.REGTYPE, b"z\n", ""),
    }
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in order:
            kind, data, link = members[name]
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data)
            info.mtime, info.uid, info.gid, info.uname = mtime, uid, uid, "builder"
            info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
            info.pax_headers = {"SCHILY.xattr.user.note": str(mtime)}
            tar.addfile(info, io.BytesIO(data) if data else None)


ORDER = ["venv", "venv/lib", "venv/lib/a.py", "venv/lib/b.py", "venv/bin", "venv/bin/python",
         "venv-z.txt"]


def test_an_archive_becomes_the_same_layer_whatever_its_order_times_and_owners(
        tmp_path: Path) -> None:
    source_tar(tmp_path / "one.tar", ORDER, mtime=1_700_000_000, uid=1000)
    source_tar(tmp_path / "two.tar", list(reversed(ORDER)), mtime=1_800_000_000, uid=0)
    one = layers.from_archive(tmp_path / "one.tar", tmp_path / "one.tgz", "opt", EPOCH)
    two = layers.from_archive(tmp_path / "two.tar", tmp_path / "two.tgz", "opt", EPOCH)
    assert (one.digest, one.diff_id, one.size) == (two.digest, two.diff_id, two.size)
    assert one.digest == "sha256:" + hashlib.sha256(one.path.read_bytes()).hexdigest()
    assert one.diff_id == "sha256:" + hashlib.sha256(gzip.decompress(
        one.path.read_bytes())).hexdigest()


def test_a_layer_is_sorted_rooted_dated_and_without_extended_headers(tmp_path: Path) -> None:
    source_tar(tmp_path / "src.tar", ORDER, mtime=1_700_000_000, uid=1000)
    layer = layers.from_archive(tmp_path / "src.tar", tmp_path / "l.tgz", "opt", EPOCH)
    with tarfile.open(layer.path) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        "opt", "opt/venv", "opt/venv/bin", "opt/venv/bin/python", "opt/venv/lib",
        "opt/venv/lib/a.py", "opt/venv/lib/b.py", "opt/venv-z.txt"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(EPOCH, 0, 0, "", "")}
    assert all(not m.pax_headers for m in members)
    by_name = {m.name: m for m in members}
    assert by_name["opt/venv/bin/python"].linkname == "/usr/bin/python3"
    copy = by_name["opt/venv/lib/b.py"]  # a hard link became a plain file
    assert copy.isfile() and copy.size == len(b"print('a')\n")


def test_gzip_carries_no_time_and_no_name(tmp_path: Path) -> None:
    layer = layers.from_files({"a": (b"x", 0o644)}, tmp_path / "l.tgz", EPOCH)
    head = layer.path.read_bytes()[:10]
    assert head[:3] == b"\x1f\x8b\x08" and head[3] == 0  # no FNAME, no other flag
    assert head[4:8] == b"\0\0\0\0"  # MTIME 0


def test_files_become_a_layer_with_their_folders(tmp_path: Path) -> None:
    files = {"opt/sparkbake/manifest.json": (b"{}\n", 0o644),
             "opt/sparkbake/entrypoint.py": (b"#\n", 0o755)}
    layer = layers.from_files(files, tmp_path / "l.tgz", EPOCH)
    again = layers.from_files(dict(reversed(list(files.items()))), tmp_path / "m.tgz", EPOCH)
    assert layer.digest == again.digest
    found = layers.entries(layer.path)
    assert list(found) == ["opt", "opt/sparkbake", "opt/sparkbake/entrypoint.py",
                           "opt/sparkbake/manifest.json"]
    assert found["opt/sparkbake"].kind == "dir" and found["opt/sparkbake"].mode == 0o755
    entry = found["opt/sparkbake/manifest.json"]
    assert (entry.size, entry.sha256, entry.mtime, entry.owner) == (
        3, hashlib.sha256(b"{}\n").hexdigest(), EPOCH, "0:0")
    assert found["opt/sparkbake/entrypoint.py"].mode == 0o755


def test_a_special_file_is_refused(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "src.tar", "w") as tar:
        info = tarfile.TarInfo("venv/pipe")
        info.type = tarfile.FIFOTYPE
        tar.addfile(info)
    with pytest.raises(BakeError, match="special file") as caught:
        layers.from_archive(tmp_path / "src.tar", tmp_path / "l.tgz", "opt", EPOCH)
    assert caught.value.exit_code == 5


def test_compress_keeps_the_tar_bytes_as_its_diff_id(tmp_path: Path) -> None:
    data = b"tar bytes as the engine stores them" * 1000
    layer = layers.compress(io.BytesIO(data), tmp_path / "base.tgz")
    assert layer.diff_id == "sha256:" + hashlib.sha256(data).hexdigest()
    assert gzip.decompress(layer.path.read_bytes()) == data


def test_the_config_puts_the_change_over_the_base() -> None:
    config = image_layout.image_config(BASE, change())
    runtime = config["config"]
    assert runtime["Env"] == ["PATH=/opt/venv/bin:/usr/local/cuda/bin:/usr/bin", "LANG=C.UTF-8",
                              "MODE=tag", "NEW=1"]
    assert runtime["Entrypoint"] == ["/opt/venv/bin/python", "/opt/sparkbake/entrypoint.py"]
    assert "Cmd" not in runtime  # a new entrypoint clears the base's Cmd
    assert "Hostname" not in runtime and "Image" not in runtime  # build state of the base
    assert runtime["WorkingDir"] == "/work"
    assert runtime["Labels"] == {"maintainer": "NVIDIA", "keep": "tag",
                                 "dev.sparkbake.inputs": "x"}
    assert config["created"] == "2025-01-01T00:00:00Z"
    assert config["rootfs"]["diff_ids"] == ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    assert config["history"][1] == {"created": "2025-01-01T00:00:00Z",
                                    "created_by": "sparkbake: /opt/venv"}
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert "variant" not in config


def test_the_config_without_a_base_path_gets_the_default_path_and_the_bases_variant() -> None:
    arm64_base: ConfigDoc = {"architecture": "arm64", "variant": "v8"}
    config = image_layout.image_config(arm64_base, change(platform=ARM64, env=()))
    assert config["config"]["Env"] == [f"PATH=/opt/venv/bin:{image_layout.DEFAULT_PATH}"]
    assert (config["os"], config["architecture"], config["variant"]) == ("linux", "arm64", "v8")
    assert "variant" not in image_layout.image_config(arm64_base, change(platform=AMD64))


def test_canonical_json_is_the_same_for_the_same_content() -> None:
    assert image_layout.canonical({"b": 1, "a": [2, {"d": 3, "c": 4}]}) == \
        b'{"a":[2,{"c":4,"d":3}],"b":1}'
    assert image_layout.canonical(image_layout.image_config(BASE,
                                                            change())) == image_layout.canonical(
        image_layout.image_config(json.loads(json.dumps(BASE)), change()))


def image(layout: image_layout.Layout, work: Path, files: dict[str, bytes],
          name: str) -> image_layout.Descriptor:
    """A two-layer image (a fixed base layer + the files) tagged name in layout."""
    base = layers.from_files({"etc/os": (b"debian\n", 0o644)}, work / f"{name}-base.tgz", EPOCH)
    top = layers.from_files({p: (d, 0o644) for p, d in files.items()}, work / f"{name}.tgz",
                            EPOCH)
    blobs = [layout.add_file(layer.path, layer.digest, layers.MEDIA_TYPE) for layer in (base,
                                                                                        top)]
    made = change(layers=((base.diff_id, "base"), (top.diff_id, "sparkbake: /opt/sparkbake")))
    config = layout.add_bytes(image_layout.canonical(image_layout.image_config({}, made)),
                              image_layout.CONFIG_TYPE)
    manifest = layout.add_bytes(image_layout.canonical(image_layout.manifest(config, blobs)),
                                image_layout.MANIFEST_TYPE)
    layout.tag(name, manifest)
    return manifest


def test_the_layout_names_images_and_keeps_blobs_once(tmp_path: Path) -> None:
    layout = image_layout.Layout(tmp_path / "oci", console=plain_console())
    first = image(layout, tmp_path, {"opt/a": b"1"}, "zeta")
    second = image(layout, tmp_path, {"opt/a": b"2"}, "alpha")
    again = image(layout, tmp_path, {"opt/a": b"1"}, "zeta")
    assert again == first and layout.find("zeta") == first and layout.find("alpha") == second
    assert layout.find("none") is None
    index = json.loads((tmp_path / "oci" / "index.json").read_text())
    names = [m["annotations"][image_layout.REF_NAME] for m in index["manifests"]]
    assert names == ["alpha", "zeta"]
    assert json.loads((tmp_path / "oci" / "oci-layout").read_text()) == {
        "imageLayoutVersion": "1.0.0"}
    blobs = list((tmp_path / "oci" / "blobs" / "sha256").iterdir())
    assert len(blobs) == 7  # base layer shared: 1 + 2 tops + 2 configs + 2 manifests
    for blob in blobs:
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name


def test_the_docker_archive_leaves_out_the_layers_the_engine_has(tmp_path: Path) -> None:
    layout = image_layout.Layout(tmp_path / "oci", console=plain_console())
    made = image(layout, tmp_path, {"opt/a": b"1"}, "t")
    doc = layout.read_json(made.digest)
    base = doc["layers"][0]["digest"]
    image_layout.write_docker_archive(layout, made, "r/x:t", tmp_path / "x.tar", frozenset({base}))
    config = doc["config"]["digest"].split(":")[1]
    top = doc["layers"][1]["digest"].split(":")[1]
    with tarfile.open(tmp_path / "x.tar") as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        carried = tar.extractfile(f"{top}.tar.gz").read()  # type: ignore[union-attr]
    assert carried == layout.blob(doc["layers"][1]["digest"]).read_bytes()
    assert index == [{"Config": f"{config}.json", "RepoTags": ["r/x:t"],
                      "Layers": [f"{base.split(':')[1]}.tar.gz", f"{top}.tar.gz"]}]
    assert sorted(names) == sorted([f"{config}.json", f"{top}.tar.gz", "manifest.json"])


def test_verify_of_equal_images_reports_nothing(tmp_path: Path) -> None:
    one, two = (image_layout.Layout(tmp_path / "one", plain_console()),
                image_layout.Layout(tmp_path / "two", plain_console()))
    report = verify.compare(verify.Side(one, image(one, tmp_path, {"opt/a": b"1"}, "t")),
                            verify.Side(two, image(two, tmp_path, {"opt/a": b"1"}, "t")))
    assert report.equal is True and report.original == report.rebuilt
    assert report.layers == () and report.config == ()


def test_verify_names_the_layer_and_file_that_differ_with_sizes_and_hashes(
        tmp_path: Path) -> None:
    one, two = (image_layout.Layout(tmp_path / "one", plain_console()),
                image_layout.Layout(tmp_path / "two", plain_console()))
    files = {"opt/sparkbake/manifest.json": b"{}\n", "opt/sparkbake/stamp": b"1700000000\n"}
    original = image(one, tmp_path, files, "t")
    rebuilt = image(two, tmp_path, {**files, "opt/sparkbake/stamp": b"1800000000000\n"}, "t")
    report = verify.compare(verify.Side(one, original), verify.Side(two, rebuilt))
    assert report.equal is False
    [layer] = report.layers
    assert (layer.index, layer.made_by) == (1, "sparkbake: /opt/sparkbake")
    assert layer.original and layer.rebuilt and layer.original.digest != layer.rebuilt.digest
    [differs] = layer.files
    assert differs.path == "opt/sparkbake/stamp"
    stamp = hashlib.sha256(files["opt/sparkbake/stamp"]).hexdigest()
    assert differs.original == layers.Entry("file", 0o644, "0:0", EPOCH, 11, stamp, "")
    assert differs.rebuilt and differs.rebuilt.size == 14 and differs.rebuilt.sha256 != stamp
    assert report.config == ()  # rootfs ids are the layers' business
    [written] = verify.report_json(report)["layers"]
    assert written["files"][0]["original"] == {
        "kind": "file", "mode": 0o644, "owner": "0:0", "mtime": EPOCH, "size": 11,
        "sha256": stamp, "target": ""}
    assert "note" not in written
    summary = verify.summary(report)
    assert summary == "layer 1 (sparkbake: /opt/sparkbake): opt/sparkbake/stamp"
    text = "\n".join(verify.render(report))
    assert f"opt/sparkbake/stamp: 11 bytes sha256:{stamp[:16]} mode 644 owner 0:0" in text
    assert "-> 14 bytes" in text


def test_verify_reports_config_keys_and_same_tars_compressed_otherwise(tmp_path: Path) -> None:
    one, two = (image_layout.Layout(tmp_path / "one", plain_console()),
                image_layout.Layout(tmp_path / "two", plain_console()))
    original = image(one, tmp_path, {"opt/a": b"1"}, "t")
    doc = one.read_json(original.digest)
    top = one.blob(doc["layers"][1]["digest"])
    recompressed = gzip.compress(gzip.decompress(top.read_bytes()), compresslevel=1, mtime=0)
    blob = two.add_bytes(recompressed, layers.MEDIA_TYPE)
    config = one.read_json(doc["config"]["digest"])
    config["config"]["Labels"]["dev.sparkbake.inputs"] = "y"
    config_blob = two.add_bytes(image_layout.canonical(config), image_layout.CONFIG_TYPE)
    base = image_layout.Descriptor.of(doc["layers"][0])
    two.add_bytes(one.read(base.digest), layers.MEDIA_TYPE)
    manifest = image_layout.manifest(config_blob, [base, blob])
    rebuilt = two.add_bytes(image_layout.canonical(manifest), image_layout.MANIFEST_TYPE)
    report = verify.compare(verify.Side(one, original), verify.Side(two, rebuilt))
    assert verify.report_json(report)["config"] == [{"key": "config.Labels.dev.sparkbake.inputs",
                                           "original": '"x"', "rebuilt": '"y"'}]
    [layer] = report.layers
    assert layer.files == () and "compressed otherwise" in layer.note
