"""export-series / import-series on the real vLLM tree, and rebase-check 0.32.0 -> 0.33.0."""

from __future__ import annotations

import shutil
from pathlib import Path

from sparkbake.patch import gitwork
from tests.conftest import plain_console
from tests.integration.patches.conftest import Trees, VllmProject
from tests.integration.patches.helpers import error_lines, folder_bytes, git

EPOCH = "Date: Thu, 1 Jan 1970 00:00:00 +0000"


def sibling(project: VllmProject, root: Path) -> VllmProject:
    """Another project with the same versions.yaml and a copy of the series folders."""
    root.mkdir(parents=True)
    shutil.copy(project.config_path, root / "versions.yaml")
    shutil.copytree(project.root / "patches", root / "patches")
    return VllmProject(root)


def test_export_of_the_checkout_gives_back_the_same_bytes_and_is_stable(
        applied: VllmProject, tmp_path: Path) -> None:
    other = sibling(applied, tmp_path / "other")
    checkout = str(applied.root / "checkout")
    original = folder_bytes(applied.series("upstream-fixes"))
    code, _, err = other.run("export-series", checkout, "upstream-fixes")
    assert code == 0, err
    assert "series upstream-fixes: 3 patch(es)" in err and "0 new or changed" in err
    assert folder_bytes(other.series("upstream-fixes")) == original
    for text in original.values():
        if text.startswith(b"From "):
            assert text.startswith(b"From 0000000000000000000000000000000000000000 ")
            assert EPOCH.encode() in text and b"Sparkbake-" not in text


def test_export_refreshes_the_three_way_patch_and_a_re_export_is_byte_identical(
        applied: VllmProject, tmp_path: Path) -> None:
    other = sibling(applied, tmp_path / "other")
    checkout = str(applied.root / "checkout")
    before = folder_bytes(applied.series("spark-tuning"))
    assert other.run("export-series", checkout, "spark-tuning")[0] == 0
    first = folder_bytes(other.series("spark-tuning"))
    changed = sorted(name for name in first if first[name] != before[name])
    assert changed == ["0003-scheduler-reword-async_scheduling.patch"]
    refreshed = first[changed[0]].decode()
    assert "@@ -209,7 +209,7 @@ class SchedulerConfig:" in refreshed  # on top of scheduler-doc
    assert "Subject: [PATCH] scheduler: reword async_scheduling" in refreshed
    assert other.run("export-series", checkout, "spark-tuning")[0] == 0
    assert folder_bytes(other.series("spark-tuning")) == first


def test_a_commit_added_in_the_checkout_joins_the_series_before_it(
        applied: VllmProject, tmp_path: Path) -> None:
    other = sibling(applied, tmp_path / "other")
    path = "vllm/config/multimodal.py"
    clone = gitwork.work_tree(applied.root / "checkout" / ".git", Path("unused"),
                              tmp_path / "clone", sparse=[path], console=plain_console())
    text = (clone.tree / path).read_text()
    (clone.tree / path).write_text(text.replace("Amount of GPU memory", "GPU memory"))
    git(clone.tree, "commit", "-q", "-am", "multimodal: shorter wording\n\nWhy: brevity.")
    code, _, err = other.run("export-series", str(clone.tree), "spark-tuning")
    assert code == 0, err
    listing = (other.series("spark-tuning") / "series").read_text().splitlines()
    assert listing[-1] == "0004-multimodal-shorter-wording.patch"
    added = (other.series("spark-tuning") / listing[-1]).read_text()
    assert "From: Fork Dev <dev@fork.example>" in added and EPOCH in added
    assert "-    \"\"\"Amount of GPU memory" in added


