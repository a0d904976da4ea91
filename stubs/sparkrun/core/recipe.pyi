from typing import Any

class Recipe:
    container: str
    builder: str
    builder_config: dict[str, Any]
