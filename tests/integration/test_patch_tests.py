"""patch-tests on the real vLLM 0.33.0 and 0.34.0 trees: the production series' own CPU
tests, each upstream's variant of them.

The venv comes from the upstream's committed lock (locks/patch-tests/vllm-0.3x.0.txt) and is
made once in the repository's build/ (keyed by the lock's hash), like every other cached
stage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.core.folders import Folders
from sparkbake.errors import PatchTestError
from sparkbake.series import patchtests
from tests.conftest import plain_console, versions_yaml

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "versions.yaml"
PREFIX_CACHE_TESTS = "tests/v1/core/test_dcp_prefix_caching.py"


def result_of(tag: str) -> dict[str, object]:
    record: dict[str, object] = json.loads(
        (REPO / "build" / "patch-tests" / tag / "result.json").read_text())
    return record


@pytest.mark.parametrize("tag", ["production-3.72-vision", "production-3.73-vision",
                                 "production-3.72-vision-vllm0.34",
                                 "production-3.73-vision-vllm0.34"])
def test_each_production_tag_passes_its_series_tests(tag: str) -> None:
    assert main(["--config", str(CONFIG), "patch-tests", tag]) == 0
    result = result_of(tag)
    loaded = versions.load(CONFIG)
    files = result["files"]
    assert isinstance(files, list)
    for series in planning.make(loaded, loaded.tag(tag)).series:  # every series brings tests
        touched = set().union(*(planning.touched_paths(series.folder / name)
                                for name, _ in series.patches))
        assert touched & set(files), f"{series.name} adds no test module"
    assert (PREFIX_CACHE_TESTS in files) == ("3.73" in tag)  # prefix-cache is 3.73's alone
    assert result["failures"] == result["errors"] == 0
    tests = result["tests"]
    assert isinstance(tests, int) and tests >= 40


LAYOUT = Folders(REPO / "build", REPO / "wheels")  # where the lock's venv is kept
LOCK = REPO / "locks" / "patch-tests" / "vllm-0.33.0.txt"


def one_series_project(root: Path, test_module: str) -> tuple[planning.Plan, Path]:
    """Tag t of a dir upstream whose one series `s` touches tests/test_series.py, holding
    test_module: its plan and its tree."""
    (root / "versions.yaml").write_text(
        versions_yaml(tags="  t: {upstream: tree, series: [s]}\n"))
    tree = root / "upstream"
    (tree / "tests").mkdir(parents=True)
    (tree / "tests" / "test_series.py").write_text(test_module)
    series = root / "patches" / "s"
    series.mkdir(parents=True)
    (series / "0001-t.patch").write_text(
        "Subject: [PATCH] t\n\nd\n\ndiff --git a/tests/test_series.py b/tests/test_series.py\n"
        "--- a/tests/test_series.py\n+++ b/tests/test_series.py\n")
    (series / "series").write_text("0001-t.patch\n")
    loaded = versions.load(root / "versions.yaml")
    return planning.make(loaded, loaded.tag("t")), tree


def test_series_tests_run_without_the_signing_secrets_or_the_docker_logins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """patch-tests run upstream and patch code: the passphrase, the key and the Docker client
    config (registry logins) of this process are not in their environment."""
    secrets = {"SPARKBAKE_SIGNING_PASSPHRASE": "hunter2", "SPARKBAKE_SIGNING_KEY": "/k",
               "DOCKER_CONFIG": str(tmp_path / "docker")}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    plan, tree = one_series_project(tmp_path, (
        "import os\n\n\ndef test_no_secrets() -> None:\n"
        f"    assert not {sorted(secrets)!r} & os.environ.keys()\n"
        "    assert os.environ['PYTHONDONTWRITEBYTECODE'] == '1'  # what it is given\n"))
    settings = Settings.of_process()
    assert settings.signing.passphrase == "hunter2"  # this process has them
    patchtests.run_tests(plan, tree, LOCK, LAYOUT, settings,
                         console=plain_console())  # exit 6 if the test failed


def test_a_failing_series_test_stops_with_exit_6_and_names_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A series whose test fails, run in the venv of the committed vLLM lock."""
    plan, tree = one_series_project(tmp_path, (
        "def test_passes() -> None:\n    assert 1 + 1 == 2\n\n\n"
        "def test_fails() -> None:\n    assert 1 + 1 == 3\n"))
    with pytest.raises(PatchTestError) as caught:
        patchtests.run_tests(plan, tree, LOCK, LAYOUT, Settings.of_process(),
                             console=plain_console())
    assert caught.value.exit_code == 6
    assert "patch-tests t: 1 failed, 0 errors of 2 (pytest exit 1)" in caught.value.message
    assert str(LAYOUT.patch_tests("t") / "junit.xml") in caught.value.remedy
    assert "assert (1 + 1) == 3" in capsys.readouterr().err
    assert not list(tree.rglob("__pycache__"))  # the tree stays as it was
