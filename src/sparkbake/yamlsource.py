"""YAML read with line numbers, so every config error can name file:line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

__all__ = ["Located", "LocatedDict", "LocatedList", "read"]


class LocatedDict(dict[str, Any]):
    """A mapping that remembers the line of each key (1-based) and its own line."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[str, int] = {}


class LocatedList(list[Any]):
    """A sequence that remembers its own line and the line of each item."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []


Located = LocatedDict | LocatedList


def read(path: Path) -> Any:
    """Parse one YAML document into plain values, mappings and lists carrying line numbers."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read ({exc.strerror})", "pass an existing file with --config"
        ) from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}", "fix the syntax") from exc
    if node is None:
        raise ConfigError(f"{path}:1: the file is empty", "start it with 'schema: 1'")
    return _convert(node, path)


def _convert(node: yaml.Node, path: Path) -> Any:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        mapping = LocatedDict(line)
        for key_node, value_node in node.value:
            key = _convert(key_node, path)
            if not isinstance(key, str):
                raise ConfigError(
                    f"{path}:{key_node.start_mark.line + 1}: key {key!r} is not a string",
                    "quote the key",
                )
            if key in mapping:
                raise ConfigError(
                    f"{path}:{key_node.start_mark.line + 1}: duplicate key {key!r}",
                    "keep one of them",
                )
            mapping[key] = _convert(value_node, path)
            mapping.key_lines[key] = key_node.start_mark.line + 1
        return mapping
    if isinstance(node, yaml.SequenceNode):
        items = LocatedList(line)
        for item in node.value:
            items.append(_convert(item, path))
            items.item_lines.append(item.start_mark.line + 1)
        return items
    return yaml.SafeLoader("").construct_object(node, deep=True)
