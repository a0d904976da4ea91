from collections.abc import Mapping
from typing import Any, ClassVar

from sparkrun.core.recipe import Recipe
from sparkrun.core.validation import RecipeIssue

class BuilderPlugin:
    builder_name: str
    builder_aliases: ClassVar[tuple[str, ...]]
    transforms_image: ClassVar[bool]
    def prepare(self, image: str, recipe: Recipe, hosts: list[str], config: Any = None,
                dry_run: bool = False, transfer_mode: str = "local",
                ssh_kwargs: dict[str, Any] | None = None,
                builder_context: Mapping[str, Any] | None = None) -> str: ...
    def pull_ref(self, image: str, recipe: Recipe, config: Any = None) -> str | None: ...
    def validate_recipe(self, recipe: Recipe) -> list[str | RecipeIssue]: ...
    def recipe_error(self, message: str, code: str = "builder-field") -> RecipeIssue: ...
