"""patch-tests, kernel seeds and per-upstream builder locks: the pure parts, no network."""

from __future__ import annotations

import dataclasses
import platform
import sys
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.console import tools
from sparkbake.core.stages import Stage
from sparkbake.errors import BuildError, ConfigError, PatchTestError
from sparkbake.lock import pins
from sparkbake.series import patchtests
from sparkbake.wheels import container_build, kernelseed
from sparkbake.wheels.report import Kernel, Wheel, WheelsReport
from tests.conftest import TREE_UPSTREAM, plain_console, settings_of, versions_yaml

WHEEL = "tree-1.0-cp38-abi3-linux_x86_64.whl"
TAGS = f"""\
  t:
    upstream: tree
    series: [s]
  seeded:
    upstream: tree
    series: [s]
    kernels: {{wheel: {WHEEL}, sha256: {"e" * 64}}}
"""


def patch_text(*paths: str) -> str:
    head = "From: a <a@b>\nSubject: [PATCH] x\n\ndescribed\n\n"
    return head + "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
                          for p in paths)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "versions.yaml").write_text(versions_yaml(tags=TAGS))
    (tmp_path / "upstream" / "tests" / "core").mkdir(parents=True)
    (tmp_path / "upstream" / "tests" / "core" / "test_kept.py").write_text("")
    (tmp_path / "upstream" / "tests" / "helper.py").write_text("")
    series = tmp_path / "patches" / "s"
    series.mkdir(parents=True)
    (series / "0001-a.patch").write_text(patch_text("pkg/a.py", "tests/core/test_kept.py",
                                                    "tests/helper.py", "docs/test_x.py"))
    (series / "0002-b.patch").write_text(patch_text("tests/core/test_gone.py", "csrc/k.cu"))
    (series / "series").write_text("0001-a.patch\n0002-b.patch\n")
    return tmp_path


def test_the_series_tests_are_the_test_modules_its_patches_touch_that_exist(
        project: Path) -> None:
    loaded = versions.load(project / "versions.yaml")
    plan = planning.make(loaded, loaded.tag("t"))
    # a helper, a file outside tests/ and a test module the tree lacks are not run
    assert patchtests.series_tests(plan, project / "upstream") == ["tests/core/test_kept.py"]


def test_a_patch_tests_lock_made_elsewhere_is_refused_with_the_command(project: Path) -> None:
    loaded = versions.load(project / "versions.yaml")
    tag = loaded.tag("t")
    path = patchtests.lock_path(loaded, tag)
    with pytest.raises(ConfigError) as caught:
        patchtests.require_lock(loaded, tag, project / "upstream", settings=settings_of())
    assert "no patch-tests lock for upstream tree" in caught.value.message
    assert caught.value.remedy == "create it: sparkbake lock t --patch-tests, and commit it"
    path.parent.mkdir(parents=True)
    path.write_text("# patch-tests lock\n# stamp: 0000\npytest==9 \\\n")
    with pytest.raises(ConfigError, match=f"this host: python 3.\\d+, {platform.machine()}"):
        patchtests.require_lock(loaded, tag, project / "upstream", settings=settings_of())


def test_junit_counts_are_read_and_a_missing_report_is_an_error(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="7" '
                     'failures="1" errors="2" skipped="3"/></testsuites>')
    result = patchtests._read_junit(junit, 1, console=plain_console())
    assert (result.tests, result.failures, result.errors, result.skipped) == (7, 1, 2, 3)
    with pytest.raises(PatchTestError, match=r"pytest wrote no report \(exit 4\)"):
        patchtests._read_junit(tmp_path / "none.xml", 4, console=plain_console())


def test_the_patch_tests_environment_drops_the_callers_vllm_variables() -> None:
    caller = settings_of(VLLM_DSV4_CKV_GATHER="1", KEEP_ME="yes")
    env = caller.patch_tests_environment(PYTHONPATH="/tree")
    assert "VLLM_DSV4_CKV_GATHER" not in env
    assert env["KEEP_ME"] == "yes"
    assert env["PYTHONPATH"] == "/tree"


def test_a_seeded_tag_refuses_patches_that_change_compiled_inputs(project: Path) -> None:
    loaded = versions.load(project / "versions.yaml")
    plan = planning.make(loaded, loaded.tag("seeded"))
    touched = plan.kernel_patches
    assert [p.split("@")[0] for p in touched] == ["s/0002-b.patch"]
    assert plan.stage_inputs[Stage.KERNELS]["kernel patches"] == list(touched)  # as recorded
    with pytest.raises(ConfigError) as caught:
        kernelseed.require_python_only(plan.tag, touched)
    assert f"takes its kernels from {WHEEL}" in caught.value.message
    assert "s/0002-b.patch" in caught.value.message
    kernelseed.require_python_only(loaded.tag("t"), touched)  # no seed: compiling is fine


