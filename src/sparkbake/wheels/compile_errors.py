"""The compiler's first error in a build's output: what a failed wheels build shows.

A build's last lines are pip's traceback and sccache's statistics; the cause is further up,
where nvcc, gcc, ninja or CMake first said `error`. The console shows that, the log the rest.
"""

from __future__ import annotations

import re

__all__ = ["LIMIT", "failure_summary", "first_error"]

LIMIT = 5  # lines shown: the error and the source line and caret that follow it
WIDTH = 200  # characters kept of each line (a ninja command line runs to thousands)
TAIL = 8  # lines of the end shown when no compiler error is found
WORK = "/build/src/"  # where the builder compiles the patched tree (images/build_wheels.py)
# the located errors of gcc/clang (file:line:col: error:) and nvcc (file(line): error:)
LOCATED = re.compile(r"^\s*\S+?(?::\d+(?::\d+)?:|\(\d+\):) (?:fatal )?error\b")
# errors without a source position, taken only when no located one is in the output
UNLOCATED = re.compile(r"^\s*(?:CMake Error\b|FAILED: |nvcc fatal\b|\S*(?:gcc|g\+\+|c\+\+|"
                       r"clang\+*|nvcc|cc1plus|ld): (?:fatal )?error\b|.*undefined reference to)")
NOISE = re.compile(r"^sccache statistics: ")  # build_wheels.py's one-line JSON


def first_error(output: str) -> list[str]:
    """The first compiler error and the lines that belong to it (more indented: the source
    line and its caret), dedented and shortened; [] when the output has none."""
    lines = output.splitlines()
    for pattern in (LOCATED, UNLOCATED):
        for index, line in enumerate(lines):
            if pattern.match(line):
                return [_shown(x, _indent(line)) for x in _block(lines, index)]
    return []


def failure_summary(output: str) -> tuple[str, list[str]]:
    """What the console shows of a failed build: a heading and its lines."""
    found = first_error(output)
    if found:
        return "the compiler's first error", found
    tail = [line for line in output.splitlines() if line.strip() and not NOISE.match(line)]
    return "the end of its output", [_shown(x.strip(), 0) for x in tail[-TAIL:]]


def _block(lines: list[str], start: int) -> list[str]:
    block = [lines[start]]
    for line in lines[start + 1:start + LIMIT]:
        if not line.strip() or _indent(line) <= _indent(lines[start]):
            break
        block.append(line)
    return block


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _shown(line: str, indent: int) -> str:
    text = line[indent:].rstrip().replace(WORK, "")  # paths as the patched tree has them
    return text if len(text) <= WIDTH else text[:WIDTH] + "..."
