"""The command sessions' one environment: `nox -s plan -- TAG` and every other command
session run sparkbake from .nox/cli. It is made at first use, with sparkbake installed
editable (a change to the code needs no reinstall), and made again when pyproject.toml
changes; after that a session adds only nox's own start to its command.

    python bin/cli_session.py COMMAND [ARGS...]
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = ROOT / ".nox" / "cli"
STAMP = ENV / "pyproject.sha256"  # the pyproject.toml the environment was made from


def wanted() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def ensure() -> Path:
    """.nox/cli with sparkbake in it, made once per pyproject.toml (one maker at a time)."""
    ENV.parent.mkdir(parents=True, exist_ok=True)
    with (ENV.parent / "cli.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not STAMP.is_file() or STAMP.read_text() != wanted():
            print(f"nox: making the command sessions' environment {ENV.relative_to(ROOT)} "
                  "(once per pyproject.toml)", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(ENV)], check=True)
            subprocess.run([str(ENV / "bin" / "python"), "-m", "pip", "install", "--quiet",
                            "--editable", str(ROOT)], check=True)
            STAMP.write_text(wanted())  # last: an interrupted make is made again
    return ENV / "bin" / "sparkbake"


def main(argv: list[str]) -> None:
    program = ensure()
    os.execv(program, [str(program), *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
