"""Pure text logic of the patch tools: export normalization and patch parsing for lint."""

from __future__ import annotations

from pathlib import Path

from sparkbake.patch.parsed import read_patch, unsafe
from sparkbake.series import exchange

EXPORTED = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Dev <dev@example.org>
Date: Tue, 3 Mar 2026 10:11:12 +0100
Subject: [PATCH] sql: drop a comment

Why: it is wrong.

Sparkbake-Series: fixes
Sparkbake-Patch: 0001-sql-drop-a-comment.patch

diff --git a/schema.sql b/schema.sql
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- a/schema.sql
+++ b/schema.sql
@@ -1,3 +1,2 @@
--- ../../etc/passwd is not a path here
-Date: kept in the diff
 create table t (a int);
+Sparkbake-Series: a line of the file, kept
"""


def test_normalize_fixes_the_date_drops_our_trailers_and_leaves_the_diff() -> None:
    text = exchange.normalize(EXPORTED)
    head, diff = text.split("\ndiff --git ", 1)
    assert "Date: Thu, 1 Jan 1970 00:00:00 +0000\n" in head
    assert head.endswith("Why: it is wrong.\n")
    assert "Sparkbake-" not in head
    assert diff == EXPORTED.split("\ndiff --git ", 1)[1]
    assert exchange.normalize(text) == text


def test_lines_of_a_hunk_are_not_taken_for_paths(tmp_path: Path) -> None:
    patch = tmp_path / "p.patch"
    patch.write_text(EXPORTED)
    parsed = read_patch(patch)
    assert {name for _, name in parsed.paths} == {"schema.sql"}
    assert parsed.subject == (4, "[PATCH] sql: drop a comment")
    assert parsed.description == 3  # the Why line and the two trailers
    assert unsafe(parsed) == []


def test_paths_that_leave_the_tree_are_named(tmp_path: Path) -> None:
    patch = tmp_path / "p.patch"
    patch.write_text(EXPORTED.replace("a/schema.sql", "a/sub/../../x").replace(
        "b/schema.sql", "b/sub/../../x"))
    [problem] = unsafe(read_patch(patch))
    assert str(problem) == f"{patch}:11: 'sub/../../x' is outside the tree (..)"
