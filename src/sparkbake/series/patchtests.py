"""patch-tests: the tests a tag's series add to the upstream tree, run on the CPU.

They are the series' own tests, in the upstream's test layout (for vLLM: tests/...), found
as the `test_*.py` files the tag's patches add or change. They run with pytest against the
patched tree (on PYTHONPATH, nothing compiled) in a venv installed from a lock with hashes:
`locks/patch-tests/<upstream>.txt`, resolved by `sparkbake lock TAG --patch-tests` from
images/patch-tests-requirements.txt and the tree's requirements/common.txt.
"""

from __future__ import annotations

import fnmatch
import json
import platform
import shutil
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sparkbake import resources
from sparkbake.config.platforms import PLATFORMS
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import run, step
from sparkbake.core.folders import Folders
from sparkbake.errors import ConfigError, EngineError, PatchTestError
from sparkbake.files import atomic_write
from sparkbake.hashing import data_hash, file_sha256
from sparkbake.lock.pins import compile_requirements, require_made
from sparkbake.planning import Plan, touched_paths

__all__ = ["Result", "lock_path", "resolve", "run_tests", "series_tests"]

REQUIREMENTS = "patch-tests-requirements.txt"  # images/: torch for the CPU, pytest
TREE_REQUIREMENTS = "requirements/common.txt"  # vLLM's own runtime requirements
TEST_PATTERNS = ("tests/**/test_*.py", "tests/test_*.py")


@dataclass(frozen=True)
class Result:
    tests: int
    failures: int
    errors: int
    skipped: int
    junit: Path


def host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def lock_path(config: Config, tag: Tag) -> Path:
    return config.root / "locks" / "patch-tests" / f"{tag.upstream.key}.txt"


def series_tests(plan: Plan, tree: Path) -> list[str]:
    """The test modules the tag's patches add or change that the patched tree has."""
    found = {path for series in plan.series for name, _ in series.patches
             for path in touched_paths(series.path(name))
             if any(fnmatch.fnmatch(path, p) for p in TEST_PATTERNS)
             and PurePosixPath(path).name.startswith("test_")}
    return sorted(path for path in found if (tree / path).is_file())


def _inputs(tree: Path) -> list[Path]:
    listed = [resources.path(REQUIREMENTS)]
    return [*listed, tree / TREE_REQUIREMENTS] if (tree / TREE_REQUIREMENTS).is_file() else listed


def _stamp(tree: Path) -> str:
    """What the lock was made from: its input files, the host's Python and machine."""
    return data_hash([[p.name, file_sha256(p)] for p in _inputs(tree)]
                     + [host_python(), platform.machine()])


def resolve(config: Config, tag: Tag, tree: Path, settings: Settings, *, console: Console) -> Path:
    """Resolve the patch-tests requirements for this host's Python and machine; write the lock."""
    machines = [known.machine for known in PLATFORMS]
    if platform.machine() not in machines:
        raise EngineError(f"no lock platform for this machine ({platform.machine()})",
                          f"run patch-tests on one of {', '.join(machines)}")
    # Like pip: every configured index and find-links location, best version across them.
    indexes = ["--index-strategy", "unsafe-best-match"]
    for url in settings.extra_index_urls:
        indexes += ["--extra-index-url", url]
    for place in settings.find_links:
        indexes += ["--find-links", place]
    target = lock_path(config, tag)
    header = (f"# patch-tests lock of upstream {tag.upstream.key} (python {host_python()},"
              f" {platform.machine()}).\n# stamp: {_stamp(tree)}\n"
              "# Made by `sparkbake lock TAG --patch-tests` from images/"
              f"{REQUIREMENTS} and the tree's {TREE_REQUIREMENTS}; rerun it after"
              " changing either.\n")
    compile_requirements(_inputs(tree), host_python(), platform.machine(), target, header,
                         settings, indexes, console=console)
    return target


def require_lock(config: Config, tag: Tag, tree: Path, *, settings: Settings) -> Path:
    return require_made(
        lock_path(config, tag), [tag.name, "--patch-tests"], settings,
        f"patch-tests lock for upstream {tag.upstream.key}", lambda: f"# stamp: {_stamp(tree)}",
        "other requirements or another Python/machine (this host: python "
        f"{host_python()}, {platform.machine()})")


def environment(lock: Path, venvs: Path, *, console: Console) -> Path:
    """A venv with exactly the lock's packages (hashes checked); made once per lock."""
    venv = venvs / f"patch-tests-{file_sha256(lock)[:16]}"
    done = venv / ".sparkbake-complete"
    if done.is_file():
        console.detail(f"patch-tests venv: {venv} (cached)")
        return venv
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted run
    with step(console, f"patch-tests venv from {lock.name}"):
        run(console, [sys.executable, "-m", "venv", venv], error=EngineError,
            what="making the venv")
        run(console, [venv / "bin" / "python", "-m", "pip", "install", "--quiet",
                      "--require-hashes",
             "--no-deps", "-r", lock], error=EngineError,
            what=f"installing {lock} (a hash mismatch means a download differs from the lock)")
    done.write_text(str(lock) + "\n")
    return venv


def run_tests(plan: Plan, tree: Path, lock: Path, layout: Folders, settings: Settings, *,
              console: Console) -> Result:
    """Run the series' tests against tree; raise PatchTestError when one fails."""
    files = series_tests(plan, tree)
    if not files:
        raise ConfigError(f"tag {plan.tag.name}: its series add no tests (no tests/**/test_*.py"
                          " in their patches)", "add the series' tests to its patches")
    venv = environment(lock, layout.venvs, console=console)
    out = layout.patch_tests(plan.tag.name)
    out.mkdir(parents=True, exist_ok=True)
    junit = out / "junit.xml"
    junit.unlink(missing_ok=True)
    env = settings.patch_tests_environment(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1",
                                           HF_HUB_OFFLINE="1")
    # --noconftest: the series' tests are self-contained; the tree's conftest files need the
    # whole upstream test stack. No cache provider and no bytecode: the tree stays as it is.
    with step(console, f"patch-tests {plan.tag.name}: {len(files)} test modules"):
        process = run(console, [venv / "bin" / "python", "-m", "pytest", "--noconftest", "-p",
                       "no:cacheprovider", "-q", f"--junitxml={junit}", *files],
                      error=PatchTestError, what="pytest", cwd=tree, environment=env,
                      check=False)
    result = _read_junit(junit, process.returncode, console=console)
    atomic_write(out / "result.json", json.dumps({
        "tag": plan.tag.name, "patch_key": plan.patch_key, "lock": str(lock),
        "files": files, "tests": result.tests, "failures": result.failures,
        "errors": result.errors, "skipped": result.skipped, "exit": process.returncode,
    }, indent=2))
    if process.returncode != 0 or result.failures or result.errors:
        raise PatchTestError(
            f"patch-tests {plan.tag.name}: {result.failures} failed, {result.errors} errors of"
            f" {result.tests} (pytest exit {process.returncode})",
            f"{console.output_hint()} and {junit}")
    return result


def _read_junit(junit: Path, returncode: int, *, console: Console) -> Result:
    if not junit.is_file():
        raise PatchTestError(f"pytest wrote no report (exit {returncode})",
                             console.output_hint())
    root = ElementTree.parse(junit).getroot()
    suite = root.find("testsuite") if root.tag == "testsuites" else root
    if suite is None:
        raise PatchTestError(f"{junit} has no test suite", console.output_hint())
    def count(key: str) -> int:
        return int(suite.get(key, "0"))

    return Result(count("tests"), count("failures"), count("errors"), count("skipped"), junit)