def test_an_export_that_would_drop_a_listed_patch_is_refused_unless_asked(
        applied: VllmProject, tmp_path: Path) -> None:
    """The rebase flow's slip: a conflict resolved and committed, the rest of the series
    never `git am -3`-ed, then the export."""
    other = sibling(applied, tmp_path / "other")
    clone = gitwork.work_tree(applied.root / "checkout" / ".git", Path("unused"),
                              tmp_path / "clone", sparse=["vllm/config/multimodal.py"],
                              console=plain_console())
    git(clone.tree, "reset", "-q", "--hard", "HEAD~1")  # spark-tuning's last patch not applied
    before = folder_bytes(other.series("spark-tuning"))
    code, _, err = other.run("export-series", str(clone.tree), "spark-tuning")
    assert code == 2
    listing = other.series("spark-tuning") / "series"
    assert error_lines(err) == [
        f"sparkbake: error: export-series spark-tuning: {clone.tree} has no commit of "
        f"0003-scheduler-reword-async_scheduling.patch, which {listing} lists; the export "
        "would drop it",
        f"  -> apply the rest first (`git -C {clone.tree} am -3 {listing.parent}/"
        "0003-scheduler-reword-async_scheduling.patch` ...), or pass --drop to drop them"]
    assert folder_bytes(other.series("spark-tuning")) == before  # nothing written
    code, _, err = other.run("export-series", str(clone.tree), "spark-tuning", "--drop")
    assert code == 0, err
    assert listing.read_text().splitlines()[-1].startswith("0002-")


def test_import_of_a_range_from_a_fork_url_matches_the_series(
        applied: VllmProject, tmp_path: Path, trees: Trees) -> None:
    other = sibling(applied, tmp_path / "other")
    code, _, err = other.run("import-series", "--from", f"file://{trees.fork}", "--range",
                             "base..fixes", "fixes-again")
    assert code == 0, err
    assert folder_bytes(other.series("fixes-again")) == folder_bytes(
        applied.series("upstream-fixes"))
    code, _, err = other.run("import-series", "--from", str(trees.fork), "--range",
                             "base..nowhere", "x")
    assert code == 2
    assert "--range base..nowhere" in error_lines(err)[0]


def test_import_from_the_checkout_strips_sparkbake_trailers(
        applied: VllmProject, tmp_path: Path) -> None:
    other = sibling(applied, tmp_path / "other")
    checkout = applied.root / "checkout"
    code, _, _ = other.run("import-series", "--from", str(checkout), "--range",
                           "sparkbake-upstream..HEAD~4", "fixes-from-checkout")
    assert code == 0
    assert folder_bytes(other.series("fixes-from-checkout")) == folder_bytes(
        applied.series("upstream-fixes"))


def test_rebase_check_prints_a_row_per_patch_and_exits_3(applied: VllmProject) -> None:
    code, out, err = applied.run("rebase-check", "old-full", "--to", "vllm-0.33.0")
    assert code == 3
    lines = out.splitlines()
    assert lines[0] == ("rebase-check old-full: vllm-0.32.0 -> vllm-0.33.0 "
                        "(vllm 0.33.0, sdist sha256 f4c33c2503d5)")
    rows = [line.split(None, 2) for line in lines[2:-1]]
    assert [(series, result) for series, _, result in rows] == [
        ("upstream-fixes", "already upstream"),
        ("upstream-fixes", "already upstream"),
        ("upstream-fixes", "already upstream"),
        ("scheduler-doc", "already upstream"),
        ("spark-tuning", "applies"),
        ("spark-tuning", "applies with offset: vllm/config/multimodal.py hunk #1 at line 466 "
                         "(offset 1 line)"),
        # made against 0.32.0: merged with its base blobs, lent from the tag's own upstream
        ("spark-tuning", "applies (three-way merge)"),
    ]
    assert lines[-1] == "3 of 7 patches apply"
    assert error_lines(err)[0] == ("sparkbake: error: rebase-check: 4 of 7 patches of old-full "
                                   "do not apply cleanly to vllm-0.33.0")
    # one line for the stage, the commands in its log; only the touched files checked out
    assert "+ git " not in err and "rebase-check" in err.splitlines()[0]
    log = (applied.root / "build" / "logs" / "old-full" / "rebase-check.log").read_text()
    assert "+ git " in log and "+ cp " not in log


def test_rebase_check_exits_0_when_every_patch_applies(applied: VllmProject) -> None:
    code, out, _ = applied.run("rebase-check", "new-fixes", "--to", "vllm-0.32.0")
    assert code == 0
    assert out.splitlines()[-1] == "4 of 4 patches apply"


def test_rebase_check_names_an_unknown_upstream(applied: VllmProject) -> None:
    code, _, err = applied.run("rebase-check", "old-full", "--to", "vllm-0.34.0")
    assert code == 2
    assert "no upstream 'vllm-0.34.0'" in err and "vllm-0.33.0" in err
