"""The packages' layers (pyproject.toml's import-linter contract), checked on the real tree
and on a copy where a stage module imports the commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(source: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")],
                          capture_output=True, text=True, env=env, cwd=source, check=False)


def test_the_package_graph_keeps_its_layers() -> None:
    found = lint_imports(ROOT / "src")
    assert found.returncode == 0, found.stdout + found.stderr
    assert "1 kept, 0 broken" in found.stdout


def test_a_stage_module_that_imports_the_commands_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "sparkbake", tmp_path / "sparkbake")
    venv = tmp_path / "sparkbake" / "bake" / "venv.py"
    venv.write_text(venv.read_text() + "\nfrom sparkbake.pipeline import commands  # noqa\n")
    found = lint_imports(tmp_path)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "sparkbake.bake.venv -> sparkbake.pipeline.commands" in found.stdout


def test_a_package_outside_every_layer_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "sparkbake", tmp_path / "sparkbake")
    (tmp_path / "sparkbake" / "extra").mkdir()
    (tmp_path / "sparkbake" / "extra" / "__init__.py").write_text("")
    found = lint_imports(tmp_path)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "sparkbake.extra" in found.stdout
