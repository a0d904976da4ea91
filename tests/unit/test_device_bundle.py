"""The device smoke's pure parts: which files of an image the cut root keeps, the Debian
packages unpacked without dpkg, the OCI runtime config with the NVIDIA devices and driver
libraries, and the errors of a bad bundle."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from sparkbake.errors import EngineError
from sparkbake.smoke import device_bundle, oci_runtime, root_bundle
from sparkbake.smoke.device_bundle import Bundle, BundleError
from sparkbake.smoke.oci_runtime import DeviceNode

# `ldconfig -p` as the device machine printed it (its driver's folder first, then /lib)
LDCONFIG = """\
\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libnvidia-ml.so.1
\tlibnvidia-ml.so.1 (libc6,x86-64) => /lib/libnvidia-ml.so.1
\tlibcudart.so.13 (libc6,x86-64) => /usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13
\tlibcuda.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so.1
\tlibcuda.so.1 (libc6,x86-64) => /lib/libcuda.so.1
\tlibcuda.so.1 (libc6) => /usr/lib32/libcuda.so.1
"""


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


# a merged-/usr Debian root in miniature
IMAGE = [
    member("bin", tarfile.SYMTYPE, "usr/bin"), member("lib", tarfile.SYMTYPE, "usr/lib"),
    member("lib64", tarfile.SYMTYPE, "usr/lib64"), member("usr", tarfile.DIRTYPE),
    member("usr/bin", tarfile.DIRTYPE), member("usr/lib", tarfile.DIRTYPE),
    member("usr/lib64", tarfile.DIRTYPE), member("usr/lib/x86_64-linux-gnu", tarfile.DIRTYPE),
    member("usr/lib64/ld-linux-x86-64.so.2", tarfile.SYMTYPE,
           "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
    member("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
    member("usr/bin/python3", tarfile.SYMTYPE, "python3.11"), member("usr/bin/python3.11"),
    member("usr/bin/python3.11-copy", tarfile.LNKTYPE, "usr/bin/python3.11"),
    member("usr/lib/x86_64-linux-gnu/libz.so.1", tarfile.SYMTYPE, "libz.so.1.2.13"),
    member("usr/lib/x86_64-linux-gnu/libz.so.1.2.13"),
    member("usr/lib/x86_64-linux-gnu/libunused.so.1"),
    member("usr/bin/g++"),
    member("opt", tarfile.DIRTYPE), member("opt/venv", tarfile.DIRTYPE),
    member("opt/venv/bin", tarfile.DIRTYPE),
    member("opt/venv/bin/python", tarfile.SYMTYPE, "/usr/bin/python3"),
    member("opt/venv/unread.txt"), member("etc", tarfile.DIRTYPE), member("etc/ld.so.cache"),
    member("proc", tarfile.DIRTYPE), member("proc/stray"), member("tmp", tarfile.DIRTYPE),
]
LINKS = {m.name: m.linkname for m in IMAGE if m.issym()}


def test_a_path_resolves_through_each_link_on_its_way() -> None:
    on_way, end = root_bundle.resolve("/lib64/ld-linux-x86-64.so.2", LINKS)
    assert end == "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    assert on_way == {"lib64", "usr/lib64/ld-linux-x86-64.so.2", "lib"}


def test_a_link_loop_ends() -> None:
    on_way, end = root_bundle.resolve("a", {"a": "b", "b": "a"})
    assert on_way == {"a", "b"} and end in ("a", "b")


def test_the_root_keeps_what_was_used_its_links_and_folders() -> None:
    used = ["/opt/venv/bin/python", "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
            "/lib64/ld-linux-x86-64.so.2", "/proc/self/maps", "/tmp/x"]
    kept = root_bundle.kept_names(IMAGE, used)
    assert {"usr/bin/python3.11", "usr/bin/python3", "opt/venv/bin/python",
            "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "lib64", "usr/lib64",
            "usr/lib64/ld-linux-x86-64.so.2", "usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
            "opt/venv/unread.txt", "etc/ld.so.cache", "proc", "tmp"} <= kept
    # the loader opens libz by its soname's link, which only the file's map names
    assert "usr/lib/x86_64-linux-gnu/libz.so.1" in kept
    assert not {"usr/bin/g++", "usr/lib/x86_64-linux-gnu/libunused.so.1", "proc/stray",
                "usr/bin/python3.11-copy"} & kept


def test_a_hard_link_used_keeps_its_target() -> None:
    kept = root_bundle.kept_names(IMAGE, ["/usr/bin/python3.11-copy"])
    assert {"usr/bin/python3.11-copy", "usr/bin/python3.11"} <= kept


def test_the_c_library_list_names_its_shared_objects() -> None:
    listing = b"/.\n/usr/lib/x86_64-linux-gnu/libdl.so.2\n/usr/lib/x86_64-linux-gnu/gconv/" \
              b"UTF-16.so\n/usr/share/doc/libc6/copyright\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("var/lib/dpkg/info/libc6:amd64.list")
        info.size = len(listing)
        tar.addfile(info, io.BytesIO(listing))
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        assert root_bundle.c_library(tar, tar.getmembers()) == \
            {"/usr/lib/x86_64-linux-gnu/libdl.so.2"}


def test_driver_libraries_are_the_first_64_bit_ones_ldconfig_lists() -> None:
    found = oci_runtime.driver_libraries(LDCONFIG)
    assert set(found) == {"libcuda.so.1", "libnvidia-ml.so.1"}
    assert found["libcuda.so.1"].startswith("/usr/local/nvidia/lib64/")


def bundle(**changes: object) -> Bundle:
    values: dict[str, object] = dict(
        schema=1, tag="demo-sm90", image="localhost:5000/sparkbake-demo:demo-sm90",
        image_id="sha256:" + "ab" * 32, inputs="cd" * 32, suite="common", cuda_arch="9.0a",
        env=("PATH=/opt/venv/bin:/usr/bin",),
        checker=("/opt/venv/bin/python", "-B", "/opt/sparkbake-smoke/smoke_check.py",
                 device_bundle.EXPECTED),
        packages=(), root_files=1, image_files=2, root_bytes=1, image_bytes=2, checks_here=())
    values.update(changes)
    return Bundle(**values)  # type: ignore[arg-type]


def test_the_runtime_config_gives_the_devices_and_driver_libraries() -> None:
    devices = [DeviceNode("/dev/nvidia0", 195, 0, 0o666),
               DeviceNode("/dev/nvidia-uvm", 238, 0, 0o666)]
    config = oci_runtime.runtime_config(bundle(), devices,
                                        {"libcuda.so.1": "/drv/libcuda.so.580.159.04"})
    assert config["process"]["args"][-1] == device_bundle.EXPECTED
    assert config["process"]["env"] == ["PATH=/opt/venv/bin:/usr/bin"]
    assert {"type": "network"} in config["linux"]["namespaces"]  # no network, as --network none
    assert [d["path"] for d in config["linux"]["devices"]] == ["/dev/nvidia0", "/dev/nvidia-uvm"]
    allowed = config["linux"]["resources"]["devices"]
    assert allowed[0] == {"allow": False, "access": "rwm"}
    assert {"allow": True, "type": "c", "major": 238, "minor": 0, "access": "rwm"} in allowed
    mount = next(m for m in config["mounts"] if m["source"] == "/drv/libcuda.so.580.159.04")
    assert mount["destination"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert "ro" in mount["options"]


def test_a_debian_package_unpacks_without_dpkg(tmp_path: Path) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.fail("dpkg-deb is needed to make the test's package: apt-get install -y dpkg")
    tree = tmp_path / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: sbtest\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t>\n"
        "Description: t\n")
    (tree / "usr" / "sbin").mkdir(parents=True)
    (tree / "usr" / "sbin" / "runc").write_text("#!/bin/sh\n")
    subprocess.run(["dpkg-deb", "-Zxz", "--build", str(tree), str(tmp_path / "t.deb")],
                   check=True, capture_output=True)
    device_bundle.unpack_deb(tmp_path / "t.deb", tmp_path / "out")
    assert (tmp_path / "out" / "usr" / "sbin" / "runc").read_text() == "#!/bin/sh\n"


def ar_archive(members: dict[str, bytes]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members.items():
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return out


def test_a_package_compressed_with_zstd_is_refused_in_one_line(tmp_path: Path) -> None:
    deb = tmp_path / "runc_1.deb"
    deb.write_bytes(ar_archive({"debian-binary": b"2.0\n", "data.tar.zst": b"x"}))
    with pytest.raises(BundleError) as caught:
        device_bundle.unpack_deb(deb, tmp_path / "out")
    assert str(caught.value) == ("runc_1.deb: its files are in data.tar.zst, which this "
                                 "Python cannot unpack")


def test_a_file_that_is_no_package_is_refused(tmp_path: Path) -> None:
    deb = tmp_path / "runc_1.deb"
    deb.write_text("not a package")
    with pytest.raises(BundleError, match=r"^runc_1.deb: not a Debian package "):
        device_bundle.unpack_deb(deb, tmp_path / "out")


def test_a_file_that_is_no_bundle_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "b.tar.xz").write_text("no")
    assert oci_runtime.main([str(tmp_path / "b.tar.xz")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"error: {tmp_path / 'b.tar.xz'}: not a readable bundle (not a tar file, or a damaged "
        "one)", "  hint: copy it again, or make it again with `sparkbake device-bundle TAG`"]


def test_a_bundle_without_runc_says_so(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbake import records
    archive = tmp_path / "b.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        data = json.dumps(records.to_json(bundle())).encode()
        info = tarfile.TarInfo(device_bundle.BUNDLE_FILE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert oci_runtime.main([str(archive)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == \
        "error: the bundle's packages hold no runc"


def test_a_host_without_apt_get_is_one_line_naming_what_the_bundle_carries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(EngineError) as caught:
        root_bundle.runtime_packages(tmp_path / "packages")
    assert str(caught.value).splitlines() == [
        "apt-get is not on PATH: the device bundle carries runc as Debian packages",
        "  -> this host needs apt with a Debian release's sources (runc is in bookworm's main)"]


def test_a_failed_download_is_one_line_with_aptgets_last_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "apt-get").write_text("#!/bin/sh\necho 'E: Unable to locate package runc' >&2\n"
                                   "exit 100\n")
    (tools / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    with pytest.raises(EngineError) as caught:
        root_bundle.runtime_packages(tmp_path / "packages")
    assert str(caught.value).splitlines()[0] == (
        "apt-get download runc libseccomp2 failed: E: Unable to locate package runc")


def test_cached_packages_need_no_apt_get(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "packages"
    folder.mkdir()
    for name in ("runc_1.1.5_amd64.deb", "libseccomp2_2.5.4_amd64.deb"):
        (folder / name).write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert [p.name for p in root_bundle.runtime_packages(folder)] == [
        "runc_1.1.5_amd64.deb", "libseccomp2_2.5.4_amd64.deb"]
