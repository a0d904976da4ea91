from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

@dataclass(frozen=True)
class RecipeFormat:
    name: str
    owner: str
    iter_files: Callable[[Path], list[Path]]
    name_of: Callable[[Path, Path | None], str]
    load: Callable[..., dict[str, Any]]
    claims: Callable[[Path, dict[str, Any]], bool] | None = None

def register_recipe_format(recipe_format: RecipeFormat) -> None: ...
