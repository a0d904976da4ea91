"""The image's in-container scripts (images/*.py) imported on the host, for their pure parts."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

IMAGES = Path(__file__).parents[2] / "images"


def image_module(name: str) -> ModuleType:
    """images/NAME.py as a module; its sibling imports (smoke_common, ...) resolve there."""
    sys.path.insert(0, str(IMAGES))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(IMAGES))
