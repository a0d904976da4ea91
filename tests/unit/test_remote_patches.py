"""Remote entries of a series file (`URL sha256=<hex>`): parsed in order with local ones,
bad lines refused at file:line by the plan and reported by patch-lint, no network."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.errors import ConfigError
from sparkbake.fetch.remote_patches import CACHE, RemotePatch
from sparkbake.series import lint
from tests.conftest import plain_console

PIN = "ab" * 32
URL = "https://git.example/vllm/vllm/commit/0123abcd.patch"
PATCH = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def write_series(patches_dir: Path, listing: str) -> Path:
    folder = patches_dir / "demo"
    folder.mkdir(parents=True)
    (folder / "0001-local.patch").write_text(PATCH)
    (folder / "0003-local.patch").write_text(PATCH)
    (folder / "series").write_text(listing)
    return folder / "series"


def test_local_and_remote_entries_keep_their_order(tmp_path: Path) -> None:
    listing = write_series(tmp_path / "patches", f"# order\n0001-local.patch\n{URL} "
                           f"sha256={PIN}  # an upstream PR\n0003-local.patch -p1\n")
    info = planning.read_series(tmp_path / "patches", "demo", tmp_path / "build")
    assert [name for name, _ in info.patches] == ["0001-local.patch", URL, "0003-local.patch"]
    cached = tmp_path / "build" / CACHE / f"{PIN}.patch"
    assert info.remote == (RemotePatch(URL, PIN, f"{listing}:3", cached),)
    assert info.patches[1] == (URL, PIN)
    assert info.path(URL) == cached
    assert info.path("0001-local.patch") == listing.parent / "0001-local.patch"
    assert info.record(URL, PIN) == {"url": URL, "sha256": PIN}
    assert info.record("0001-local.patch", "f" * 64) == {"file": "0001-local.patch",
                                                         "sha256": "f" * 64}


def test_the_series_hash_follows_the_remote_pin(tmp_path: Path) -> None:
    write_series(tmp_path / "a", f"{URL} sha256={PIN}\n")
    write_series(tmp_path / "b", f"{URL} sha256={'cd' * 32}\n")
    assert planning.read_series(tmp_path / "a", "demo").sha256 != \
        planning.read_series(tmp_path / "b", "demo").sha256


BAD_LINES = [
    (f"{URL}", "needs one sha256=<64 hex> (found 0)"),
    (f"{URL} sha256={PIN[:-1]}", "options 'sha256=" + PIN[:-1] + "' are not supported"),
    (f"{URL} sha256={PIN.upper()}", "are not supported"),
    (f"{URL} sha256={PIN} sha256={PIN}", "needs one sha256=<64 hex> (found 2)"),
    (f"{URL} sha256={PIN} -p0", "options '-p0' are not supported for remote patch"),
    (f"ftp://git.example/x.patch sha256={PIN}", "is not an http(s) URL"),
    (f"https:///x.patch sha256={PIN}", "is not an http(s) URL"),
]


@pytest.mark.parametrize(("line", "what"), BAD_LINES)
def test_a_bad_remote_line_is_a_config_error_at_its_file_and_line(
        tmp_path: Path, line: str, what: str) -> None:
    listing = write_series(tmp_path, f"0001-local.patch\n\n{line}\n")
    with pytest.raises(ConfigError) as info:
        planning.read_series(tmp_path, "demo")
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{listing}:3: ")
    assert what in info.value.message
    assert "docs/how-to/patches.md" in info.value.remedy


@pytest.mark.parametrize(("line", "what"), BAD_LINES)
def test_patch_lint_reports_a_bad_remote_line_at_its_file_and_line(
        tmp_path: Path, line: str, what: str) -> None:
    listing = write_series(tmp_path, f"0001-local.patch\n{line}\n")
    found = lint.read_listing(listing.parent, tmp_path / "build")
    assert [p.where for p in found.problems] == [f"{listing}:2"]
    assert what in found.problems[0].what


def test_patch_lint_takes_a_remote_line_without_fetching_it(tmp_path: Path) -> None:
    listing = write_series(tmp_path, f"{URL} sha256={PIN}\n0001-local.patch\n{URL} "
                           f"sha256={PIN}\n")
    found = lint.read_listing(listing.parent, tmp_path / "build")
    assert found.entries == ((1, URL), (2, "0001-local.patch"), (3, URL))
    assert [str(p) for p in found.problems] == [
        f"{listing}:3: {URL} is listed twice (first on line 1)"]
    count, problems = lint.lint_folder(listing.parent, [], tmp_path / "build",
                                       console=plain_console())
    assert count == 2
    assert [p for p in problems if str(listing) in p.where] == list(found.problems)
