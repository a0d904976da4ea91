"""Recipes checked by sparkrun's own code: each file loaded with `Recipe.load`, then
`Recipe.validate` and `sparkrun.core.validation.validate_recipe`, as `sparkrun recipe
validate` does. Prints one line, PREFIX and a JSON object: per recipe file, its errors,
warnings and suggestions (each finding's code and message), or the error that stopped the
load; each node's command as sparkrun's runtime renders it (the flags it appends
included), the head at HEAD_IP; and the readiness style its launcher resolves.

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
PREFIX = "sparkrun-check: "  # the report's one line, among pip's and sparkrun's own output
HEAD_IP = "192.0.2.1"  # a documentation address: the commands are rendered, never run
RENDEZVOUS_PORT = 25000  # sparkrun's default init port


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
    if not found["error"]:
        found["commands"] = node_commands(recipe)
        found["readiness"] = readiness_style(recipe)
    return found


def readiness_style(recipe: Any) -> str | None:
    """The style sparkrun's readiness probe uses for the recipe on its runtime (None: ready
    at /health, no token asked), as its launcher resolves it."""
    readiness = importlib.import_module("sparkrun.core.readiness")
    runtime = importlib.import_module("sparkrun.core.bootstrap").get_runtime(recipe.runtime,
                                                                             None)
    settings = readiness.resolve_readiness_settings(recipe=recipe)
    style = readiness.resolve_inference_style(settings, runtime, recipe=recipe)
    return None if style is None else str(style)


def node_commands(recipe: Any) -> list[str]:
    """The command of each of the recipe's min_nodes nodes, as sparkrun starts them."""
    runtime = importlib.import_module("sparkrun.core.bootstrap").get_runtime(recipe.runtime,
                                                                             None)
    nodes = int(recipe.min_nodes)
    if nodes == 1:
        return [str(runtime.generate_command(recipe, {}, is_cluster=False))]
    return [str(runtime.generate_node_command(recipe, {}, head_ip=HEAD_IP, num_nodes=nodes,
                                              node_rank=rank, init_port=RENDEZVOUS_PORT))
            for rank in range(nodes)]


def main(paths: list[str]) -> int:
    print(PREFIX + json.dumps({path: check(path) for path in paths}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
