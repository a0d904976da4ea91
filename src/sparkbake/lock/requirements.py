"""What a tag adds to its upstream's runtime requirements: the upstream's extras (as its
PKG-INFO defines them) and the tag's pins, checked against the upstream's own requirements.

The runtime lock is resolved from the upstream's requirement file and one more file written
here; the bake asks pip for the extras and the pinned packages by name (see `asked`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging._parser import MarkerAtom, MarkerList
from packaging.markers import Marker, default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from sparkbake.config.versions import Tag
from sparkbake.errors import ConfigError
from sparkbake.hashing import data_hash

__all__ = ["Asked", "asked", "extras_of", "input_text", "stamp"]

INCLUDE = re.compile(r"-r\s+(\S+)|--requirement[=\s]+(\S+)")


@dataclass(frozen=True)
class Asked:
    """A distribution the tag asks for by name: an extra's requirement or a pin."""

    name: str
    requirement: str
    why: str  # "extra b12x" or "pin"


def extras_of(tree: Path) -> dict[str, list[str]]:
    """The upstream's extras and their requirements (markers without the extra clause), from
    the PKG-INFO of its sdist tree; {} when it has none."""
    info = tree / "PKG-INFO"
    if not info.is_file():
        return {}
    headers = HeaderParser().parsestr(info.read_text(encoding="utf-8"))
    extras: dict[str, list[str]] = {name: [] for name in headers.get_all("Provides-Extra") or []}
    for line in headers.get_all("Requires-Dist") or []:
        try:
            marker = Requirement(line).marker
        except InvalidRequirement as exc:
            raise ConfigError(f"{info}: Requires-Dist {line!r} is not a requirement ({exc})",
                              "check the upstream's metadata") from exc
        if marker is None:
            continue
        wanted = line.partition(";")[0].strip()  # as the upstream writes it, for the lock
        for extra, listed in extras.items():
            rest = _with_extra(marker, extra)
            if rest is not None:
                listed.append(f"{wanted}; {rest}" if rest else wanted)
    return extras


def _with_extra(marker: Marker, extra: str) -> str | None:
    """The marker of a requirement when the extra is asked for: "" when the extra's clauses
    leave nothing else, None when the requirement is not the extra's (asking for it rules
    the requirement out, or changes nothing: a requirement of no extra, or of every other)."""
    # packaging parses a marker into clauses, nested lists and "and"/"or" (the same form
    # since packaging 22), but gives no public access to them
    asked, unasked = _decided(marker._markers, extra), _decided(marker._markers, "")
    if asked is False or asked == unasked:
        return None
    return "" if asked is True else asked


def _decided(markers: MarkerList, extra: str) -> bool | str:
    """A parsed marker with each clause on `extra` evaluated for this extra ("": none):
    True or False where that decides it, else the marker text of what is left."""
    groups: list[list[MarkerAtom]] = [[]]  # `or` of `and`s, as the marker grammar binds them
    for item in markers:
        if item == "or":
            groups.append([])
        elif item != "and":
            groups[-1].append(item)
    alternatives = []
    for group in groups:
        clauses = [_decided_atom(atom, extra) for atom in group]
        if any(clause is False for clause in clauses):
            continue
        kept = [clause for clause in clauses if isinstance(clause, str)]
        if not kept:
            return True
        alternatives.append(" and ".join(kept))
    return " or ".join(alternatives) if alternatives else False


def _decided_atom(atom: MarkerAtom, extra: str) -> bool | str:
    """One clause, or a parenthesized marker, decided as `_decided` says."""
    if isinstance(atom, list):
        inner = _decided(atom, extra)
        return inner if isinstance(inner, bool) else f"({inner})"
    lhs, op, rhs = (node.serialize() for node in atom)
    text = f"{lhs} {op} {rhs}"
    if "extra" in (lhs, rhs):  # the variable: a value is written with its quotes
        return Marker(text).evaluate({"extra": extra})
    return text


def asked(tag: Tag, tree: Path) -> list[Asked]:
    """The tag's extras' requirements and its pins; an extra the upstream lacks is exit 2."""
    defined = extras_of(tree)
    result = []
    for extra in tag.extras.items:
        if extra not in defined:
            has = ", ".join(sorted(defined)) or "none (its tree has no PKG-INFO)"
            raise ConfigError(f"{tag.extras.at}: tag {tag.name}: upstream {tag.upstream.key} "
                              f"has no extra {extra!r}; its extras: {has}",
                              "name one of its extras, or remove it from extras:")
        result += [Asked(_name(line), line, f"extra {extra}") for line in defined[extra]]
    result += [Asked(_name(pin), pin, "pin") for pin in tag.pins.items]
    return result


def _name(requirement: str) -> str:
    return str(canonicalize_name(Requirement(requirement).name))


def input_text(tag: Tag, tree: Path, requirement_file: str, machine: str) -> str:
    """The lock's second input: the extras' requirements and the pins, each pin checked
    against the upstream's requirement file for Linux/machine (exit 2 naming both when
    they disagree)."""
    if not tag.extras.items and not tag.pins.items:
        return ""
    wanted = asked(tag, tree)
    upstream = _requirements(tree / requirement_file, tree)
    environment = {str(key): str(value) for key, value in default_environment().items()}
    environment |= {"platform_machine": machine, "sys_platform": "linux",
                    "platform_system": "Linux", "python_version": tag.runtime.python or ""}
    for pin in (a for a in wanted if a.why == "pin"):
        version = pin.requirement.split("==", 1)[1]
        for where, their in upstream:
            if _name(their.name) != pin.name or (
                    their.marker is not None and not their.marker.evaluate(environment)):
                continue
            if not their.specifier.contains(version, prereleases=True):
                raise ConfigError(f"{tag.pins.at}: tag {tag.name}: the pin {pin.requirement} "
                                  f"conflicts with {where}: {their}",
                                  "pin a version the upstream allows, or patch its "
                                  "requirement in a series")
    return "".join(f"{a.requirement}  # {a.why}\n" for a in wanted)


def _requirements(path: Path, tree: Path) -> list[tuple[str, Requirement]]:
    """Each requirement of a pip requirement file and those it includes (`-r`), with
    file:line relative to the tree."""
    found = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        included = INCLUDE.fullmatch(line)
        if included:
            found += _requirements(path.parent / (included.group(1) or included.group(2)), tree)
        elif line and not line.startswith(("#", "-")):
            try:
                found.append((f"{path.relative_to(tree)}:{number}", Requirement(line)))
            except InvalidRequirement:
                continue  # a URL or option line: pip's business, not a version to compare
    return found


def stamp(tag: Tag, text: str) -> str:
    """The extras and pins part of the lock's `# from:` line, from input_text's text; ""
    when the tag has neither."""
    if not tag.extras.items and not tag.pins.items:
        return ""
    return f" extras={','.join(tag.extras.items) or '-'} asked={data_hash(text)[:16]}"
