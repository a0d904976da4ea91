"""Node .env files: the shell-style `NAME=VALUE` files a launcher sources (`set -a; . FILE`).

Accepted: blank lines, `#` comments (whole-line, or after whitespace), an `export ` prefix,
several assignments on one line (`NNODES=4  TP_SIZE=4`, as the reference deployment writes
them), values in single quotes (literal) or double quotes (`\\"`, `\\\\`, `\\$` escapes).
Refused with file:line, because a shell would read them otherwise: `$` and backquote
expansion, unquoted `<>|;&()` (often an unfilled `<placeholder>`), line continuations,
carriage returns (a file with Windows line ends: the shell keeps the CR in every value).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from sparkbake.errors import ConfigError

__all__ = ["EnvFile", "parse", "read"]

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
METACHARACTERS = "<>|;&()"
DOUBLE_ESCAPES = '"\\$`'


@dataclass(frozen=True)
class EnvFile:
    path: Path
    values: dict[str, str] = field(hash=False)
    lines: dict[str, int] = field(hash=False)  # name -> line of its (last) assignment
    repeated: tuple[tuple[str, int, int], ...] = ()  # (name, earlier line, later line)

    def where(self, name: str) -> str:
        """`file:line` of a variable's assignment, or the file when it is not in it."""
        return f"{self.path}:{self.lines[name]}" if name in self.lines else str(self.path)


class _LineError(Exception):
    """A problem on one line; the caller adds file:line."""


def read(path: Path) -> EnvFile:
    try:  # bytes, not text: reading text would turn CR LF into LF and hide it
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "give the path of a node's .env file") \
            from exc
    return parse(text, path)


def parse(text: str, path: Path) -> EnvFile:
    _refuse_carriage_return(text, path)
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    repeated: list[tuple[str, int, int]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            pairs = parse_line(line)
        except _LineError as exc:
            raise ConfigError(f"{path}:{number}: {exc}: {line.strip()[:60]!r}",
                              "write NAME=VALUE pairs; quote values with spaces "
                              "(see docs/reference/preflight.md)") from None
        for name, value in pairs:
            if name in lines:
                repeated.append((name, lines[name], number))
            values[name], lines[name] = value, number
    return EnvFile(path=path, values=values, lines=lines, repeated=tuple(repeated))


def _refuse_carriage_return(text: str, path: Path) -> None:
    """A CR, as a file saved with Windows line ends has on every line: a shell that sources
    the file keeps it, so every value would end in \\r (an address, a path, a number)."""
    at = text.find("\r")
    if at < 0:
        return
    line = text.count("\n", 0, at) + 1
    where = f"{path}:{line}"
    if text[at + 1:at + 2] in ("\n", ""):
        raise ConfigError(f"{where}: the line ends in CR LF (Windows line ends): a shell that "
                          "sources the file reads each value with a trailing \\r",
                          f"convert the file to LF line ends: sed -i 's/\\r$//' "
                          f"{shlex.quote(str(path))}")
    raise ConfigError(f"{where}: a carriage return (\\r) inside the line, which a shell keeps "
                      "in the value", "remove it from the line")


def parse_line(line: str) -> list[tuple[str, str]]:
    """The assignments on one line, in order."""
    if "\0" in line:  # no process environment can hold it: the container would not start
        raise _LineError("a NUL byte (is it a text file?)")
    pos = _skip_space(line, 0)
    if line.startswith("export", pos) and line[pos + 6:pos + 7].isspace():
        pos = _skip_space(line, pos + 6)
    pairs = []
    while pos < len(line) and line[pos] != "#":
        match = NAME.match(line, pos)
        if match is None:
            raise _LineError("expected NAME=VALUE")
        value, pos = _value(line, match.end())
        pairs.append((match.group()[:-1], value))
        if pos < len(line) and not line[pos].isspace():
            raise _LineError("expected a space after the value")
        pos = _skip_space(line, pos)
    return pairs


def _skip_space(line: str, pos: int) -> int:
    while pos < len(line) and line[pos].isspace():
        pos += 1
    return pos


def _value(line: str, pos: int) -> tuple[str, int]:
    """One shell word from pos: unquoted, '...' and "..." parts; returns it and the end."""
    out: list[str] = []
    while pos < len(line) and not line[pos].isspace():
        char = line[pos]
        if char == "'":
            end = line.find("'", pos + 1)
            if end < 0:
                raise _LineError("unterminated single quote")
            out.append(line[pos + 1:end])
            pos = end + 1
        elif char == '"':
            pos = _double_quoted(line, pos + 1, out)
        elif char == "\\":
            if pos + 1 == len(line):
                raise _LineError("line continuations are not supported")
            out.append(line[pos + 1])
            pos += 2
        else:
            _check_plain(char)
            out.append(char)
            pos += 1
    return "".join(out), pos


def _double_quoted(line: str, pos: int, out: list[str]) -> int:
    while pos < len(line):
        char = line[pos]
        if char == '"':
            return pos + 1
        if char == "\\" and pos + 1 < len(line) and line[pos + 1] in DOUBLE_ESCAPES:
            out.append(line[pos + 1])
            pos += 2
            continue
        if char in "$`":
            raise _LineError(f"{char!r} expansion is not supported; use single quotes")
        out.append(char)
        pos += 1
    raise _LineError("unterminated double quote")


def _check_plain(char: str) -> None:
    if char in "$`":
        raise _LineError(f"{char!r} expansion is not supported; use single quotes")
    if char in METACHARACTERS:
        raise _LineError(f"unquoted {char!r} (an unfilled <placeholder>?)")
