"""How the user runs sparkbake, so that a remedy repeats it: `nox -s smoke -- 3.73-vision`
inside a nox session, else `sparkbake smoke 3.73-vision`, with the user's own --config."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from sparkbake.config.settings import Settings

__all__ = ["command", "remember_config"]

DEFAULT_CONFIG = Path("versions.yaml")


@dataclass(frozen=True)
class _Invocation:
    config: Path | None = None  # the --config the user gave, when not the default
    nox_session: bool = False  # run by a nox session: remedies name `nox -s`


_remembered = [_Invocation()]  # the one of this run, replaced by remember_config


def remember_config(config: Path, settings: Settings) -> None:
    """Called once by the command line with its --config and the run's settings."""
    _remembered[0] = _Invocation(config if config != DEFAULT_CONFIG else None,
                                 settings.nox_session)


def command(name: str, *args: str) -> str:
    """The command line that runs `name args` the way this one was run."""
    found = _remembered[0]
    config = ["--config", str(found.config)] if found.config is not None else []
    if found.nox_session:
        return shlex.join(["nox", "-s", name, "--", *args, *config])
    return shlex.join(["sparkbake", *config, name, *args])
