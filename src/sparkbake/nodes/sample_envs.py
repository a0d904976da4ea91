"""Smoke suites: sample node .env files that a tag's image must accept or refuse.

A suite is a folder `smoke/<name>/` beside versions.yaml, or else `images/smoke/<name>/`
shipped with sparkbake; a tag names its suite with `smoke: <name>` (default `common`):

    accept/*.env   `ENTRYPOINT --print` in the image must print exactly the command the host
                   builds from the file with the same entrypoint code
    reject/*.env   the image's preflight must refuse the file (exit 2), for each rule its
                   `# expect: RULE ...` lines name
    serve.env      the environment of the serve checks (`smoke --model`), if the suite has one
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkbake import resources
from sparkbake.config.versions import Config, Tag
from sparkbake.errors import ConfigError
from sparkbake.lock import pins
from sparkbake.nodes import envfile, preflight

__all__ = ["Sample", "Suite", "expected", "find", "known", "load"]

FOLDER = "smoke"
EXPECT = re.compile(r"^\s*#\s*expect:\s*(.*)$")
HOST_ROOT = Path("/")  # its sysctls only ever warn


@dataclass(frozen=True)
class Sample:
    """One sample .env: its name in the suite, its values, and what the image must do."""

    name: str  # accept/head.env
    path: Path
    env: dict[str, str] = field(hash=False)
    command: str = ""  # accept: the host's `vllm serve` command, shell-quoted
    rules: tuple[str, ...] = ()  # reject: the error rules it must be refused for


@dataclass(frozen=True)
class Suite:
    name: str
    folder: Path
    accept: tuple[Sample, ...]
    reject: tuple[Sample, ...]
    serve_env: Path | None  # serve.env


def places(config: Config, name: str) -> tuple[Path, Path]:
    """Where suite `name` may be: the project's folder first, then sparkbake's own."""
    return config.root / FOLDER / name, resources.images_dir() / FOLDER / name


def known(config: Config) -> list[str]:
    roots = (config.root / FOLDER, resources.images_dir() / FOLDER)
    return sorted({p.name for root in roots if root.is_dir() for p in root.iterdir()
                   if p.is_dir()})


def find(config: Config, tag: Tag) -> Path:
    for place in places(config, tag.smoke):
        if place.is_dir():
            return place
    project, shipped = places(config, tag.smoke)
    raise ConfigError(
        f"{config.path}: tag {tag.name}: smoke suite {tag.smoke!r} is neither {project} "
        f"nor {shipped}",
        f"name one of {', '.join(known(config)) or 'none'} in `smoke:`, or create "
        f"{project}/ with accept/ and reject/ .env files (docs/reference/smoke.md)")


def load(config: Config, tag: Tag) -> Suite:
    folder = find(config, tag)
    return Suite(
        name=tag.smoke, folder=folder,
        accept=tuple(_accept(tag, path, pins.runtime_lock_path(config, tag))
                     for path in sorted((folder / "accept").glob("*.env"))),
        reject=tuple(_reject(path) for path in sorted((folder / "reject").glob("*.env"))),
        serve_env=folder / "serve.env" if (folder / "serve.env").is_file() else None,
    )


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _accept(tag: Tag, path: Path, runtime_lock: Path | None) -> Sample:
    env_file = envfile.read(path)
    refused = [f for f in preflight.evaluate(tag, env_file, HOST_ROOT, runtime_lock)
               if f.level == "error"]
    if refused:
        raise ConfigError(f"{path}: the preflight refuses this accept sample for {tag.name}: "
                          f"{refused[0].rule}: {refused[0].message}",
                          "fix the sample, or move it to reject/ with `# expect: RULE`")
    try:
        command = preflight.entrypoint().serve_command(preflight.node_env(tag, env_file))
    except (ValueError, SystemExit) as exc:
        raise ConfigError(f"{path}: the accept sample gives no command for {tag.name}: {exc}",
                          "set MODEL and give every variable a value of its type") from None
    return Sample(_name(path), path, env_file.values, command=shlex.join(command))


def _reject(path: Path) -> Sample:
    env_file = envfile.read(path)
    rules = tuple(rule for line in path.read_text().splitlines()
                  if (match := EXPECT.match(line)) for rule in match.group(1).split())
    if not rules:
        raise ConfigError(f"{path}: a reject sample names the preflight rules it breaks",
                          "add a line `# expect: RULE` (rule ids: "
                          "docs/reference/preflight-rules.md)")
    return Sample(_name(path), path, env_file.values, rules=rules)


def expected(suite: Suite, argv: list[str]) -> dict[str, Any]:
    """The suite as smoke_check.py reads it (`entrypoint`): the image's entrypoint argv and
    each sample's values, with the command or the rules expected."""
    return {
        "suite": suite.name, "argv": argv,
        "accept": [{"name": s.name, "env": s.env, "command": s.command} for s in suite.accept],
        "reject": [{"name": s.name, "env": s.env, "rules": list(s.rules)} for s in suite.reject],
    }
