"""Malformed patch files: hunks that do not match their @@ line counts."""

from __future__ import annotations

import pytest

from sparkbake.patch import syntax
from sparkbake.patch.syntax import Malformed

HEAD = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: sparkbake <sparkbake@localhost>
Subject: [PATCH] edit

A description.
---
diff --git a/f.txt b/f.txt
index 1111111..2222222 100644
--- a/f.txt
+++ b/f.txt
"""  # 10 lines: the hunk header is line 11
GOOD = HEAD + "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n-- \n2.43.0\n\n"


def test_a_well_formed_patch_with_a_signature_passes() -> None:
    assert syntax.check(GOOD) is None


def test_a_removed_line_that_looks_like_a_header_is_counted_not_judged() -> None:
    text = HEAD + "@@ -1,3 +1,2 @@\n a\n--- b\n c\n\\ No newline at end of file\n"
    assert syntax.check(text) is None


@pytest.mark.parametrize(("body", "expected"), [
    ("@@ -1,3 +1,3 @@\n a\ngarbage here\n-b\n+B\n c\n",
     Malformed(13, "'garbage here' inside the hunk of line 11 is not a ' ', '-' or '+' line")),
    ("@@ -1,3 +1,3 @@\n a\n-b\n+B\n",
     Malformed(11, "the hunk has fewer lines than its @@ line counts (-1,3 +1,3)")),
    ("@@ -1,3 +1,3 @@\n a\n-b\n@@ -9,1 +9,1 @@\n-x\n+y\n",
     Malformed(11, "the hunk has fewer lines than its @@ line counts (-1,3 +1,3)")),
    ("@@ -1,2 +1,2 @@\n a\n-b\n+B\n+added\n",
     Malformed(15, "'+added' after the hunk of line 11 is not counted by its @@ line "
                   "(-1,2 +1,2): git would ignore it")),
    ("@@ -1,x +1,3 @@\n a\n",
     Malformed(11, "'@@ -1,x +1,3 @@' is not a hunk header (@@ -START,COUNT +START,COUNT @@)")),
])
def test_a_malformed_hunk_is_named_by_its_line(body: str, expected: Malformed) -> None:
    assert syntax.check(HEAD + body) == expected


def test_git_applys_own_report_of_a_corrupt_patch() -> None:
    stderr = "Checking patch f.txt...\nerror: corrupt binary patch at line 14: zz\n"
    assert syntax.from_git(stderr) == Malformed(14, "git apply reads it as a corrupt "
                                                         "binary patch")
    assert syntax.from_git("error: patch failed: f.txt:3\n") is None
