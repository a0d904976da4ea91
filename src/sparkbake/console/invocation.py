"""How the user runs sparkbake, so that a remedy repeats it: `nox -s smoke -- 3.73-vision`
inside a nox session, else `sparkbake smoke 3.73-vision`, with the user's own --config."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

__all__ = ["command", "remember_config"]

DEFAULT_CONFIG = Path("versions.yaml")
_config: list[Path] = []  # the --config the user gave, when not the default


def remember_config(config: Path) -> None:
    """Called once by the command line with its --config."""
    _config.clear()
    if config != DEFAULT_CONFIG:
        _config.append(config)


def command(name: str, *args: str) -> str:
    """The command line that runs `name args` the way this one was run."""
    config = [arg for path in _config for arg in ("--config", str(path))]
    if os.environ.get("NOX_CURRENT_SESSION"):  # set by nox in its sessions
        return shlex.join(["nox", "-s", name, "--", *args, *config])
    return shlex.join(["sparkbake", *config, name, *args])
