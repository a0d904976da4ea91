"""The patch stage on the real vLLM 0.32.0 and 0.33.0 trees, with series made of real
upstream changes: clean apply, three-way merge, conflicts, already-upstream patches."""

from __future__ import annotations

from pathlib import Path

from sparkbake.hashing import tree_hash
from tests.integration.patches.conftest import Trees, VllmProject
from tests.integration.patches.helpers import entry, error_lines, git, report, statuses

OLD_FULL = [
    ("upstream-fixes", "0001-exceptions-add-ChatTemplateResolutionError.patch", "applied"),
    ("upstream-fixes", "0002-forward_context-keep-the-batch-size-without-cudagrap.patch",
     "applied"),
    ("upstream-fixes", "0003-pynccl-abort-thread-must-not-reference-self.patch", "applied"),
    ("scheduler-doc", "0001-scheduler-document-prefill_schedule_interval-for-all.patch",
     "applied"),
    ("spark-tuning", "0001-version-say-what-failed-to-load.patch", "applied"),
    ("spark-tuning", "0002-multimodal-say-the-default.patch", "applied"),
    ("spark-tuning", "0003-scheduler-reword-async_scheduling.patch", "three-way"),
]


CONFLICTING = "0001-forward_context-test-num_tokens-first.patch"


def commits(git_dir: Path, tree: Path) -> list[dict[str, str]]:
    """Oldest first: subject, author, author date (unix), and the sparkbake trailers."""
    log = git(tree, "log", "--reverse", "--format=%s%x00%an <%ae>%x00%at%x00%ct%x00%B%x01",
              git_dir=git_dir)
    found = []
    for record in filter(None, (r.strip("\n") for r in log.split("\x01"))):
        subject, author, date, committed, body = record.split("\x00")
        trailers = dict(line.split(": ", 1) for line in body.splitlines()
                        if line.startswith("Sparkbake-"))
        found.append({"subject": subject, "author": author, "date": date,
                      "committed": committed, **trailers})
    return found


def test_a_multi_patch_series_is_one_commit_per_patch_with_its_own_subject_and_author(
        applied: VllmProject) -> None:
    patched = entry(applied, "old-full")
    log = commits(patched / "git", patched / "tree")
    assert log[0]["subject"].startswith("upstream: vllm-0.32.0 (vllm 0.32.0, sdist sha256")
    assert log[0]["author"] == "sparkbake <sparkbake@localhost>"
    assert [(c["Sparkbake-Series"], c["Sparkbake-Patch"]) for c in log[1:]] == [
        (series, name) for series, name, _ in OLD_FULL]
    assert log[1]["subject"] == "exceptions: add ChatTemplateResolutionError"
    assert {c["author"] for c in log[1:]} == {"Fork Dev <dev@fork.example>"}
    assert {c["date"] for c in log} == {"0"} and {c["committed"] for c in log} == {"0"}
    assert statuses(applied, "old-full") == OLD_FULL


def test_the_patched_tree_is_a_plain_tree_with_the_changes_and_its_recorded_hash(
        applied: VllmProject, trees: Trees) -> None:
    tree = entry(applied, "old-full") / "tree"
    assert not (tree / ".git").exists()  # the wheel build sees an sdist tree, not a repo
    assert report(applied, "old-full")["tree_hash"] == tree_hash(tree)
    for path in ("vllm/exceptions.py", "vllm/forward_context.py",
                 "vllm/distributed/device_communicators/pynccl.py"):
        assert (tree / path).read_bytes() == (trees.new / path).read_bytes()  # the real fix
    assert "Failed to read the version" in (tree / "vllm/version.py").read_text()
    assert (tree / "vllm/_version.py").is_file()  # ignored by vLLM's .gitignore, still there


