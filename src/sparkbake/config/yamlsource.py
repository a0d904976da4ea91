"""YAML read with line numbers, and the shape checks that name file:line in every error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sparkbake.errors import ConfigError

__all__ = ["Located", "LocatedDict", "LocatedList", "Where", "did_you_mean", "kind_of", "read"]


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
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                          f"{exc.start})", "save it as UTF-8 (a YAML text file)") from None
    try:
        node = _compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}", "fix the syntax") from exc
    if node is None:
        raise ConfigError(f"{path}:1: the file is empty", "start it with 'schema: 1'")
    return _convert(node, path, _Expansion())


def _compose(text: str) -> yaml.Node | None:
    """The document's node tree, from libyaml's parser where PyYAML has it (ten times as
    fast); a document it refuses is parsed again by PyYAML's own, whose messages say more
    (the character or the alias name)."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is None:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    try:
        return yaml.compose(text, Loader=fast)
    except yaml.YAMLError as refused:
        try:
            yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError:
            raise
        raise refused from None


class _Expansion:
    """How far YAML aliases have expanded the document: each alias is a copy of its anchor's
    values, so a few lines can stand for billions of them, or for themselves."""

    LIMIT = 100_000  # values; a versions.yaml has hundreds

    def __init__(self) -> None:
        self.values = 0
        self.open: set[int] = set()

    def enter(self, node: yaml.Node, path: Path) -> None:
        self.values += 1
        line = node.start_mark.line + 1
        if id(node) in self.open:
            raise ConfigError(f"{path}:{line}: a YAML alias here contains itself",
                              "write the values out, or share them with a tag's `extends`")
        if self.values > self.LIMIT:
            raise ConfigError(f"{path}:{line}: YAML aliases expand the file past "
                              f"{self.LIMIT} values",
                              "write the values out, or share them with a tag's `extends`")
        self.open.add(id(node))


def _convert(node: yaml.Node, path: Path, expansion: _Expansion) -> Any:
    expansion.enter(node, path)
    try:
        return _convert_node(node, path, expansion)
    finally:
        expansion.open.discard(id(node))


def _convert_node(node: yaml.Node, path: Path, expansion: _Expansion) -> Any:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        mapping = LocatedDict(line)
        for key_node, value_node in node.value:
            key = _convert(key_node, path, expansion)
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
            mapping[key] = _convert(value_node, path, expansion)
            mapping.key_lines[key] = key_node.start_mark.line + 1
        return mapping
    if isinstance(node, yaml.SequenceNode):
        items = LocatedList(line)
        for item in node.value:
            items.append(_convert(item, path, expansion))
            items.item_lines.append(item.start_mark.line + 1)
        return items
    return yaml.SafeLoader("").construct_object(node, deep=True)


class Where:
    """Formats `file:line` for a key of a located mapping and checks shapes."""

    def __init__(self, path: Path, manual: str = "docs/reference/versions-yaml.md") -> None:
        self.path = path
        self.manual = manual  # the page that describes the file, named in remedies

    def __call__(self, mapping: Any, key: str | None = None) -> str:
        if isinstance(mapping, LocatedDict):
            line = mapping.key_lines.get(key, mapping.line) if key else mapping.line
            return f"{self.path}:{line}"
        if isinstance(mapping, LocatedList):
            return f"{self.path}:{mapping.line}"
        return str(self.path)

    def mapping(
        self,
        value: Any,
        what: str,
        allowed: tuple[str, ...] | None = None,
        required: tuple[str, ...] = (),
        parent: LocatedDict | None = None,
        key: str | None = None,
    ) -> LocatedDict:
        """Check value is a mapping of allowed keys; errors point at parent[key] if given."""
        if not isinstance(value, LocatedDict):
            spot = self(parent, key) if parent is not None else self(value)
            raise ConfigError(
                f"{spot}: {what} must be a mapping, not {kind_of(value)}",
                f"see {self.manual}",
            )
        for name in value:
            if allowed is not None and name not in allowed:
                raise ConfigError(
                    f"{self(value, name)}: unknown key {name!r} in {what}"
                    f"{did_you_mean(name, allowed)}",
                    f"allowed keys: {', '.join(allowed)}",
                )
        for name in required:
            if name not in value:
                raise ConfigError(
                    f"{self(value)}: {what} lacks the key {name!r}",
                    f"add '{name}:' (see {self.manual})",
                )
        return value

    def string(self, mapping: LocatedDict, key: str, pattern: re.Pattern[str] | None = None,
               hint: str = "") -> str:
        value = mapping[key]
        if not isinstance(value, str):
            raise ConfigError(
                f"{self(mapping, key)}: {key} must be a string, not {kind_of(value)}",
                "quote the value",
            )
        if pattern is not None and not pattern.fullmatch(value):
            raise ConfigError(f"{self(mapping, key)}: {key} {value!r} is not {hint}",
                              f"write {hint}")
        return value

    def strings(self, mapping: LocatedDict, key: str,
                pattern: re.Pattern[str]) -> tuple[str, ...]:
        items = mapping[key]
        if not isinstance(items, LocatedList) or not all(isinstance(i, str) for i in items):
            raise ConfigError(f"{self(mapping, key)}: {key} must be a list of strings",
                              f"write {key}: [a, b]")
        for item, line in zip(items, items.item_lines, strict=True):
            if not pattern.fullmatch(item):
                raise ConfigError(f"{self.path}:{line}: {item!r} is not a valid name in {key}",
                                  f"names match {pattern.pattern}")
        return tuple(items)


def did_you_mean(word: str, choices: Any) -> str:
    import difflib
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "empty"
    return f"a {type(value).__name__}"
