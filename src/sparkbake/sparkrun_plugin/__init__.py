"""sparkbake's plugin for sparkrun, and the command that names its folder.

The folder holds one module for sparkrun to import, `sparkbake_builder`: sparkrun loads every
module of each folder under `plugins.paths` in its config.yaml, so nothing else in this folder
may look like a module to it (pkgutil's names without a leading underscore); this file is the
package's `__init__`, which sparkrun skips."""

from __future__ import annotations

import argparse
from pathlib import Path

from sparkbake.run import Run

__all__ = ["PLUGIN_FOLDER", "plugin_path"]

PLUGIN_FOLDER = Path(__file__).resolve().parent


def plugin_path(args: argparse.Namespace, run: Run) -> int:
    """`sparkrun-plugin-path`: the folder to list under sparkrun's `plugins.paths`."""
    print(PLUGIN_FOLDER)
    return 0
