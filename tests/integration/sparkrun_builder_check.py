"""Run by sparkrun's own Python in a container (test_sparkrun_builder.py): sparkrun's plugins
loaded as its CLI loads them (init_sparkrun: the config.yaml under $HOME, its features and
plugins.paths), then for each recipe file sparkrun's findings (validate_recipe, which resolves
the recipe's builder) and, where it has no error, the image its builder's prepare() hands on,
or the builder's error; for each .json file (a release record), the recipe sparkrun loads of
it, or its error. Prints one line: PREFIX and a JSON object.

Standard library and sparkrun only; sparkrun is imported by name, so this file type-checks
where sparkrun is absent.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

PREFIX = "sparkrun-builder: "


def loaded(path: str) -> dict[str, Any]:
    """A file sparkrun loads as a recipe through a recipe format: what it made of it."""
    try:
        recipe = importlib.import_module("sparkrun.core.recipe").Recipe.load(path)
    except Exception as exc:  # what sparkrun would show of a recipe it cannot load
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"name": recipe.name, "container": recipe.container, "model": recipe.model}


def checked(path: str, v: Any) -> dict[str, Any]:
    if path.endswith(".json"):
        return loaded(path)
    recipe = importlib.import_module("sparkrun.core.recipe").Recipe.load(path)
    validation = importlib.import_module("sparkrun.core.validation")
    found: dict[str, Any] = {"issues": [[str(issue.severity), issue.code, issue.message]
                                        for issue in validation.validate_recipe(recipe, v=v)]}
    if any(severity == "error" for severity, _, _ in found["issues"]):
        return found
    bootstrap = importlib.import_module("sparkrun.core.bootstrap")
    try:
        builder = bootstrap.get_builder(recipe.builder, v)
        found["image"] = builder.prepare(recipe.container, recipe, ["localhost"])
    except Exception as exc:  # what sparkrun would show of a builder's failure
        found["error"] = f"{type(exc).__name__}: {exc}"
    return found


def main(paths: list[str]) -> int:
    bootstrap = importlib.import_module("sparkrun.core.bootstrap")
    v = bootstrap.init_sparkrun()
    report = {"builders": bootstrap.list_builders(v),
              "recipes": {path: checked(path, v) for path in paths}}
    print(PREFIX + json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
