"""The container-side scripts of images/ (sparkbake.resources) loaded as modules here, for
tests of their functions and constants; standard library only, as in the builder."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from sparkbake import resources


def load(name: str) -> ModuleType:
    """images/<name>.py as a module of that name."""
    spec = importlib.util.spec_from_file_location(name, resources.path(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
