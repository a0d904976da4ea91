"""Records as JSON and back, one way for all of them.

A record is a frozen dataclass; its JSON object has a key per field, in field order, the
value as JSON has it (a tuple a list, a nested record an object, an enum its value, a path
its text). What a record's files have always done otherwise is said beside the field, in
its metadata (`key`): another key, a key left out when None or empty, a key written only
when the record says so (`when`), a record's or a dict's keys among the parent's own
(`inline`). A field that is not in __init__ is written, not read: it is worked out. A writer
that has always ordered a record's keys otherwise says so in `orders`.

Reading takes a missing key as the field's default, or as `absent` (a record of an earlier
version lacks it), and checks each value against the field's type; a bad one is a
RecordError that names the field.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["OMIT_EMPTY", "OMIT_NONE", "Key", "Orders", "RecordError", "from_json", "key",
           "to_json"]

R = TypeVar("R", bound="DataclassInstance")
Omit = Literal["never", "none", "empty"]
# for these classes, the fields to write, in this order, in place of all in field order
Orders = Mapping[type, Sequence[str]]
METADATA = "sparkbake.records"
NOTHING: Any = object()  # no `absent`: without the key, the default, or no record


class RecordError(ValueError):
    """JSON that is not the record asked for; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Key:
    """How one field is written and read, where it differs from its name and value."""

    name: str | None = None  # its key; None: the field's name
    omit: Omit = "never"  # left out when None ("none"), or when None or empty ("empty")
    when: Callable[[Any], bool] | None = None  # written only when true of the record
    inline: bool = False  # a record's or a dict's keys among the parent's; read: the rest
    absent: Any = NOTHING  # what a record that lacks the key reads as


def key(name: str | None = None, *, omit: Omit = "never", when: Callable[[Any], bool] | None = None,
        inline: bool = False, absent: Any = NOTHING) -> dict[str, Key]:
    """A field's metadata: `field(metadata=records.key(...))`."""
    return {METADATA: Key(name, omit, when, inline, absent)}


NO_KEY = Key()
OMIT_NONE = key(omit="none")  # the two common cases, by name
OMIT_EMPTY = key(omit="empty")


def to_json(record: DataclassInstance, orders: Orders | None = None) -> dict[str, Any]:
    """The record's JSON object."""
    found: dict[str, Any] = {}
    for field in _written(record, orders or {}):
        spec, value = _spec(field), getattr(record, field.name)
        if _left_out(record, value, spec):
            continue
        if spec.inline:
            found.update(_json(value, orders))
        else:
            found[spec.name or field.name] = _json(value, orders)
    return found


def from_json(cls: type[R], data: Any) -> R:
    """The record of class cls that data (a JSON object) is."""
    return _record(cls, data, cls.__name__)


def _written(record: DataclassInstance, orders: Orders) -> list[dataclasses.Field[Any]]:
    fields = dataclasses.fields(record)
    order = orders.get(type(record))
    if order is None:
        return list(fields)
    by_name = {field.name: field for field in fields}
    return [by_name[name] for name in order]


def _spec(field: dataclasses.Field[Any]) -> Key:
    spec: Key = field.metadata.get(METADATA, NO_KEY)
    return spec


def _left_out(record: DataclassInstance, value: Any, spec: Key) -> bool:
    if spec.when is not None and not spec.when(record):
        return True
    if value is None:
        return spec.inline or spec.omit != "never"
    return spec.omit == "empty" and not value


def _json(value: Any, orders: Orders | None) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value, orders)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {name: _json(item, orders) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json(item, orders) for item in value]
    return value


def _record(cls: type[R], data: Any, where: str) -> R:
    if not isinstance(data, Mapping):
        raise RecordError(f"{where}: expected an object, got {_shown(data)}")
    hints, fields = _hints(cls), dataclasses.fields(cls)
    claimed = {_spec(f).name or f.name for f in fields if not _spec(f).inline}
    rest = {name: value for name, value in data.items() if name not in claimed}
    values: dict[str, Any] = {}
    for field in (f for f in fields if f.init):  # one not in __init__ is worked out
        spec, here = _spec(field), f"{where}.{field.name}"
        if spec.inline:
            values[field.name] = _inline(hints[field.name], rest, here)
        elif (name := spec.name or field.name) in data:
            values[field.name] = _value(hints[field.name], data[name], here)
        elif spec.absent is not NOTHING:
            values[field.name] = spec.absent
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise RecordError(f"{here}: missing (no key {name!r})")
    return cls(**values)


def _inline(hint: Any, rest: dict[str, Any], where: str) -> Any:
    """An inline field from the keys no other field claims: an optional one is None
    without any."""
    if not rest and type(None) in get_args(hint):
        return None
    return _value(hint, rest, where)


def _value(hint: Any, value: Any, where: str) -> Any:
    """value, checked against the type hint, as that type."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any or hint is object:
        return value
    if origin in (Union, types.UnionType):
        return _either(args, value, where)
    if origin is Literal:
        _check(value in args, value, where, " or ".join(map(repr, args)))
        return value
    if origin in (dict, Mapping):
        _check(isinstance(value, Mapping), value, where, "an object")
        return {name: _value(args[1], item, f"{where}[{name!r}]") for name, item in value.items()}
    if origin in (tuple, list):
        return _sequence(origin, args, value, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record(hint, value, where)
    return _scalar(hint, value, where)


def _either(options: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None and type(None) in options:
        return None
    problems = []
    for option in (o for o in options if o is not type(None)):
        try:
            return _value(option, value, where)
        except RecordError as exc:
            problems.append(str(exc))
    if len(problems) == 1:  # X | None: what is wrong with it as an X
        raise RecordError(problems[0])
    raise RecordError(f"{where}: expected {_named(options)}, got {_shown(value)}")


def _sequence(origin: Any, args: tuple[Any, ...], value: Any, where: str) -> Any:
    """A list as a list[X], a tuple[X, ...] or a tuple[X, Y]."""
    _check(isinstance(value, list), value, where, "a list")
    fixed = origin is tuple and args[-1] is not Ellipsis
    if fixed and len(value) != len(args):
        raise RecordError(f"{where}: expected {len(args)} items, got {len(value)}")
    read = [_value(args[index] if fixed else args[0], item, f"{where}[{index}]")
            for index, item in enumerate(value)]
    return tuple(read) if origin is tuple else read


def _scalar(hint: Any, value: Any, where: str) -> Any:
    if is_typeddict(hint):  # a document kept as JSON has it
        _check(isinstance(value, Mapping), value, where, "an object")
        return dict(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        _check(value in {member.value for member in hint}, value, where, hint.__name__)
        return hint(value)
    if hint is Path:
        _check(isinstance(value, str), value, where, "a path")
        return Path(value)
    if hint is float:  # JSON has a whole float as an int
        _check(isinstance(value, int | float) and not isinstance(value, bool), value, where,
               "a number")
        return float(value)
    if hint in (str, int, bool):
        _check(isinstance(value, hint) and (hint is bool or not isinstance(value, bool)),
               value, where, hint.__name__)
        return value
    raise TypeError(f"{where}: records cannot read a {hint!r}")  # a record's type, not its data


def _check(fits: bool, value: Any, where: str, wanted: str) -> None:
    if not fits:
        raise RecordError(f"{where}: expected {wanted}, got {_shown(value)}")


def _named(options: tuple[Any, ...]) -> str:
    return " or ".join(getattr(o, "__name__", repr(o)) for o in options if o is not type(None))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


@functools.cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    """The fields' types, the annotations' text resolved in the record's module."""
    return get_type_hints(cls)

