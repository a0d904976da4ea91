"""bench-incremental's own logic: which line it changes, and how layers are compared."""

from __future__ import annotations

from pathlib import Path

import bench_incremental
import pytest

from sparkbake.config import versions
from tests.conftest import versions_yaml

PATCH = """\
From 1 Mon Sep 17 00:00:00 2001
Subject: [PATCH] x

diff --git a/csrc/k.cu b/csrc/k.cu
--- a/csrc/k.cu
+++ b/csrc/k.cu
@@ -1 +1,2 @@
 int a;
+// a C comment
diff --git a/pkg/m.py b/pkg/m.py
--- a/pkg/m.py
+++ b/pkg/m.py
@@ -1 +1,3 @@
 x = 1
+    # why this is so
+y = 2
"""
VERSIONS = versions_yaml(tags="  t: {upstream: tree, series: [s]}\n")


def test_the_first_added_python_comment_gets_a_word_more(tmp_path: Path) -> None:
    (tmp_path / "patches" / "s").mkdir(parents=True)
    patch = tmp_path / "patches" / "s" / "0001-x.patch"
    patch.write_text(PATCH)
    (tmp_path / "versions.yaml").write_text(VERSIONS)
    loaded = versions.load(tmp_path / "versions.yaml")
    changed = bench_incremental._change_a_python_patch(loaded, loaded.tag("t"))
    assert changed == "s/0001-x.patch: +    # why this is so"
    assert patch.read_text() == PATCH.replace("# why this is so", "# why this is so (changed)")


def test_a_series_without_a_python_comment_is_refused(tmp_path: Path) -> None:
    (tmp_path / "patches" / "s").mkdir(parents=True)
    (tmp_path / "patches" / "s" / "0001-x.patch").write_text(PATCH.split("diff --git a/pkg")[0])
    (tmp_path / "versions.yaml").write_text(VERSIONS)
    loaded = versions.load(tmp_path / "versions.yaml")
    with pytest.raises(SystemExit, match="no Python comment line to change"):
        bench_incremental._change_a_python_patch(loaded, loaded.tag("t"))


def test_kept_layers_are_counted_by_digest() -> None:
    before = [{"digest": d, "size": 1, "what": w} for d, w in (("a", "base"), ("b", "venv"))]
    after = [before[0], {"digest": "c", "size": 2, "what": "venv"}]
    assert bench_incremental._kept(before, after) == {
        "kept": 1, "of": 2, "changed": [{"what": "venv", "size": 2}]}


def test_the_sample_kept_is_the_median_build_image_time() -> None:
    samples = [{"build_image_s": seconds, "n": n} for n, seconds in enumerate((30.0, 24.5, 41.0))]
    assert bench_incremental.median_sample(samples)["n"] == 0
    assert bench_incremental.median_sample(samples[:2])["n"] == 1  # the lower of two
    with pytest.raises(SystemExit, match="at least 1"):
        bench_incremental.median_sample([])


def test_no_changes_is_refused_before_anything_is_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_incremental.main(["--changes", "0", "--work", str(tmp_path / "work")])
    assert stopped.value.code == 2
    assert "--changes must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()