def test_a_patch_made_on_the_old_base_merges_three_way_and_says_so(
        applied: VllmProject) -> None:
    scheduler = (entry(applied, "old-full") / "tree" / "vllm/config/scheduler.py").read_text()
    assert "Only admit prefill once every N engine steps" in scheduler  # scheduler-doc
    assert '"""If False, async scheduling is off.' in scheduler  # spark-tuning, three-way
    log = (applied.root / "patch.log").read_text()
    assert ("warning: patch spark-tuning/0003-scheduler-reword-async_scheduling.patch: "
            "merged three-way with the base blobs it names") in log


def test_a_second_run_is_a_cache_hit_that_copies_nothing(applied: VllmProject) -> None:
    code, _, err = applied.run("patch", "old-full")
    assert code == 0
    assert err.splitlines()[1].split()[:2] == ["patch", "cached"]
    log = applied.log("old-full", "patch")
    assert f"patch: old-full cached at {entry(applied, 'old-full').name[:12]}" in log
    assert "+ cp " not in log and "git apply" not in log


def test_checkout_is_a_git_work_tree_upstream_first_then_the_series(
        applied: VllmProject) -> None:
    checkout = applied.root / "checkout"
    patched = entry(applied, "old-full")
    assert git(checkout, "status", "--porcelain") == ""
    assert git(checkout, "rev-list", "--max-parents=0", "HEAD") == git(
        checkout, "rev-parse", "sparkbake-upstream^{commit}")
    assert git(checkout, "rev-parse", "HEAD") == git(patched / "tree", "rev-parse", "HEAD",
                                                     git_dir=patched / "git")
    assert len(git(checkout, "rev-list", "HEAD").split()) == 1 + len(OLD_FULL)
    assert tree_hash(checkout) == report(applied, "old-full")["tree_hash"]


def test_a_conflict_stops_with_exit_3_and_a_report_naming_patch_file_and_hunk(
        vllm_project: VllmProject) -> None:
    code, _, err = vllm_project.run("patch", "old-conflict")
    assert code == 3
    patch = vllm_project.series("local-conflict") / CONFLICTING
    log = vllm_project.log("old-conflict", "patch")  # the whole report; the error names it
    assert "patch       failed" in err and f"log: {vllm_project.root}/build/logs/" in err
    report_lines = log[log.index("patch: CONFLICT"):].splitlines()
    assert report_lines[1:7] == [
        "  tag:      old-conflict",
        "  upstream: vllm-0.32.0 (vllm 0.32.0, sdist sha256 d2c957d5eee3)",
        "  series:   local-conflict",
        f"  patch:    {patch}",
        "  subject:  forward_context: test num_tokens first",
        "  file:     vllm/forward_context.py",
    ]
    assert report_lines[7] == "  hunk:     @@ -330,7 +330,7 @@ def set_forward_context("
    assert ("            -    if cudagraph_runtime_mode != CUDAGraphMode.NONE and num_tokens is "
            "not None:") in report_lines
    assert "  three-way: conflicts in vllm/forward_context.py" in report_lines
    failed = entry(vllm_project, "old-conflict").with_name(
        entry(vllm_project, "old-conflict").name + ".failed")
    assert report_lines[report_lines.index("  three-way: conflicts in vllm/forward_context.py")
                        + 1] == (f"  tree:     {failed} (git log: what applied; rerun with "
                                 "--keep for the three-way conflict markers)")
    final = error_lines(err)
    assert len(final) == 2
    assert final[0] == (
        "sparkbake: error: tag old-conflict: patch local-conflict/0001-forward_context-test-"
        "num_tokens-first.patch does not apply to vllm-0.32.0 (vllm 0.32.0, sdist sha256 "
        "d2c957d5eee3): vllm/forward_context.py, hunk '@@ -330,7 +330,7 @@ def "
        "set_forward_context('")
    _assert_failed_tree(vllm_project, markers=False)
    code, _, err = vllm_project.run("patch", "old-conflict", "--keep")
    assert code == 3
    assert "(three-way conflict markers kept, commit message prefilled)" in \
        vllm_project.log("old-conflict", "patch")
    _assert_failed_tree(vllm_project, markers=True)


