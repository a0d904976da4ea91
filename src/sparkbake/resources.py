"""Templates and scripts shipped with sparkbake (the repository's images/ folder)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from sparkbake.hashing import file_sha256

__all__ = ["BUILDER_FILES", "digest", "images_dir", "module", "path", "render"]

# copied into the builder image: the build script, and the nvcc and cmake in front of the
# real ones
BUILDER_FILES = ("build_wheels.py", "nvcc_wrapper.py", "cmake_wrapper.py")


@functools.cache
def images_dir() -> Path:
    """images/ as packaged, or beside the sources in a checkout."""
    packaged = Path(__file__).parent / "images"
    return packaged if packaged.is_dir() else Path(__file__).parents[2] / "images"


def path(name: str) -> Path:
    return images_dir() / name


def digest(name: str) -> str:
    return file_sha256(path(name))


def module(name: str) -> ModuleType:
    """images/NAME.py as a module, loaded once under the name the image's scripts load their
    siblings by (`sparkbake_image_NAME`), so the host and the scripts share it."""
    module_name = f"sparkbake_image_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = loaded
        spec.loader.exec_module(loaded)
    return sys.modules[module_name]


def render(name: str, **values: object) -> str:
    import jinja2  # only where a template is rendered: most runs render none

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(images_dir()),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template(name).render(**values)
