"""lock: the builder's Python packages resolved with hashes, per base Python and platform.

The lock is committed; the builder installs from it with `pip --require-hashes`, so a
download whose hash differs is refused. images/builder-requirements.txt is its input.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from . import resources
from .cache import atomic_write
from .config import Base, Config, Tag
from .errors import ConfigError, EngineError
from .proc import echo, run
from .settings import HostSettings

__all__ = ["lock_path", "require_lock", "resolve"]

PLATFORMS = {"linux/amd64": "x86_64-unknown-linux-gnu", "linux/arm64": "aarch64-unknown-linux-gnu"}


def lock_path(config: Config, base: Base) -> Path:
    return config.root / "locks" / f"{base.name}.txt"


def require_lock(config: Config, tag: Tag) -> Path:
    path = lock_path(config, tag.builder)
    if not path.is_file():
        raise ConfigError(f"no builder lock for base {tag.builder.name!r} ({path})",
                          f"create it: nox -s lock -- {tag.name}, and commit it")
    return path


def resolve(config: Config, tag: Tag, settings: HostSettings) -> Path:
    """Resolve images/builder-requirements.txt for the tag's builder base; write its lock."""
    base = tag.builder
    if base.python is None:
        raise ConfigError(f"base {base.name!r} does not say its Python version",
                          f'add python: "3.12" (its python3 version) to the base in {config.path}')
    if tag.platform not in PLATFORMS:
        raise ConfigError(f"tag {tag.name}: no lock platform for {tag.platform}",
                          f"use one of {', '.join(PLATFORMS)}")
    uv = shutil.which("uv")
    if uv is None:
        raise EngineError("uv is not installed", "pip install uv")
    target = lock_path(config, base)
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "lock.txt"
        run([uv, "pip", "compile", resources.path("builder-requirements.txt"),
             "--generate-hashes", "--no-header", "--no-annotate", "--no-python-downloads",
             "--python-version", base.python, "--python-platform", PLATFORMS[tag.platform],
             "--index-url", settings.index_url, "-o", output],
            error=EngineError, what="resolving the builder lock", capture=True,
            env={"SSL_CERT_FILE": settings.ca_bundle} if settings.ca_bundle else None)
        header = (f"# builder lock of base {base.name} (python {base.python}, {tag.platform}).\n"
                  "# Made by `sparkbake lock TAG` from images/builder-requirements.txt;"
                  " edit that and rerun.\n")
        atomic_write(target, header + output.read_text())
    echo(f"lock: {target}")
    return target