def test_a_conflict_resolved_in_the_kept_tree_is_exported_and_then_applies(
        vllm_project: VllmProject) -> None:
    assert vllm_project.run("patch", "old-conflict", "--keep")[0] == 3
    key = entry(vllm_project, "old-conflict")
    failed = key.with_name(key.name + ".failed")
    target = failed / "vllm/forward_context.py"
    text = target.read_text()
    start, end = text.index("<<<<<<< ours\n"), text.index(">>>>>>> theirs\n")
    ours = text[start:end].split("=======\n")[0].removeprefix("<<<<<<< ours\n")
    target.write_text(text[:start] + ours.replace("if num_tokens is not None:",
                                                  "if num_tokens is not None:  # local")
                      + text[end + len(">>>>>>> theirs\n"):])
    git(failed, "add", "-A")
    git(failed, "commit", "-q", "--no-edit", "--author=Fork Dev <dev@fork.example>")
    code, _, err = vllm_project.run("export-series", str(failed), "local-conflict")
    assert code == 0, err
    refreshed = (vllm_project.series("local-conflict") / CONFLICTING).read_text()
    assert "+    if num_tokens is not None:  # local" in refreshed
    assert "Subject: [PATCH] forward_context: test num_tokens first" in refreshed
    assert "From: Fork Dev <dev@fork.example>" in refreshed and "Sparkbake-" not in refreshed
    code, _, err = vllm_project.run("patch", "old-conflict")
    assert code == 0, err


def _assert_failed_tree(project: VllmProject, markers: bool) -> None:
    key = entry(project, "old-conflict")
    assert not key.exists()  # never a cache entry
    failed = key.with_name(key.name + ".failed")
    text = (failed / "vllm/forward_context.py").read_text()
    assert ("<<<<<<< ours" in text) is markers
    subjects = git(failed, "log", "--format=%s").splitlines()
    assert subjects[0] == "pynccl: abort thread must not reference self"  # what applied
    assert len(subjects) == 4
    assert git(failed, "status", "--porcelain") == ("UU vllm/forward_context.py" if markers
                                                    else "")


def test_patches_already_in_upstream_stop_the_stage_unless_skip_applied(
        vllm_project: VllmProject, trees: Trees) -> None:
    code, _, err = vllm_project.run("patch", "new-fixes")
    assert code == 3
    assert error_lines(err) == [
        "sparkbake: error: tag new-fixes: patch upstream-fixes/0001-exceptions-add-"
        "ChatTemplateResolutionError.patch is already in upstream vllm-0.33.0 (vllm 0.33.0, "
        "sdist sha256 f4c33c2503d5): its reverse applies",
        "  -> drop it from the series, or rerun with --skip-applied to skip it"]
    assert not entry(vllm_project, "new-fixes").exists()
    code, _, err = vllm_project.run("patch", "new-fixes", "--skip-applied")
    assert code == 0, err
    assert err.count("is already in upstream vllm 0.33.0, sdist sha256 f4c33c2503d5: skipped "
                     "(--skip-applied)") == 3
    assert ("warning: patch mm-offset/0001-multimodal-say-the-default.patch: "
            "vllm/config/multimodal.py hunk #1 at line 466 (offset 1 line)") in err
    assert [s for _, _, s in statuses(vllm_project, "new-fixes")] == [
        "upstream", "upstream", "upstream", "offset"]
    tree = entry(vllm_project, "new-fixes") / "tree"
    for path in ("vllm/exceptions.py", "vllm/forward_context.py"):  # not applied twice
        assert (tree / path).read_bytes() == (trees.new / path).read_bytes()
    assert "Set to `0` (the default)" in (tree / "vllm/config/multimodal.py").read_text()
    code, _, err = vllm_project.run("patch", "new-fixes")  # the cache entry stays fail-closed
    assert code == 3 and "is already in upstream" in err
    code, _, err = vllm_project.run("patch", "new-fixes", "--skip-applied")
    assert code == 0
    assert "(3 already-upstream patch(es) skipped)" in vllm_project.log("new-fixes", "patch")
