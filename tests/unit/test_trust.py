"""Cache entries trusted by content, on files made here: stamps, blobs of an OCI layout, layer
records, wheels entries, the bake's wheels label and `gc --check`. No Docker."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from sparkbake import planning, records, trust
from sparkbake.__main__ import main
from sparkbake.bake import runtime_image
from sparkbake.bake.layercache import LayerCache
from sparkbake.config import versions
from sparkbake.lock import wheelhouse
from sparkbake.oci import image_layout, layers
from sparkbake.wheels import container_build, entrycheck
from sparkbake.wheels.report import Wheel, WheelsReport
from tests.conftest import plain_console, versions_yaml


def flip_byte(path: Path, offset: int = 0, keep_mtime: bool = False) -> None:
    """Change one byte in place, as a disk or a stray write would."""
    before = path.stat()
    os.chmod(path, 0o644)
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_file_is_hashed_once_then_trusted_by_its_stamp(tmp_path: Path) -> None:
    path, stamp = tmp_path / "blob", tmp_path / "stamps" / "blob"
    path.write_bytes(b"content")
    assert trust.verified(path, sha(b"content"), stamp)
    assert trust.Stamp.parse(stamp.read_text()) == trust.Stamp.of(path)
    assert not trust.verified(path, sha(b"other"), stamp, full=True)
    assert trust.verified(path, sha(b"other"), stamp)  # the stamp stands for the hash


def test_a_write_changes_the_stamp_so_the_damage_is_found(tmp_path: Path) -> None:
    path, stamp = tmp_path / "blob", tmp_path / "stamp"
    path.write_bytes(b"content")
    assert trust.verified(path, sha(b"content"), stamp)
    flip_byte(path)
    assert not trust.verified(path, sha(b"content"), stamp)


def test_a_damage_that_hides_its_mtime_is_found_by_a_full_check(tmp_path: Path) -> None:
    path, stamp = tmp_path / "blob", tmp_path / "stamp"
    path.write_bytes(b"content")
    assert trust.verified(path, sha(b"content"), stamp)
    flip_byte(path, keep_mtime=True)
    assert not trust.verified(path, sha(b"content"), stamp, full=True)


def test_a_size_other_than_the_recorded_one_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"content")
    assert not trust.verified(path, sha(b"content"), tmp_path / "stamp", size=3)
    assert not trust.verified(tmp_path / "missing", sha(b""), tmp_path / "stamp")


@pytest.mark.parametrize("text", ['{"digest": "sha256:ab', "[1, 2]", "\udcff"])
def test_a_damaged_record_names_its_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "record.json"
    path.write_bytes(text.encode(errors="surrogateescape"))
    with pytest.raises(trust.Damaged, match=r"record\.json"):
        trust.read_record(path)
    assert trust.read_record(tmp_path / "missing.json") is None


def layout_with_blob(tmp_path: Path, data: bytes = b"layer bytes") -> tuple[
        image_layout.Layout, image_layout.Descriptor]:
    layout = image_layout.Layout(tmp_path / "oci", console=plain_console())
    return layout, layout.add_bytes(data, image_layout.LAYER_TYPE)


def test_blobs_go_in_read_only_and_stamped(tmp_path: Path) -> None:
    layout, blob = layout_with_blob(tmp_path)
    assert stat.S_IMODE(layout.blob(blob.digest).stat().st_mode) == 0o444
    assert (layout.root / image_layout.STAMPS / blob.digest.split(":")[1]).is_file()


def test_a_damaged_blob_is_removed_with_a_warning_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout, blob = layout_with_blob(tmp_path)
    flip_byte(layout.blob(blob.digest))
    assert not layout.intact(blob.digest, blob.size)
    assert not layout.blob(blob.digest).exists()
    assert str(layout.blob(blob.digest)) in capsys.readouterr().err


def test_adding_a_blob_over_a_damaged_copy_replaces_it(tmp_path: Path) -> None:
    layout, blob = layout_with_blob(tmp_path)
    flip_byte(layout.blob(blob.digest))
    source = tmp_path / "fresh"
    source.write_bytes(b"layer bytes")
    layout.add_file(source, blob.digest, image_layout.LAYER_TYPE)
    assert layout.read(blob.digest) == b"layer bytes"


def test_a_truncated_blob_in_a_shared_layout_is_removed_there_not_written_through(
        tmp_path: Path) -> None:
    """build/oci hard-links the shared cache's blob: damage there is found in both, and
    removing it from one leaves the other's link, which its own check removes."""
    shared, blob = layout_with_blob(tmp_path / "shared")
    mine = image_layout.Layout(tmp_path / "mine", console=plain_console())
    mine.add_file(shared.blob(blob.digest), blob.digest, image_layout.LAYER_TYPE)
    assert mine.blob(blob.digest).stat().st_ino == shared.blob(blob.digest).stat().st_ino
    os.chmod(shared.blob(blob.digest), 0o644)
    os.truncate(shared.blob(blob.digest), 3)
    assert mine.damaged(image_layout.Descriptor(image_layout.LAYER_TYPE, blob.digest, blob.size)) \
        == [blob.digest]
    assert not shared.intact(blob.digest)


