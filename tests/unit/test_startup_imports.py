"""Starting the CLI loads no heavy third-party package a typical command does not use: each
is imported where it is used (the Docker SDK alone takes ~0.2 s)."""

from __future__ import annotations

import os
import subprocess
import sys

HEAVY = ("docker", "requests", "urllib3", "paramiko", "cryptography", "securesystemslib",
         "importlib.metadata")

# the parser too: every command builds it
SCRIPT = f"""
import sys
import sparkbake.__main__
import sparkbake.pipeline.commands
sparkbake.__main__.parser()
print(" ".join(name for name in {HEAVY!r} if name in sys.modules))
"""


def test_importing_the_cli_and_the_pipeline_loads_no_heavy_package() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert not loaded, f"imported at startup: {', '.join(loaded)}"


# what a build never runs: the other commands' modules
NOT_THE_BUILD = ("sparkbake.pipeline.commands", "sparkbake.deploy", "sparkbake.publish",
                 "sparkbake.smoke.checks", "sparkbake.housekeeping.tidy",
                 "sparkbake.pipeline.release_checks", "sparkbake.series.patchtests")

BUILD_SCRIPT = f"""
import sys
import sparkbake.__main__
sparkbake.__main__.parser()
print(" ".join(name for name in {NOT_THE_BUILD!r} if name in sys.modules))
"""


def test_the_cli_imports_the_build_s_modules_and_not_the_other_commands() -> None:
    done = subprocess.run([sys.executable, "-c", BUILD_SCRIPT], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert not loaded, f"imported with the CLI: {', '.join(loaded)}"
