"""The one converter of records to JSON and back: keys in field order, what a field's
metadata says otherwise, and a bad value named by its field."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from sparkbake import records
from sparkbake.records import RecordError


class Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Part:
    name: str
    size: float = 0.0


@dataclass(frozen=True)
class Whole:
    kind: Literal["a", "b"]
    parts: tuple[Part, ...]
    pair: tuple[str, int]
    by_name: dict[str, tuple[Part, ...] | None]
    colour: Colour
    where: Path
    note: str = field(default="", metadata=records.key("the note", omit="empty"))
    extra: dict[str, Any] | None = field(default=None, metadata=records.OMIT_NONE)
    only_b: str = field(default="b's", metadata=records.key(when=lambda w: w.kind == "b"))
    old: str = field(default="x", metadata=records.key(absent="before"))


@dataclass(frozen=True)
class Moved:
    method: str
    failed: str | None = field(default=None, metadata=records.OMIT_NONE)
    counts: dict[str, int] = field(default_factory=dict, metadata=records.key(inline=True))


@dataclass(frozen=True)
class Host:
    host: str
    moved: Moved | None = field(default=None, metadata=records.key(inline=True))
    seconds: float | None = None


WHOLE = Whole("a", (Part("p", 1.5),), ("x", 2), {"one": (Part("q"),), "none": None},
              Colour.RED, Path("a/b"), extra={"k": [1]})


def test_a_record_is_written_in_field_order_as_json_has_its_values() -> None:
    assert list(records.to_json(WHOLE).items()) == [
        ("kind", "a"), ("parts", [{"name": "p", "size": 1.5}]), ("pair", ["x", 2]),
        ("by_name", {"one": [{"name": "q", "size": 0.0}], "none": None}), ("colour", "red"),
        ("where", "a/b"), ("extra", {"k": [1]}), ("old", "x")]


def test_a_field_is_renamed_left_out_or_written_as_its_metadata_says() -> None:
    written = records.to_json(Whole("b", (), ("x", 1), {}, Colour.RED, Path("."), note="n"))
    assert list(written) == ["kind", "parts", "pair", "by_name", "colour", "where", "the note",
                             "only_b", "old"]


def test_a_record_reads_back_to_itself() -> None:
    assert records.from_json(Whole, records.to_json(WHOLE)) == WHOLE


def test_a_missing_key_reads_as_the_default_or_as_absent() -> None:
    data = {key: value for key, value in records.to_json(WHOLE).items() if key != "old"}
    assert records.from_json(Whole, data).old == "before"
    assert records.from_json(Part, {"name": "p", "size": 2}) == Part("p", 2.0)


def test_inline_keys_are_among_the_parents_and_read_back_from_the_rest() -> None:
    host = Host("h", Moved("pull", "denied", {"pulled": 2, "present": 1}), 1.0)
    written = records.to_json(host)
    assert list(written.items()) == [("host", "h"), ("method", "pull"), ("failed", "denied"),
                                     ("pulled", 2), ("present", 1), ("seconds", 1.0)]
    assert records.from_json(Host, written) == host
    assert records.from_json(Host, {"host": "h", "seconds": None}) == Host("h")


def test_orders_choose_and_order_a_class_s_keys() -> None:
    written = records.to_json(Host("h", Moved("pull")), {Moved: ("failed", "method")})
    assert list(written) == ["host", "method", "seconds"]
    assert list(records.to_json(Moved("m", "f"), {Moved: ("failed", "method")})) == \
        ["failed", "method"]


@pytest.mark.parametrize(("change", "message"), [
    ({"parts": [{"name": 1}]}, "Whole.parts[0].name: expected str, got 1"),
    ({"kind": "c"}, "Whole.kind: expected 'a' or 'b', got 'c'"),
    ({"pair": ["x"]}, "Whole.pair: expected 2 items, got 1"),
    ({"colour": "blue"}, "Whole.colour: expected Colour, got 'blue'"),
    ({"by_name": {"one": "p"}}, "Whole.by_name['one']: expected a list, got 'p'"),
    ({"parts": None}, "Whole.parts: expected a list, got None"),
    ({"pair": ["x", True]}, "Whole.pair[1]: expected int, got True"),
])
def test_a_bad_value_is_a_record_error_naming_its_field(change: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(RecordError) as raised:
        records.from_json(Whole, {**records.to_json(WHOLE), **change})
    assert str(raised.value) == message


def test_a_missing_key_without_a_default_is_a_record_error() -> None:
    with pytest.raises(RecordError, match=r"Part.name: missing \(no key 'name'\)"):
        records.from_json(Part, {"size": 1})
    with pytest.raises(RecordError, match="Part: expected an object, got"):
        records.from_json(Part, ["p"])
