"""Benchmark of the command sessions: `python bin/bench_sessions.py` (`nox -s bench-sessions`).

Every command session runs sparkbake from one shared environment (.nox/cli,
bin/cli_session.py). This times, in one run: making that environment from nothing, then
`nox -s plan -- TAG` and `sparkbake plan TAG` in turns, N times each, and writes what a
session adds to its command (the medians' difference and ratio) with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import _machine, _time

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bin/bench_sessions.py", description=__doc__)
    parser.add_argument("--tag", default="demo")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/command-sessions.json"))
    args = parser.parse_args(argv)
    session = [sys.executable, "-m", "nox", "-s", "plan", "--", args.tag]
    shutil.rmtree(ROOT / ".nox" / "cli", ignore_errors=True)
    first = _time(lambda: _quiet(session))
    program = ROOT / ".nox" / "cli" / "bin" / "sparkbake"
    direct = [str(program), "plan", args.tag]
    nox_s: list[float] = []
    cli_s: list[float] = []
    for _ in range(args.runs):  # in turns, so that the machine's noise falls on both
        nox_s.append(_time(lambda: _quiet(session)))
        cli_s.append(_time(lambda: _quiet(direct)))
    result: dict[str, Any] = {
        "benchmark": f"`nox -s plan -- {args.tag}` against `sparkbake plan {args.tag}`",
        "runs": args.runs, "first_session_s": round(first, 2),
        "session_median_s": round(statistics.median(nox_s), 3),
        "cli_median_s": round(statistics.median(cli_s), 3),
        "session_adds_s": round(statistics.median(nox_s) - statistics.median(cli_s), 3),
        "session_over_cli": round(statistics.median(nox_s) / statistics.median(cli_s), 2),
        "machine": _machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


def _quiet(command: list[str]) -> None:
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
