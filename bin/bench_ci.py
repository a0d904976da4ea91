"""CI's time: `python bin/bench_ci.py` (`nox -s bench-ci`).

A clean clone of this repository's HEAD runs `CI=true bash .ci/run`, traced (`bash -x`
with a clock in PS4), so that each of its steps gets its own time; then, with --sessions,
each nox session that a landing leaves out (the `required(SESSION)` tests), timed one after
the other in the same clone. With --cold the engine's unused images are removed first
(`docker image prune --all`: every image no container uses, sparkbake's or not) and the
run gets a host cache of its own, as on a fresh machine. Writes JSON with the machine it
ran on; docs/how-to/develop.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import _machine

__all__ = ["kept_sessions", "main", "step_times"]

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "build" / "bench-ci"  # each run's output
SESSIONS = ("prove-release", "prove-faults", "prove-compile-cache", "repro-builds",
            "repro-one-step", "prove-arm64")  # the longest last; repro-vllm: hours here
# a command of .ci/run, sourced by the traced shell: PS4's "++++" one level in
TRACE = re.compile(r"^\+{5} (?P<clock>\d+\.\d+) (?P<command>.*)$")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bin/bench_ci.py", description=__doc__)
    parser.add_argument("--cold", action="store_true",
                        help="remove the engine's unused images first, and use a new host cache")
    parser.add_argument("--sessions", nargs="*", default=None, metavar="SESSION",
                        help=f"also time these sessions (none given: {', '.join(SESSIONS)})")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "ci.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sparkbake-ci.") as scratch:
        clone = Path(scratch) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        env = {**_outside_venv(os.environ), "CI": "true"}
        if args.cold:
            subprocess.run(["docker", "image", "prune", "--all", "--force"], check=True,
                           stdout=subprocess.DEVNULL)
            env["SPARKBAKE_CACHE"] = str(Path(scratch) / "host-cache")
        LOGS.mkdir(parents=True, exist_ok=True)
        total, steps = _ci_run(clone, env, LOGS / "ci.log")
        timed = {name.replace("-", "_"): {**_session(clone, env, name), "commit": commit}
                 for name in (SESSIONS if args.sessions == [] else args.sessions or ())}
    earlier = json.loads(args.out.read_text()) if args.out.is_file() else {}
    sessions = kept_sessions(earlier, timed)
    result: dict[str, Any] = {
        "benchmark": "a clean clone's `CI=true bash .ci/run`, step by step, then the "
                     "sessions a landing leaves out",
        "commit": commit, "cold": args.cold,
        "seconds": {"total": round(total), "minutes": round(total / 60, 1), "steps": steps},
        "sessions": sessions, "machine": _machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["seconds"], indent=2))
    return 0


def _ci_run(clone: Path, env: dict[str, str], log: Path) -> tuple[float, list[dict[str, Any]]]:
    """.ci/run traced: its time, and each step's (a command of the script itself). PS4 is
    set inside the shell: bash run as root takes none from the environment."""
    traced = 'PS4="++++ \\$(date +%s.%N) "; set -x; source .ci/run'
    start = time.monotonic()
    with log.open("w") as out:
        ran = subprocess.run(["bash", "-c", traced, ".ci/run"], cwd=clone, env=env,
                             stdout=out, stderr=subprocess.STDOUT, check=False)
    total = time.monotonic() - start
    text = log.read_text(errors="replace")
    if ran.returncode != 0:
        sys.exit(f".ci/run failed (exit {ran.returncode}):\n" + "\n".join(text.splitlines()[-30:]))
    return total, step_times(text, time.time())


def kept_sessions(earlier: dict[str, Any], timed: dict[str, Any]) -> dict[str, Any]:
    """The sessions timed now, and those an earlier run timed that this one did not, each
    with the commit it was timed at (a session takes up to half an hour: one is timed
    again when its area changes)."""
    kept = {name: {**entry, "commit": entry.get("commit", earlier.get("commit"))}
            for name, entry in earlier.get("sessions", {}).items()}
    return {**kept, **timed}


def step_times(trace: str, end: float) -> list[dict[str, Any]]:
    """Each traced command of .ci/run itself (not a sub-shell's) and the seconds until the
    next one, or until `end`."""
    marks = [(float(m["clock"]), m["command"]) for m in map(TRACE.match, trace.splitlines())
             if m and not m["command"].startswith(("set ", "cd "))]
    return [{"command": command, "seconds": round((marks[i + 1][0] if i + 1 < len(marks)
                                                   else end) - clock)}
            for i, (clock, command) in enumerate(marks)]


def _outside_venv(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment without the virtual environment this runs in (nox's session), so
    that .ci/run's `python3 -m nox` is the host's, as in CI."""
    venv = environ.get("VIRTUAL_ENV")
    env = {k: v for k, v in environ.items() if k != "VIRTUAL_ENV"}
    if venv:
        env["PATH"] = os.pathsep.join(p for p in environ.get("PATH", "").split(os.pathsep)
                                      if p != str(Path(venv) / "bin"))
    return env


def _session(clone: Path, env: dict[str, str], name: str) -> dict[str, Any]:
    """One nox session in the clone: its minutes and whether it passed (its output in
    build/bench-ci/NAME.log)."""
    log = LOGS / f"{name}.log"
    start = time.monotonic()
    with log.open("w") as out:
        ran = subprocess.run(["python3", "-m", "nox", "-s", name], cwd=clone, env=env,
                             stdout=out, stderr=subprocess.STDOUT, check=False)
    minutes = round((time.monotonic() - start) / 60, 1)
    print(f"{name}: {'passed' if ran.returncode == 0 else 'FAILED'} in {minutes} min ({log})")
    return {"minutes": minutes, "passed": ran.returncode == 0}


if __name__ == "__main__":
    sys.exit(main())
