#!/opt/builder/bin/python3 -I
"""`sccache` in a builder that uses the compile farm: a compile that fails through the farm
is compiled again here.

sccache itself compiles here when a server is lost or the scheduler is down, but a compiler
killed on a server (as an out-of-memory kill would) fails the unit (exit 254). Such a unit
runs again through a second sccache server of this builder that knows no farm (its own
port, a config without `[dist]`), so it is made the way a build without the farm makes it.
A unit that fails here too fails the build as it would have anyway. sccache's own commands
(`--start-server`, `--show-stats`, ...) go to sccache unchanged. Standard library only:
mounted into the builder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LOCAL_PORT = "4228"  # the builder's farm-less sccache server (the build's own: 4226)
NO_FARM = Path("/tmp/sparkbake-no-farm.toml")


def main(args: list[str]) -> int:
    real = real_sccache()
    if not args or args[0].startswith("-") or os.environ.get("SPARKBAKE_FARM") != "1":
        os.execv(real, [real, *args])
    first = subprocess.run([real, *args], check=False).returncode
    if first == 0:
        return 0
    print(f"sparkbake sccache: {Path(args[0]).name} failed through the compile farm "
          f"(exit {first}); compiling it here", file=sys.stderr, flush=True)
    return subprocess.run([real, *args], env=local_environment(), check=False).returncode


def local_environment() -> dict[str, str]:
    """This builder's environment for an sccache server without the farm."""
    config = Path(os.environ.get("SPARKBAKE_NO_FARM_CONF", str(NO_FARM)))
    if not config.exists():
        config.write_text("# sparkbake: sccache without the compile farm\n")
    return {**os.environ, "SCCACHE_SERVER_PORT": LOCAL_PORT, "SCCACHE_CONF": str(config),
            "SPARKBAKE_FARM": "0"}


def real_sccache() -> str:
    """The first sccache on PATH after this one."""
    here = Path(__file__).resolve().parent
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "sccache"
        if candidate.resolve().parent != here and os.access(candidate, os.X_OK) \
                and candidate.is_file():
            return str(candidate)
    sys.exit("sparkbake sccache: no sccache on PATH after " + str(here))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
