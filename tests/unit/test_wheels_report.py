"""wheels.json read into its dataclasses and written back as the wheels stage writes it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from sparkbake import records
from sparkbake.config import versions
from sparkbake.wheels import container_build, entrycheck
from sparkbake.wheels.report import (
    REPORT,
    Jobs,
    KernelsUsed,
    ThirdPartySource,
    WheelsReport,
    read_report,
    write_report,
)

REPORTS = Path(__file__).parents[1] / "data" / "reports"
# written by the fixture tag's builds: one compiled in the builder (arm64, under emulation),
# one assembled on this host from the kernel cache's pristine wheel and the series
COMPILED, ASSEMBLED = REPORTS / "wheels-compiled.json", REPORTS / "wheels-assembled.json"


@pytest.mark.parametrize("path", [COMPILED, ASSEMBLED], ids=["compiled", "assembled"])
def test_a_report_is_written_back_byte_for_byte(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    read = records.from_json(WheelsReport, json.loads(text))
    write_report(tmp_path, read)
    assert (tmp_path / REPORT).read_text() == text
    assert read_report(tmp_path) == read


@pytest.mark.parametrize("path", [COMPILED, ASSEMBLED], ids=["compiled", "assembled"])
def test_each_wheel_entry_keeps_every_field(path: Path) -> None:
    """The image manifest lists the entries as wheels.json has them (its keys sorted)."""
    data = json.loads(path.read_text())
    read = records.from_json(WheelsReport, data)
    assert [records.to_json(wheel) for wheel in read.wheels] == data["wheels"]


def test_the_compiled_report_reads_into_its_parts() -> None:
    read = records.from_json(WheelsReport, json.loads(COMPILED.read_text()))
    (wheel,) = read.wheels
    assert (wheel.name, wheel.kernels[0].sass) == ("tinykern", ("sm_121a",))
    assert read.jobs == Jobs(2, 1, "24 GiB / 6 GiB per job, 2 CPUs")
    assert read.kernels == KernelsUsed(
        "10e15795af871bb3db27756e6d696c7b61bac0b3c868a088d908bb277ddef8d3", reused=False)
    assert read.compile_cache is not None and read.compile_cache.stats["misses"] == 4
    assert (read.thirdparty, read.series_files) == ((), None)


def test_third_party_sources_are_written_in_their_order(tmp_path: Path) -> None:
    data = json.loads(COMPILED.read_text())
    data["thirdparty"] = [{"name": "cutlass", "url": "https://example.org/cutlass.git",
                           "ref": "v4.2.0", "pin": "a" * 40, "tree": "b" * 64}]
    text = json.dumps(data, indent=2)
    read = records.from_json(WheelsReport, json.loads(text))
    assert read.thirdparty == (ThirdPartySource("cutlass", "https://example.org/cutlass.git",
                                                "v4.2.0", "a" * 40, "b" * 64),)
    write_report(tmp_path, read)
    assert (tmp_path / REPORT).read_text() == text


def test_a_report_of_an_earlier_version_reads_and_its_entry_is_intact(tmp_path: Path) -> None:
    """Before the local version, the kernel reuse, the jobs, the compile cache and the
    distribution name were recorded."""
    wheel = tmp_path / "tinykern-0.1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"a wheel")
    (tmp_path / REPORT).write_text(json.dumps({
        "cuda_arch": "12.1a", "sm_arch": "sm_121a", "nvcc": "Build cuda_13.0",
        "wheels": [{"file": wheel.name, "kernels": [],
                    "sha256": hashlib.sha256(b"a wheel").hexdigest()}]}, indent=2))
    read = read_report(tmp_path)
    assert (read.local_version, read.kernels, read.jobs, read.compile_cache) == \
        ("", None, None, None)
    assert read.wheels[0].name == ""
    assert entrycheck.damage(tmp_path) == ""


def test_a_report_with_a_misshapen_part_is_damaged(tmp_path: Path) -> None:
    data = json.loads(COMPILED.read_text())
    data["jobs"] = {"MAX_JOBS": "many", "NVCC_THREADS": 1, "why": "?"}
    (tmp_path / REPORT).write_text(json.dumps(data))
    assert entrycheck.damage(tmp_path) == "wheels.json is not a complete record"


def test_a_wheel_keeps_its_name_as_its_file_spells_it(tmp_path: Path) -> None:
    """wheels.json (and the image's manifest) name a wheel as its file does, not normalized
    (`flash_attn`, not packaging's `flash-attn`), as they did before the report was typed."""
    config = versions.load(Path(__file__).parents[1] / "data" / "versions.yaml")
    tag = next(iter(config.tags.values()))
    for file in ("flash_attn-2.7.4-cp311-cp311-linux_aarch64.whl",
                 "PyYAML-6.0.2-cp311-cp311-linux_aarch64.whl"):
        (tmp_path / file).write_bytes(b"not a zip: only hashed")
    (tmp_path / entrycheck.STAMPS).mkdir()
    made = container_build._wheels(tag, tmp_path, {
        "flash_attn-2.7.4-cp311-cp311-linux_aarch64.whl": (),
        "PyYAML-6.0.2-cp311-cp311-linux_aarch64.whl": ()})
    assert [wheel.name for wheel in made] == ["flash_attn", "PyYAML"]
