"""What a broken series says, on the fixture tree with git: a malformed patch is not a
conflict, and a series listing a missing patch says to add it or remove the line."""

from __future__ import annotations

import pytest

from tests.conftest import Project
from tests.integration.test_pipeline import SYNTAX_ERROR, add_patch, use_series

REMAKE = ("  -> remake it with `git format-patch`, or fix that hunk and its @@ line counts "
          "(`sparkbake patch-lint` checks every patch)")
# SYNTAX_ERROR without its hunk's last line: its @@ line (line 10) counts one more
TRUNCATED = SYNTAX_ERROR.removesuffix("     }\n")
CORRUPT_BINARY = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] add a data file

Its binary data was mangled by a mail client.
---
diff --git a/data.bin b/data.bin
new file mode 100644
index 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111
GIT binary patch
literal 5
zzzzzzzzz

literal 0
HcmV?d00001

"""


def error_block(err: str) -> list[str]:
    return err[err.index("sparkbake: error: "):].splitlines()


@pytest.mark.parametrize(("text", "line", "what", "before_copy"), [
    (TRUNCATED, 10, "the hunk has fewer lines than its @@ line counts (-9,3 +9,3)", True),
    # found by git itself, while applying
    (CORRUPT_BINARY, 12, "git apply reads it as a corrupt binary patch", False),
])
def test_a_malformed_patch_is_not_a_conflict(
        project: Project, capsys: pytest.CaptureFixture[str], text: str, line: int,
        what: str, before_copy: bool) -> None:
    add_patch(project, "broken", "0001-broken.patch", text)
    use_series(project, "broken")
    assert project.sparkbake("patch", "fixture") == 3
    err = capsys.readouterr().err
    patch = project.root / "patches" / "broken" / "0001-broken.patch"
    assert error_block(err) == [
        f"sparkbake: error: {patch}:{line}: malformed patch (not a conflict): {what}", REMAKE]
    assert "CONFLICT" not in err
    assert (project.root / "build" / "patched").exists() is not before_copy


@pytest.mark.parametrize("text", ["notes about a fix, not a diff\n", "\x00\x01binary\n"])
def test_a_file_that_is_not_a_patch_is_named_as_such(
        project: Project, capsys: pytest.CaptureFixture[str], text: str) -> None:
    add_patch(project, "notes", "0001-notes.patch", text)
    use_series(project, "notes")
    assert project.sparkbake("patch", "fixture") == 3
    patch = project.root / "patches" / "notes" / "0001-notes.patch"
    assert error_block(capsys.readouterr().err) == [
        f"sparkbake: error: {patch}: not a patch: git apply finds no diff in it",
        "  -> put a patch there (`git format-patch`), or take it out of the series file"]


def test_patch_lint_names_the_malformed_line(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    add_patch(project, "cut", "0001-cut.patch", TRUNCATED)
    assert project.sparkbake("patch-lint") == 2
    patch = project.root / "patches" / "cut" / "0001-cut.patch"
    assert (f"{patch}:10: malformed: the hunk has fewer lines than its @@ line counts "
            "(-9,3 +9,3)") in capsys.readouterr().err.splitlines()


def test_a_series_listing_a_missing_patch_says_to_add_it_or_remove_the_line(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    add_patch(project, "gap", "0001-syntax-error.patch", SYNTAX_ERROR)
    series = project.root / "patches" / "gap" / "series"
    series.write_text("0001-syntax-error.patch\n0002-missing.patch\n")
    use_series(project, "gap")
    assert project.sparkbake("patch", "fixture") == 2
    missing = series.parent / "0002-missing.patch"
    assert error_block(capsys.readouterr().err) == [
        f"sparkbake: error: {series}:2: patch '0002-missing.patch' does not exist",
        f"  -> add {missing}, or remove line 2 from the series file"]
