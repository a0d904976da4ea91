#!/opt/builder/bin/python3 -I
"""`cmake` in the sparkbake builder: the real cmake, with the sources lock in every configure.

A build driver runs CMake with its own arguments: it may not forward CMAKE_ARGS, and it may
give its own toolchain file, which takes the place of CMAKE_TOOLCHAIN_FILE in the
environment. `-C <file>` pre-loads cache entries before the project is read, whatever else
the command line says, so every configure gets the lock's FETCHCONTENT_SOURCE_DIR_<NAME>
and FETCHCONTENT_FULLY_DISCONNECTED from SPARKBAKE_SOURCES_CMAKE (written by
build_wheels.py). Other modes (--build, --install, -E, -P, ...) go to cmake unchanged.
Standard library only: copied into the builder image.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# options that make cmake do something other than configure a build tree
NOT_CONFIGURE = frozenset({
    "--build", "--install", "--open", "-E", "-P", "-N", "--find-package", "--workflow",
    "--version", "-version", "--system-information", "-h", "-H", "--help", "-help", "-usage",
})
MARK = "sparkbake cmake: the sources lock pre-loaded"


def main(args: list[str]) -> int:
    real = real_cmake()
    cache = os.environ.get("SPARKBAKE_SOURCES_CMAKE", "")
    if cache and configures(args):
        print(f"{MARK} (-C {cache})", file=sys.stderr, flush=True)
        os.execv(real, [real, "-C", cache, *args])
    os.execv(real, [real, *args])
    return 127  # not reached: execv replaces this process


def configures(args: list[str]) -> bool:
    """Whether the command configures a build tree (cmake's default mode)."""
    return not any(arg in NOT_CONFIGURE or arg.startswith("--help") for arg in args)


def real_cmake() -> str:
    """The first cmake on PATH after this one."""
    here = Path(__file__).resolve().parent
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "cmake"
        if candidate.resolve().parent != here and os.access(candidate, os.X_OK) \
                and candidate.is_file():
            return str(candidate)
    sys.exit("sparkbake cmake: no cmake on PATH after " + str(here))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
