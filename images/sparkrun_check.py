"""Recipes checked by sparkrun's own code: each file loaded with `Recipe.load`, then
`Recipe.validate` and `sparkrun.core.validation.validate_recipe`, as `sparkrun recipe
validate` does. Prints one JSON object: per recipe file, its errors, warnings and suggestions
(each finding's code and message), or the error that stopped the load.

Run with a Python where sparkrun is installed (3.12 or later): python sparkrun_check.py FILE...
Standard library and sparkrun only; sparkrun is imported by name, so this file type-checks
where sparkrun is absent.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

SEVERITIES = ("error", "warning", "suggestion")


def check(path: str) -> dict[str, Any]:
    """One recipe file's findings; a load that fails is its one error."""
    recipe_module = importlib.import_module("sparkrun.core.recipe")
    validation = importlib.import_module("sparkrun.core.validation")
    found: dict[str, Any] = {name: [] for name in SEVERITIES}
    try:
        recipe = recipe_module.Recipe.load(path)
    except recipe_module.RecipeError as exc:
        found["error"].append({"code": "load", "message": str(exc)})
        return found
    found["validate"] = list(recipe.validate())
    for issue in validation.validate_recipe(recipe):
        found[str(issue.severity)].append({"code": issue.code, "message": issue.message})
    return found


def main(paths: list[str]) -> int:
    print(json.dumps({path: check(path) for path in paths}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