def test_the_seed_is_the_kernel_key_not_the_toolchain(project: Path) -> None:
    loaded = versions.load(project / "versions.yaml")
    seeded = planning.make(loaded, loaded.tag("seeded"))
    assert seeded.stage_inputs[Stage.KERNELS]["seed"] == f"{WHEEL}@{'e' * 12}"
    assert seeded.kernel_key != planning.make(loaded, loaded.tag("t")).kernel_key


def test_an_upstream_with_build_requirements_gets_its_own_lock_from_its_tree(
        project: Path) -> None:
    (project / "versions.yaml").write_text(versions_yaml(
        tags=TAGS, upstreams=TREE_UPSTREAM + "    build_requirements: build.txt\n"))
    loaded = versions.load(project / "versions.yaml")
    tag = loaded.tag("t")
    assert pins.lock_path(loaded, tag) == project / "locks" / "debian.tree.amd64.txt"
    with pytest.raises(ConfigError, match=r"build_requirements build\.txt is not in its tree"):
        pins.inputs(tag, project / "upstream")
    (project / "upstream" / "build.txt").write_text("torch==2.14.0\n")
    assert [p.name for p in pins.inputs(tag, project / "upstream")] == [
        pins.TORCH_TOOLCHAIN, "build.txt"]
    path = pins.lock_path(loaded, tag)
    path.parent.mkdir()
    path.write_text(f"# builder lock\n# from: {pins._stamp(tag, project / 'upstream')}\n")
    assert pins.require_lock(loaded, tag, project / "upstream", settings=settings_of()) == path
    (project / "upstream" / "build.txt").write_text("torch==2.15.0\n")
    with pytest.raises(ConfigError, match=r"made from other build requirements than build\.txt"):
        pins.require_lock(loaded, tag, project / "upstream", settings=settings_of())


def test_a_runtime_lock_missing_or_made_from_another_file_is_refused(project: Path) -> None:
    (project / "versions.yaml").write_text(versions_yaml(
        tags=TAGS, upstreams=TREE_UPSTREAM + "    runtime_requirements: run.txt\n"))
    loaded = versions.load(project / "versions.yaml")
    tag, tree = loaded.tag("t"), project / "upstream"
    path = pins.runtime_lock_path(loaded, tag)
    assert path == project / "locks" / "runtime" / "debian.tree.amd64.txt"
    with pytest.raises(ConfigError) as caught:
        pins.require_runtime_lock(loaded, tag, tree, settings=settings_of())
    assert caught.value.message == f"no runtime lock for base 'debian' ({path})"
    assert caught.value.remedy == "create it: sparkbake lock t, and commit it"
    path.parent.mkdir(parents=True)
    path.write_text("# runtime lock\n# from: run.txt=0000000000000000\n")
    with pytest.raises(ConfigError, match=r"run\.txt is not in the upstream's tree"):
        pins.require_runtime_lock(loaded, tag, tree, settings=settings_of())
    (tree / "run.txt").write_text("torch==2.14.0\n")
    with pytest.raises(ConfigError, match=r"was made from another run\.txt than this tree's"):
        pins.require_runtime_lock(loaded, tag, tree, settings=settings_of())
    path.write_text(f"# runtime lock\n# from: run.txt={pins._sha(tree / 'run.txt')}\n")
    assert pins.require_runtime_lock(loaded, tag, tree, settings=settings_of()) == path
    # the same upstream
    assert pins.require_runtime_lock(loaded, loaded.tag("seeded"), tree,
                                     settings=settings_of()) == path


def test_other_arch_naming_a_library_no_wheel_has_is_refused(project: Path) -> None:
    loaded = versions.load(project / "versions.yaml")
    seeded = loaded.tag("seeded")
    assert seeded.kernels is not None
    tag = dataclasses.replace(seeded, kernels=dataclasses.replace(
        seeded.kernels, other_arch=("pkg/_gone.so",)))
    report = WheelsReport("12.1a", "sm_121a", "none", (
        Wheel(WHEEL, "0" * 64, "pkg", (Kernel("pkg/_k.so", "0" * 64, ("sm_121a",)),)),))
    with pytest.raises(BuildError) as caught:
        container_build.check_sass(tag, report, console=plain_console())
    assert caught.value.message == \
        "kernels.other_arch of seeded names libraries no wheel has: pkg/_gone.so"
    assert caught.value.exit_code == 4


def test_the_tests_process_sees_none_of_the_callers_vllm_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment reaches the child whole: run does not add the caller's back."""
    monkeypatch.setenv("VLLM_DSV4_CKV_GATHER", "1")
    caller = Settings.of_process()
    script = "import os; print(os.environ.get('VLLM_DSV4_CKV_GATHER', 'absent'))"
    done = tools.run(plain_console(), [sys.executable, "-c", script], error=BuildError,
                     what="child",
                     capture=True, environment=caller.patch_tests_environment(KEEP="1"))
    assert done.stdout.strip() == "absent"
