"""The installed distributions of a folder, as importlib.metadata finds them, and their
RECORDs read row by row."""

from __future__ import annotations

from pathlib import Path

from sparkbake.bake import distributions
from sparkbake.bake.distributions import Distribution, RecordedFile


def test_each_distribution_has_its_canonical_name_version_and_recorded_files(
        tmp_path: Path) -> None:
    info = tmp_path / "Flash_Attn-2.8.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Flash_Attn\nVersion: 2.8.0\n")
    (info / "RECORD").write_text('flash_attn/__init__.py,sha256=abc,10\n'
                                 '"flash_attn/N=1,K=2.json",sha256=def,2\n'
                                 "\n"  # a blank line: importlib's own reader fails on it
                                 ",,\n"
                                 "Flash_Attn-2.8.0.dist-info/RECORD,,\n")
    assert distributions.installed(tmp_path) == [Distribution("flash-attn", "2.8.0", (
        RecordedFile("flash_attn/__init__.py", "sha256=abc"),
        RecordedFile("flash_attn/N=1,K=2.json", "sha256=def"),
        RecordedFile("Flash_Attn-2.8.0.dist-info/RECORD", "")))]


def test_a_dist_info_without_metadata_is_no_distribution(tmp_path: Path) -> None:
    (tmp_path / "broken-1.0.dist-info").mkdir()
    (tmp_path / "broken-1.0.dist-info" / "RECORD").write_text("broken/x.py,,\n")
    for name in ("zeta", "alpha"):
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    assert [d.name for d in distributions.installed(tmp_path)] == ["alpha", "zeta"]
    assert distributions.installed(tmp_path)[0].files == ()  # no RECORD: nothing listed
