"""Starting the CLI loads no heavy third-party package a typical command does not use: each
is imported where it is used (the Docker SDK alone takes ~0.2 s); a build loads none of
the other commands' modules, and none of those only building needs (a no-op build's own
run imports none either: tests/integration/test_pipeline.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.startup import ONLY_WHEN_BUILDING

HEAVY = ("docker", "requests", "urllib3", "paramiko", "cryptography", "securesystemslib",
         "importlib.metadata")
# what a build never runs: the other commands' modules
NOT_THE_BUILD = ("sparkbake.pipeline.commands", "sparkbake.deploy", "sparkbake.publish",
                 "sparkbake.smoke.checks", "sparkbake.housekeeping.tidy",
                 "sparkbake.pipeline.release_checks", "sparkbake.series.patchtests")


def _loaded(imports: tuple[str, ...], watched: tuple[str, ...]) -> list[str]:
    """Which of watched a fresh interpreter holds after importing imports and building the
    CLI's parser (every command builds it)."""
    script = "\n".join(["import sys", *(f"import {name}" for name in imports),
                        "sparkbake.__main__.parser()",
                        f"print(' '.join(n for n in {watched!r} if n in sys.modules))"])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_importing_the_cli_and_the_pipeline_loads_no_heavy_package() -> None:
    loaded = _loaded(("sparkbake.__main__", "sparkbake.pipeline.commands"), HEAVY)
    assert not loaded, f"imported at startup: {', '.join(loaded)}"


def test_the_cli_imports_the_build_s_modules_and_not_the_other_commands() -> None:
    loaded = _loaded(("sparkbake.__main__",), NOT_THE_BUILD)
    assert not loaded, f"imported with the CLI: {', '.join(loaded)}"


def test_the_cli_imports_nothing_that_only_building_needs() -> None:
    loaded = _loaded(("sparkbake.__main__",), ONLY_WHEN_BUILDING)
    assert not loaded, f"imported with the CLI: {', '.join(loaded)}"


def test_the_program_freezes_what_its_imports_made_before_its_command() -> None:
    """`sparkbake` (run) leaves the objects of its start-up to no collection, the exit's
    included; main alone, which tests and benchmarks call in their own process, does not."""
    script = ("import gc, sparkbake.__main__ as cli\n"
              "before = gc.get_freeze_count()\n"
              "cli.main = lambda: print(before, gc.get_freeze_count() > 0) or 3\n"
              "cli.run()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120, check=False)
    assert (done.returncode, done.stdout) == (3, "0 True\n"), done.stderr
