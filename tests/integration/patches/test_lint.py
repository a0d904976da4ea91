"""patch-lint and the safety checks of the patch stage, on series imported from real
vLLM changes and then broken one way each."""

from __future__ import annotations

from pathlib import Path

from tests.integration.patches.conftest import VllmProject
from tests.integration.patches.helpers import error_lines

REAL = "0001-exceptions-add-ChatTemplateResolutionError.patch"
REPO = Path(__file__).resolve().parents[3]


def real_patch(project: VllmProject) -> str:
    return (project.series("upstream-fixes") / REAL).read_text()


def write_series(project: VllmProject, name: str, patches: dict[str, str],
                 listing: list[str]) -> Path:
    folder = project.series(name)
    folder.mkdir()
    for file, text in patches.items():
        (folder / file).write_text(text)
    (folder / "series").write_text("# broken on purpose\n" + "".join(f"{x}\n" for x in listing))
    return folder


def retarget(text: str, path: str) -> str:
    """The real patch, aimed at another path."""
    return text.replace("a/vllm/exceptions.py", f"a/{path}").replace(
        "b/vllm/exceptions.py", f"b/{path}")


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1)
                if needle in line)


def test_patch_lint_reports_each_problem_with_file_and_line(vllm_project: VllmProject) -> None:
    real = real_patch(vllm_project)
    head, diff = real.split("\ndiff --git", 1)
    no_description = head.split("\n\n", 1)[0] + "\n\ndiff --git" + diff
    binary = (head + "\ndiff --git a/vllm/data.bin b/vllm/data.bin\nindex 1111111..2222222 "
              "100644\nBinary files a/vllm/data.bin and b/vllm/data.bin differ\n")
    folder = write_series(vllm_project, "broken", {
        "0001-ok.patch": real,
        "0003-no-description.patch": no_description,
        "0004-traversal.patch": retarget(real, "../../etc/profile.d/x.sh"),
        "0005-absolute.patch": real.replace("+++ b/vllm/exceptions.py", "+++ /etc/passwd"),
        "0006-binary.patch": binary,
        "0009-stray.patch": real,
    }, ["0001-ok.patch", "0002-missing.patch", "0003-no-description.patch",
        "0004-traversal.patch", "0005-absolute.patch", "0006-binary.patch", "0001-ok.patch"])
    code, _, err = vllm_project.run("patch-lint")
    assert code == 2
    listing = folder / "series"
    expected = [
        f"{listing}:3: patch '0002-missing.patch' does not exist",
        f"{listing}:8: 0001-ok.patch is listed twice (first on line 2)",
        f"{folder / '0009-stray.patch'}: not listed in {listing}",
        f"{folder / '0003-no-description.patch'}:4: no description: say what, why, "
        "upstream status, when to drop",
        f"{folder / '0004-traversal.patch'}:9: '../../etc/profile.d/x.sh' is outside the "
        "tree (..)",
        f"{folder / '0005-absolute.patch'}:{line_of(folder / '0005-absolute.patch', '+++ /')}: "
        "'/etc/passwd' is an absolute path",
        f"{folder / '0006-binary.patch'}:9: binary change without its data: make the patch "
        "with `git format-patch --binary`",
    ]
    for line in expected:
        assert line in err.splitlines(), line
    assert error_lines(err)[0].startswith("sparkbake: error: patch-lint: ")


def test_patch_lint_passes_the_imported_series_and_this_repository(
        vllm_project: VllmProject) -> None:
    code, _, err = vllm_project.run("patch-lint")
    assert code == 0, err
    assert "patch-lint: 5 series, 9 patches: ok" in err
    for config in (REPO / "versions.yaml", REPO / "tests/data/versions.yaml"):
        code, _, err = vllm_project.run("patch-lint", "--config", str(config))
        assert code == 0, err


def test_a_plain_diff_without_a_mail_header_is_refused(vllm_project: VllmProject) -> None:
    plain = "diff --git" + real_patch(vllm_project).split("\ndiff --git", 1)[1]
    folder = write_series(vllm_project, "plain", {"0001-plain.patch": plain},
                          ["0001-plain.patch"])
    code, _, err = vllm_project.run("patch-lint")
    assert code == 2
    assert f"{folder / '0001-plain.patch'}:1: no Subject: header" in err


def test_a_series_named_twice_in_a_tag_is_reported(vllm_project: VllmProject) -> None:
    config = vllm_project.config_path
    config.write_text(config.read_text().replace("[upstream-fixes, local-conflict]",
                                                 "[upstream-fixes, upstream-fixes]"))
    code, _, err = vllm_project.run("patch-lint")
    assert code == 2
    assert "tag 'old-conflict' lists a series twice" in error_lines(err)[0]


def test_the_patch_stage_refuses_a_path_outside_the_tree_before_copying_it(
        vllm_project: VllmProject) -> None:
    write_series(vllm_project, "unsafe", {"0001-escape.patch": retarget(
        real_patch(vllm_project), "vllm/../../outside.py")}, ["0001-escape.patch"])
    code, _, err = vllm_project.run("patch", "unsafe")
    assert code == 2
    patch = vllm_project.series("unsafe") / "0001-escape.patch"
    assert error_lines(err)[0] == (f"sparkbake: error: {patch}:9: 'vllm/../../outside.py' is "
                                   "outside the tree (..)")
    assert not (vllm_project.root / "build" / "patched").exists()  # nothing was copied


def test_a_path_through_a_symlink_of_the_upstream_tree_is_refused(
        vllm_project: VllmProject) -> None:
    upstream = vllm_project.root / "linked"
    (upstream / "vllm").mkdir(parents=True)
    (upstream / "vllm" / "exceptions.py").write_text("pass\n")
    (upstream / "plugins").symlink_to("/tmp")
    config = vllm_project.config_path
    config.write_text(config.read_text().replace(
        "upstreams:\n", "upstreams:\n  linked: {dir: linked}\n").replace(
        "tags:\n", "tags:\n  linked: {upstream: linked, series: [through-link]}\n"))
    write_series(vllm_project, "through-link", {"0001-link.patch": retarget(
        real_patch(vllm_project), "plugins/evil.py")}, ["0001-link.patch"])
    patch = vllm_project.series("through-link") / "0001-link.patch"
    code, _, err = vllm_project.run("patch", "linked")
    assert code == 2
    message = "'plugins/evil.py' goes through the symlink 'plugins' of the upstream tree"
    assert error_lines(err)[0] == f"sparkbake: error: {patch}:9: {message}"
    code, _, err = vllm_project.run("patch-lint")  # the fetched tree is known now
    assert code == 2
    assert f"{patch}:9: {message}" in err.splitlines()
