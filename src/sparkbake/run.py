"""One run of the CLI: its settings, its console, and versions.yaml with its folders, made
once in main and passed to the command (never global)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from sparkbake.config import versions
from sparkbake.config.model import Config
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders

__all__ = ["Run"]


@dataclass(frozen=True)
class Run:
    """What every command reads. versions.yaml is read at first use, so that the commands
    that need none (keys, verify-release) run anywhere."""

    settings: Settings
    console: Console
    config_path: Path = Path("versions.yaml")

    @cached_property
    def config(self) -> Config:
        return versions.load(self.config_path)

    @property
    def folders(self) -> Folders:
        return Folders.of(self.config)

    @classmethod
    def of(cls, config: Config, settings: Settings, console: Console) -> Run:
        """A run on a config already read (tests, and the rebuilds of verify-release)."""
        made = cls(settings, console, config.path)
        made.__dict__["config"] = config  # what cached_property would keep
        return made
