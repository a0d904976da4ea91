"""The third-party sources a CMake tree fetches at configure time, found in its CMake files.

Every `FetchContent_Declare(name GIT_REPOSITORY .. GIT_TAG ..)` (or `URL .. URL_HASH ..`),
and every `FetchContent_Populate(name ..)` that carries its own download details, in the
tree's CMakeLists.txt and *.cmake files. `${VAR}` is resolved as CMake would where the
tree sets VAR with `set()` or `string(REPLACE|REGEX REPLACE)`: the last value set before the
declaration (CMakeLists.txt's values are seen by the other files). Conditions are not
evaluated. Pure logic, no I/O but reading the files.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparkbake.errors import ConfigError

__all__ = ["Command", "Declaration", "Discovery", "LeftOut", "commands", "discover",
           "expand", "scan_file"]

Kind = Literal["git", "url"]
Form = Literal["declare", "populate"]  # populate with its own details ignores FETCHCONTENT_*

_TOKEN = re.compile(r"""
    (?P<bcomment>\#\[(?P<e1>=*)\[.*?\](?P=e1)\])
  | (?P<comment>\#[^\n]*)
  | (?P<bracket>\[(?P<e2>=*)\[(?P<btext>.*?)\](?P=e2)\])
  | (?P<quoted>"(?P<qtext>(?:\\.|[^"\\])*)")
  | (?P<open>\()
  | (?P<close>\))
  | (?P<space>\s+)
  | (?P<word>(?:\\.|[^\s()#"\\])+)
""", re.S | re.X)
_VAR = re.compile(r"\$\{([A-Za-z0-9_.+/-]+)\}")
_ENV_SRC_DIR = re.compile(r"\$ENV\{([A-Za-z0-9_]*_SRC_DIR)\}")
_KEYWORD = re.compile(r"[A-Z][A-Z0-9_]*")  # FetchContent's option names
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\n": ""}
_SET_ENDS = ("CACHE", "PARENT_SCOPE")
_SINGLE = frozenset({"GIT_REPOSITORY", "GIT_TAG", "URL_HASH"})


@dataclass(frozen=True)
class Command:
    name: str  # lower case, as CMake compares them
    args: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class Declaration:
    """One dependency the tree downloads at configure time, its values resolved."""

    name: str
    kind: Kind
    url: str  # GIT_REPOSITORY or URL
    ref: str  # GIT_TAG (a commit, tag or branch); for a URL: "sha256:<hex>" or ""
    written: str  # GIT_TAG or URL_HASH as the file writes it, e.g. ${CUTLASS_REVISION}
    submodules: tuple[str, ...] | None  # GIT_SUBMODULES; None: not given (CMake: all)
    env: tuple[str, ...]  # the upstream's own $ENV{*_SRC_DIR} read for this dependency
    form: Form
    file: str  # relative to the tree
    line: int

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class LeftOut:
    name: str
    file: str
    line: int
    reason: str


@dataclass(frozen=True)
class Discovery:
    declarations: tuple[Declaration, ...]
    left_out: tuple[LeftOut, ...]


def _unquote(match: re.Match[str]) -> str:
    if match.lastgroup == "bracket":
        return match["btext"].removeprefix("\n")
    if match.lastgroup == "quoted":
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[1]), match["qtext"], flags=re.S)
    return re.sub(r"\\(.)", r"\1", match[0])


def commands(text: str) -> list[Command]:
    """The command invocations of a CMake file, in order, with their arguments unquoted."""
    breaks = [i for i, char in enumerate(text) if char == "\n"]
    tokens = [m for m in _TOKEN.finditer(text)
              if m.lastgroup not in ("space", "comment", "bcomment")]
    found: list[Command] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token.lastgroup != "word" or index >= len(tokens) or tokens[index].lastgroup != "open":
            continue
        args, index = _arguments(tokens, index + 1)
        found.append(Command(token[0].lower(), tuple(args),
                             bisect.bisect_right(breaks, token.start()) + 1))
    return found


def _arguments(tokens: list[re.Match[str]], index: int) -> tuple[list[str], int]:
    """Arguments up to the matching `)`; nested parentheses (conditions) are dropped."""
    args: list[str] = []
    depth = 1
    while index < len(tokens) and depth:
        token = tokens[index]
        index += 1
        if token.lastgroup in ("open", "close"):
            depth += 1 if token.lastgroup == "open" else -1
        else:
            args.append(_unquote(token))
    return args, index


def expand(value: str, variables: Mapping[str, str | None]) -> str | None:
    """`${VAR}` replaced from variables, innermost first; None if one is unknown or $ENV."""
    if "$ENV{" in value:
        return None
    while match := _VAR.search(value):
        known = variables.get(match[1])
        if known is None:
            return None
        value = value[:match.start()] + known + value[match.end():]
    return value


def _apply_set(command: Command, variables: dict[str, str | None]) -> None:
    if not command.args or "$" in command.args[0]:
        return
    name, values = command.args[0], list(command.args[1:])
    if command.name == "unset" or not values:
        variables.pop(name, None)
        return
    ends = [i for i, v in enumerate(values) if v in _SET_ENDS]
    joined = ";".join(values[:ends[0]] if ends else values)
    variables[name] = expand(joined, variables)


def _apply_string(command: Command, variables: dict[str, str | None]) -> None:
    """string(REPLACE <match> <with> <out> <input>...) and string(REGEX REPLACE ...), as vLLM
    0.34.0 makes triton_kernels' archive URL from its git URL. Other modes are not followed:
    the variable they may write (the first or the last argument after the mode) becomes
    unknown, so a declaration that reads it is an error, never a stale value."""
    args = command.args
    regex = args[:2] == ("REGEX", "REPLACE")
    given = args[2:] if regex else args[1:]
    if not (regex or args[:1] == ("REPLACE",)) or len(given) < 3:
        for written in {*args[1:2], *args[-1:]}:
            variables.pop(written, None)
        return
    match, replacement, out = given[:3]
    text = expand("".join(given[3:]), variables)
    if text is None or "$" in out:
        variables.pop(out, None)
        return
    if not regex:
        variables[out] = text.replace(match, replacement) if match else None
        return
    try:
        variables[out] = re.sub(match, lambda m: _cmake_replacement(m, replacement), text)
    except re.error:
        variables[out] = None


def _cmake_replacement(found: re.Match[str], replacement: str) -> str:
    """CMake's REGEX REPLACE replacement: \\N is group N, every other character as written."""
    return re.sub(r"\\(\d)", lambda ref: found[int(ref[1])] or "", replacement)


def _options(args: tuple[str, ...]) -> dict[str, list[str]]:
    """FetchContent's `KEYWORD value...` pairs of a call (after its name)."""
    options: dict[str, list[str]] = {}
    current: list[str] | None = None
    single = False  # the option takes exactly one value, whatever it looks like
    for arg in args[1:]:
        if current is not None and single:
            current.append(arg)
            current, single = None, False
        elif _KEYWORD.fullmatch(arg):
            current, single = options.setdefault(arg, []), arg in _SINGLE
        elif current is not None:
            current.append(arg)
    return options


def scan_file(text: str, rel: str,
              base: Mapping[str, str | None]) -> tuple[list[Declaration], dict[str, str | None]]:
    """The file's declarations, and its variables after the last command."""
    variables = dict(base)
    found: list[Declaration] = []
    lines = text.splitlines()
    after = 0  # the line of the previous declaration: env variables are looked for after it
    for command in commands(text):
        if command.name in ("set", "unset"):
            _apply_set(command, variables)
        elif command.name == "string":
            _apply_string(command, variables)
        elif command.name in ("fetchcontent_declare", "fetchcontent_populate") and command.args:
            options = _options(command.args)
            if "GIT_REPOSITORY" in options or "URL" in options:
                window = "\n".join(lines[after:command.line])
                env = tuple(dict.fromkeys(_ENV_SRC_DIR.findall(window)))
                found.append(_declaration(command, options, variables, env, rel))
                after = command.line
    return found, variables


def _value(command: Command, options: dict[str, list[str]], key: str,
           variables: Mapping[str, str | None], rel: str) -> tuple[str, str]:
    """(resolved, as written) of one option; an unresolved one is a config error."""
    written = ";".join(options.get(key, []))
    resolved = expand(written, variables)
    if resolved is None:
        raise ConfigError(
            f"{rel}:{command.line}: FetchContent {command.args[0]}: {key} {written} cannot be "
            "resolved from the tree's CMake files (not set with set(), or read from $ENV)",
            "pin it in the CMake file (a patch), or leave the file out with cmake_skip")
    return resolved, written


def _declaration(command: Command, options: dict[str, list[str]],
                 variables: Mapping[str, str | None], env: tuple[str, ...],
                 rel: str) -> Declaration:
    form: Form = "declare" if command.name == "fetchcontent_declare" else "populate"
    name = command.args[0]
    if "GIT_REPOSITORY" in options:
        url, _ = _value(command, options, "GIT_REPOSITORY", variables, rel)
        ref, written = _value(command, options, "GIT_TAG", variables, rel)
        subs = options.get("GIT_SUBMODULES")
        submodules = None if subs is None else tuple(s for s in subs if s)
        return Declaration(name, "git", url, ref, written, submodules, env, form, rel,
                           command.line)
    url, _ = _value(command, options, "URL", variables, rel)
    pinned, written = _value(command, options, "URL_HASH", variables, rel)
    algorithm, _, digest = pinned.partition("=")
    if pinned and algorithm.upper() != "SHA256":
        raise ConfigError(f"{rel}:{command.line}: FetchContent {name}: URL_HASH {written} is "
                          "not SHA256", "pin the archive with URL_HASH SHA256=<hex>")
    ref = f"sha256:{digest.lower()}" if digest else ""
    return Declaration(name, "url", url, ref, written, (), env, form, rel, command.line)


def cmake_files(tree: Path) -> Iterator[Path]:
    """CMakeLists.txt first, then every other CMakeLists.txt and *.cmake, sorted."""
    top = tree / "CMakeLists.txt"
    if top.is_file():
        yield top
    others = {*tree.rglob("CMakeLists.txt"), *tree.rglob("*.cmake")} - {top}
    yield from sorted(p for p in others if p.is_file())


def discover(tree: Path, skip: Mapping[str, str] | None = None) -> Discovery:
    """Every download the tree's CMake files declare; those in skip's files (relative path
    -> why) are left out with that reason. A name declared twice differently is refused."""
    skip = skip or {}
    declarations: dict[str, Declaration] = {}
    left_out: list[LeftOut] = []
    base: dict[str, str | None] = {}
    for path in cmake_files(tree):
        rel = path.relative_to(tree).as_posix()
        found, variables = scan_file(path.read_text(errors="replace"), rel, base)
        if rel == "CMakeLists.txt":
            base = variables
        for declared in found:
            reason = skipped(skip, rel, declared.line)
            if reason is None:
                _add(declarations, declared)
            else:
                left_out.append(LeftOut(declared.name, rel, declared.line, reason))
    return Discovery(tuple(sorted(declarations.values(), key=lambda d: d.name)),
                     tuple(left_out))


def skipped(skip: Mapping[str, str], rel: str, line: int) -> str | None:
    """Why the declaration at rel:line is left out, if a cmake_skip key names it: its file,
    a glob of files (fnmatch), or file:line."""
    for key, reason in skip.items():
        pattern, _, at = key.partition(":")
        if fnmatch.fnmatchcase(rel, pattern) and (not at or int(at) == line):
            return reason
    return None


def _add(declarations: dict[str, Declaration], declared: Declaration) -> None:
    before = declarations.setdefault(declared.name, declared)
    if (before.url, before.ref) != (declared.url, declared.ref):
        raise ConfigError(f"{declared.where}: FetchContent {declared.name} is declared again, "
                          f"differently from {before.where} ({before.url} {before.ref})",
                          "declare it once, or leave one file out with cmake_skip")
