"""A build that tried to download a source the sources lock had ready: which, and why the lock
did not reach it, read from the builder's output (CMake's FetchContent errors and the cmake
wrapper's line, images/cmake_wrapper.py). Pure logic."""

from __future__ import annotations

import re

from sparkbake.fetch.thirdparty import MOUNT, Fetched

__all__ = ["WRAPPER_MARK", "explain"]

WRAPPER_MARK = "sparkbake cmake: the sources lock pre-loaded"


def _attempted(output: str, source: Fetched) -> bool:
    """CMake's words for a download of this dependency (FetchContent names its sub-build
    `<name>-populate`, or the dependency itself since policy CMP0168), or git's for its URL."""
    name = re.escape(source.locked.name)
    patterns = (rf"\b{name}-(?:populate|subbuild)\b", rf"Build step for {name} failed",
                rf"(?:clone|download|update) of '?{name}'?\b",
                re.escape(f"'{source.locked.url}'"))
    return any(re.search(p, output, re.IGNORECASE) for p in patterns)


def explain(output: str, fetched: tuple[Fetched, ...]) -> tuple[str, str] | None:
    """(what happened, what to do) when the build tried to download a locked source; None
    when the failure is something else."""
    tried = [f for f in fetched if _attempted(output, f)]
    if not tried:
        return None
    first = tried[0].locked
    others = ", ".join(f.locked.name for f in tried[1:])
    more = f" (and {others})" if others else ""
    what = (f"{first.declared}: FetchContent {first.name} ({first.url}) tried to download{more}; "
            f"the sources lock had it at {MOUNT}/{first.name}\n  not used: "
            f"{_why(output, tried[0])}")
    if WRAPPER_MARK in output:
        remedy = ("keep FetchContent's FETCHCONTENT_* variables as CMake gets them (a patch), "
                  "or set the upstream's own source-folder variable in the tag's env")
    else:
        remedy = ("run `cmake` from PATH in the build driver, or include "
                  "$ENV{SPARKBAKE_SOURCES_CMAKE} in its toolchain file (a patch)")
    return what, remedy


def _why(output: str, source: Fetched) -> str:
    locked = source.locked
    if WRAPPER_MARK not in output:
        return ("CMake ran without the builder's cmake (called by another path) and with a "
                "toolchain file of its own, which takes the place of CMAKE_TOOLCHAIN_FILE")
    if locked.form == "populate":
        given = ", ".join(locked.env) or "none is read before it"
        return ("a FetchContent_Populate with its own download details ignores "
                f"FETCHCONTENT_SOURCE_DIR_*, and the upstream's own variables ({given}) were set")
    return ("the cache entries were pre-loaded, and the project overrode "
            f"FETCHCONTENT_FULLY_DISCONNECTED or FETCHCONTENT_SOURCE_DIR_{locked.name.upper()}")
