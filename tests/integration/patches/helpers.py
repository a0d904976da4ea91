"""Small helpers shared by the patch tests: run the CLI capturing its output, read git."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from sparkbake.planning import make
from tests.integration.patches.conftest import GIT_ENV, VllmProject


def entry(project: VllmProject, tag: str) -> Path:
    loaded = project.config()
    return project.root / "build" / "patched" / make(loaded, loaded.tag(tag)).patch_key


def report(project: VllmProject, tag: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((entry(project, tag) / "patches.json").read_text())
    return data


def statuses(project: VllmProject, tag: str) -> list[tuple[str, str, str]]:
    return [(p["series"], p["file"], p["status"])
            for s in report(project, tag)["series"] for p in s["patches"]]


def git(repo: Path, *args: str, git_dir: Path | None = None) -> str:
    where = ["--git-dir", str(git_dir), "--work-tree", str(repo)] if git_dir else []
    done = subprocess.run(["git", "-C", str(repo), *where, *args], check=True,
                          capture_output=True, text=True, env=GIT_ENV)
    return done.stdout.strip()


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def error_lines(err: str) -> list[str]:
    """The final error: `sparkbake: error: ...` and its remedy line."""
    lines = err.strip().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("sparkbake: error: "))
    return lines[start:]