def test_an_image_with_a_damaged_layer_is_not_found_whole(tmp_path: Path) -> None:
    layout, layer = layout_with_blob(tmp_path)
    config = layout.add_bytes(b"{}", image_layout.CONFIG_TYPE)
    image = layout.add_bytes(image_layout.canonical(image_layout.manifest(config, [layer])),
                             image_layout.MANIFEST_TYPE)
    assert layout.damaged(image) == []
    flip_byte(layout.blob(layer.digest), keep_mtime=True)
    assert layout.damaged(image) == []  # the hot path trusts the stamp
    assert layout.damaged(image, full=True) == [layer.digest]


def test_a_truncated_index_is_removed_and_counts_as_empty(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout, blob = layout_with_blob(tmp_path)
    layout.tag("one", blob)
    (layout.root / "index.json").write_text('{"manifests": [')
    assert layout.find("one") is None
    assert "index.json" in capsys.readouterr().err


def test_a_truncated_layer_record_counts_as_none(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    layout = image_layout.Layout(tmp_path / "oci", console=plain_console())
    made = layers.from_files({"a": (b"a", 0o644)}, tmp_path / "a.tar.gz", 0)
    cache = LayerCache(tmp_path / "layers", layout)
    cache.put("python", "k" * 64, made)
    assert cache.get("python", "k" * 64) is not None
    record = cache.record("python", "k" * 64)
    record.write_text(record.read_text()[:20])
    assert cache.get("python", "k" * 64) is None
    assert not record.exists()
    assert str(record) in capsys.readouterr().err


def wheels_entry(folder: Path) -> Path:
    folder.mkdir(parents=True)
    wheel = folder / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel bytes")
    (folder / "wheels.json").write_text(json.dumps(
        {"wheels": [{"file": wheel.name, "sha256": sha(b"wheel bytes")}]}))
    return wheel


def test_a_wheel_other_than_its_recorded_sha256_damages_its_entry(tmp_path: Path) -> None:
    wheel = wheels_entry(tmp_path / "key")
    assert entrycheck.damage(tmp_path / "key") == ""
    flip_byte(wheel, 5)
    assert wheel.name in str(entrycheck.damage(tmp_path / "key"))
    assert entrycheck.damage(tmp_path / "other") is None


def test_a_truncated_wheels_record_damages_its_entry(tmp_path: Path) -> None:
    wheels_entry(tmp_path / "key")
    (tmp_path / "key" / "wheels.json").write_text('{"wheels": [')
    assert "wheels.json is not a JSON record" in str(entrycheck.damage(tmp_path / "key"))


def test_the_wheels_label_follows_their_content() -> None:
    one = WheelsReport("12.1a", "sm_121a", "none", (Wheel("a.whl", "1" * 64, "a", ()),))
    other = dataclasses.replace(one, wheels=(Wheel("a.whl", "2" * 64, "a", ()),))
    assert runtime_image.wheels_content(one) != runtime_image.wheels_content(other)
    assert runtime_image.wheels_content(one) == runtime_image.wheels_content(
        records.from_json(WheelsReport, json.loads(json.dumps(records.to_json(one)))))


def test_gc_check_removes_the_damaged_entries_and_keeps_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    monkeypatch.setenv("SPARKBAKE_CACHE", str(tmp_path / "host-cache"))
    root = tmp_path / "project"
    (root / "upstream").mkdir(parents=True)
    (root / "versions.yaml").write_text(versions_yaml(tags="  one:\n    upstream: tree\n"
                                                           "    series: []\n"))
    oci = image_layout.Layout(root / "build" / "oci", console=plain_console())
    good, bad = (oci.add_bytes(data, image_layout.LAYER_TYPE) for data in (b"good", b"bad!"))
    shared = image_layout.Layout(tmp_path / "host-cache" / "layers", console=plain_console())
    base = shared.add_bytes(b"base layer", image_layout.LAYER_TYPE)
    flip_byte(oci.blob(bad.digest), keep_mtime=True)  # only a full hash finds it
    os.chmod(shared.blob(base.digest), 0o644)
    os.truncate(shared.blob(base.digest), 2)
    (root / "build" / "layers").mkdir(parents=True)
    (root / "build" / "layers" / "python-k.json").write_text("{")
    loaded = versions.load(root / "versions.yaml")
    wheel = wheels_entry(root / "wheels" / planning.make(loaded, loaded.tag("one")).wheels_key)
    flip_byte(wheel)
    config = ["--config", str(root / "versions.yaml")]
    assert main([*config, "gc", "--check", "--dry-run"]) == 0
    assert oci.blob(bad.digest).exists()  # a dry run removes nothing
    assert main([*config, "gc", "--check"]) == 0
    out = capsys.readouterr()
    assert not oci.blob(bad.digest).exists() and oci.intact(good.digest)
    assert not shared.blob(base.digest).exists()
    assert not (root / "build" / "layers" / "python-k.json").exists()
    assert not wheel.parent.exists()
    assert "damaged" in out.out and "4 damaged" in out.err + out.out


def test_a_runtime_wheelhouse_wheel_no_lock_hash_allows_takes_the_wheelhouse(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    house = tmp_path / "runtime" / "0123456789abcdef"
    house.mkdir(parents=True)
    (house / wheelhouse.DONE).write_text("lock\n")
    wheel = house / "dep-1.0-py3-none-any.whl"
    wheel.write_bytes(b"dep wheel")
    lock = tmp_path / "runtime.txt"
    lock.write_text(f"dep==1.0 \\\n    --hash=sha256:{'0' * 64} \\\n"
                    f"    --hash=sha256:{sha(b'dep wheel')}\n")
    assert wheelhouse._intact(house, lock, console=plain_console())
    flip_byte(wheel)
    assert not wheelhouse._intact(house, lock, console=plain_console())
    assert not house.exists()
    assert f"damaged cache entry {house}: {wheel.name}: no hash of runtime.txt" in \
        capsys.readouterr().err


def test_a_kernel_cache_wheel_is_checked_against_its_listing(tmp_path: Path) -> None:
    entry = tmp_path / "kernels"
    entry.mkdir()
    wheel = entry / "k-1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"kernels")
    (entry / "kernels.json").write_text(json.dumps({"wheel": wheel.name,
                                                    "sha256": sha(b"kernels")}))
    assert container_build.reusable_kernels(entry) == wheel.name
    os.truncate(wheel, 2)
    assert container_build.reusable_kernels(entry) is None
    assert "not the sha256 kernels.json records" in str(entrycheck.kernels_damage(entry))
