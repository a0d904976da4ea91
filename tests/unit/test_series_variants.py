"""A series' variant per upstream (patches/<series>/<upstream>/): which folder a tag reads,
what patch-lint and export-series make of it; no Docker, no network."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.config import versions as config_mod
from sparkbake.config.versions import Config
from sparkbake.errors import ConfigError
from sparkbake.patch import gitapply
from sparkbake.series import exchange, lint
from tests.conftest import TREE_UPSTREAM, plain_console, versions_yaml

OLD = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
NEW = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-x = 10\n+x = 2\n"
PATCH = ("From: Dev <dev@example.org>\nSubject: [PATCH] x: two\n\nWhy: a test.\n\n"
         "diff --git a/x.py b/x.py\n{diff}")
TAGS = """\
  old:
    upstream: tree
    series: [fix]
  new:
    upstream: newer
    series: [fix]
"""
UPSTREAMS = TREE_UPSTREAM + "  newer:\n    dir: upstream-new\n"


def write_project(folder: Path) -> Config:
    """Two dir upstreams and one series `fix`, with a variant for `newer`."""
    for name, text in (("upstream", "x = 1\n"), ("upstream-new", "x = 10\n")):
        (folder / name).mkdir()
        (folder / name / "x.py").write_text(text)
    for where, diff in ((folder / "patches" / "fix", OLD),
                        (folder / "patches" / "fix" / "newer", NEW)):
        where.mkdir(parents=True)
        (where / "series").write_text("0001-x.patch\n")
        (where / "0001-x.patch").write_text(PATCH.format(diff=diff))
    path = folder / "versions.yaml"
    path.write_text(versions_yaml(tags=TAGS, upstreams=UPSTREAMS), encoding="utf-8")
    return config_mod.load(path)


def test_a_tag_reads_the_variant_of_its_upstream_and_the_others_the_series(
        tmp_path: Path) -> None:
    config = write_project(tmp_path)
    old = planning.make(config, config.tag("old")).series[0]
    new = planning.make(config, config.tag("new")).series[0]
    assert old.folder == tmp_path / "patches" / "fix"
    assert new.folder == tmp_path / "patches" / "fix" / "newer"
    assert (old.name, new.name) == ("fix", "fix")
    assert old.sha256 != new.sha256


def test_a_variant_leaves_the_keys_of_the_other_upstreams_tags_as_they_were(
        tmp_path: Path) -> None:
    config = write_project(tmp_path)
    with_variant = planning.make(config, config.tag("old"))
    for item in (tmp_path / "patches" / "fix" / "newer").iterdir():
        item.unlink()
    (tmp_path / "patches" / "fix" / "newer").rmdir()
    without = planning.make(config, config.tag("old"))
    assert (with_variant.patch_key, with_variant.inputs) == (without.patch_key, without.inputs)
    assert planning.make(config, config.tag("new")).series[0].folder == \
        tmp_path / "patches" / "fix"


def test_series_folder_without_an_upstream_is_the_series_folder(tmp_path: Path) -> None:
    (tmp_path / "fix" / "newer").mkdir(parents=True)
    assert planning.series_folder(tmp_path, "fix") == tmp_path / "fix"
    assert planning.series_folder(tmp_path, "fix", "other") == tmp_path / "fix"
    assert planning.series_folder(tmp_path, "fix", "newer") == tmp_path / "fix" / "newer"


def test_patch_lint_checks_each_variant(tmp_path: Path) -> None:
    config = write_project(tmp_path)
    (tmp_path / "patches" / "fix" / "newer" / "0002-stray.patch").write_text("x")
    with pytest.raises(ConfigError, match="1 problem"):
        lint.lint(config, console=plain_console())


def test_patch_lint_refuses_a_variant_named_by_no_upstream(tmp_path: Path) -> None:
    config = write_project(tmp_path)
    (tmp_path / "patches" / "fix" / "newr").mkdir()
    variants, problems = lint.variant_folders(config, tmp_path / "patches" / "fix")
    assert variants == [tmp_path / "patches" / "fix" / "newer"]
    assert [p.what for p in problems] == [
        "not an upstream of versions.yaml (did you mean 'newer'?): a variant folder is named "
        "by the upstream key it is for"]
    with pytest.raises(ConfigError, match="patch-lint: 1 problem"):
        lint.lint(config, console=plain_console())


def test_export_writes_a_variant_only_for_an_upstream_of_versions_yaml(tmp_path: Path) -> None:
    config = write_project(tmp_path)
    assert exchange.target_folder(config, "fix", "newer") == tmp_path / "patches" / "fix" / "newer"
    assert exchange.target_folder(config, "fix", None) == tmp_path / "patches" / "fix"
    with pytest.raises(ConfigError, match=r"no upstream 'newr' for the variant of series "
                                          r"'fix' \(did you mean 'newer'\?\)") as caught:
        exchange.target_folder(config, "fix", "newr")
    assert caught.value.exit_code == 2
    assert "known upstreams: newer, tree" in caught.value.remedy


def test_export_without_upstream_writes_what_the_checkout_s_upstream_reads(
        tmp_path: Path) -> None:
    config = write_project(tmp_path)
    assert exchange.read_folder(config, "fix", "newer") == tmp_path / "patches" / "fix" / "newer"
    assert exchange.read_folder(config, "fix", "tree") == tmp_path / "patches" / "fix"
    assert exchange.read_folder(config, "fix", None) == tmp_path / "patches" / "fix"
    assert exchange.read_folder(config, "other", "newer") == tmp_path / "patches" / "other"


def test_base_blobs_are_the_index_lines_old_side_new_files_left_out(tmp_path: Path) -> None:
    patch = tmp_path / "0001.patch"
    patch.write_text("diff --git a/x.py b/x.py\nindex 1a2b3c4d..5e6f7a8b 100644\n"
                     "diff --git a/n.py b/n.py\nnew file mode 100644\n"
                     "index 0000000000..9abcdef0\n")
    assert gitapply.base_blobs(patch) == ("1a2b3c4d",)
