"""sparkrun's own code run on what sparkbake makes for it. sparkrun needs Python 3.12 or
later, which the host may lack, so it runs in a container of a base image that has it (the
CPU tag's Debian trixie base): its wheels, and its dependencies', are downloaded once on the
host for that Python (the host's pip configuration as is) and installed offline there, with
no network, into a venv at VENV.

`in_sparkrun` runs any command there with files put in first (the builder plugin's load
goes through it too); `check_recipes` loads and validates recipes with sparkrun's loader and
validator (images/sparkrun_check.py) and renders each node's command as sparkrun starts it.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbake import resources
from sparkbake.console.display import Console
from sparkbake.console.tools import run
from sparkbake.core.folders import Folders
from sparkbake.errors import EngineError, SmokeError
from sparkbake.files import atomic_dir
from sparkbake.oci import docker_engine
from sparkbake.oci.docker_engine import Client

__all__ = ["PYTHON", "SPARKRUN", "VENV", "Checked", "check_recipes", "in_sparkrun", "wheels"]

SPARKRUN = "sparkrun==0.4.2"
PYTHON = "3.13"  # the trixie base's; sparkrun asks for 3.12 or later
VENV = "/opt/sparkrun"
WHEELS = "/tmp/sparkrun-wheels"  # in the container
CHECKS = "/tmp/sparkrun-check"
DONE = ".complete"
PREFIX = "sparkrun-check: "  # the checker's line among pip's and sparkrun's own output


@dataclass(frozen=True)
class Checked:
    """What sparkrun said of one recipe: each finding as `code: message`, by severity; what
    `Recipe.validate` returned; each node's command as its runtime renders it (none when
    the recipe has an error); the style its readiness probe asks a token by (None: ready at
    /health, or the recipe has an error)."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    suggestions: tuple[str, ...]
    validate: tuple[str, ...]
    commands: tuple[str, ...]
    readiness: str | None = None


def wheels(folders: Folders, *, console: Console) -> Path:
    """sparkrun's wheels for PYTHON, downloaded once (wheels/sparkrun/<version>/)."""
    folder = folders.sparkrun_wheels(SPARKRUN)
    if (folder / DONE).is_file():
        return folder
    with atomic_dir(folder) as tmp:
        run(console, [sys.executable, "-m", "pip", "download", "--quiet",
                      f"--python-version={PYTHON}", "--only-binary=:all:", "--dest", tmp,
                      SPARKRUN], error=EngineError, what=f"downloading {SPARKRUN}'s wheels")
        (tmp / DONE).write_text(f"{SPARKRUN}\n{PYTHON}\n")
    return folder


def in_sparkrun(client: Client, image: str, wheelhouse: Path, files: Mapping[str, bytes],
                argv: Sequence[str], *, console: Console | None = None
                ) -> docker_engine.ContainerResult:
    """argv run in a container of image once sparkrun is installed offline into VENV; files:
    {absolute path: bytes} put in first. The container is removed after."""
    install = (f"python3 -m venv {VENV} && {VENV}/bin/pip install --quiet --no-index "
               f"--find-links {WHEELS} {shlex.quote(SPARKRUN)}")
    copied = {f"{WHEELS}/{p.name}": p.read_bytes() for p in sorted(wheelhouse.glob("*.whl"))}
    return docker_engine.run_container(
        client, image, ["sh", "-c", f"{install} && exec \"$@\"", "sparkrun", *argv],
        network=False, copy_in={**copied, **files}, console=console)


def check_recipes(client: Client, image: str, wheelhouse: Path,
                  recipes: Mapping[str, str], *, console: Console | None = None
                  ) -> dict[str, Checked]:
    """Each recipe (name: its YAML) loaded and validated by sparkrun; SmokeError when the
    check itself could not run."""
    files = {f"{CHECKS}/{name}.yaml": text.encode() for name, text in recipes.items()}
    files[f"{CHECKS}/sparkrun_check.py"] = resources.path("sparkrun_check.py").read_bytes()
    result = in_sparkrun(client, image, wheelhouse, files,
                         [f"{VENV}/bin/python", f"{CHECKS}/sparkrun_check.py",
                          *(f"{CHECKS}/{name}.yaml" for name in recipes)], console=console)
    found = [line[len(PREFIX):] for line in result.output.splitlines()
             if line.startswith(PREFIX)]
    if result.exit_code != 0 or not found:
        raise SmokeError(f"sparkrun's check of {len(recipes)} recipe(s) in {image} ended "
                         f"{result.exit_code}: {result.tail(3)}",
                         "see the output above; the image needs Python 3.12 or later")
    report: dict[str, Any] = json.loads(found[-1])
    return {name: _checked(report[f"{CHECKS}/{name}.yaml"]) for name in recipes}


def _checked(found: dict[str, Any]) -> Checked:
    def lines(severity: str) -> tuple[str, ...]:
        return tuple(f"{f['code']}: {f['message']}" for f in found[severity])

    return Checked(lines("error"), lines("warning"), lines("suggestion"),
                   tuple(found["validate"]), tuple(found.get("commands", ())),
                   found.get("readiness"))
