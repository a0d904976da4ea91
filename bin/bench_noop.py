"""Benchmark of a no-op build: `python bin/bench_noop.py` (`nox -s bench-noop`).

`sparkbake build-image demo` once, so that every stage is cached, then timed again N times:
the CLI as a process (interpreter start-up included), the command's function in this
process (start-up and imports excluded), and `python -X importtime`'s total for
sparkbake.__main__. Also how many `pip config` processes a no-op starts. With --before-src,
the CLI and the import are timed from that source tree too, in the same run (e.g. the
main branch's src/, to compare a change). Writes JSON with the machine it ran on.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import _machine, _time

from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings, pip_config
from sparkbake.console import display
from sparkbake.console.display import Console
from sparkbake.core.stages import Stage
from sparkbake.pipeline import stage_commands
from sparkbake.run import Run

__all__ = ["main"]

IMPORT_TOTAL = re.compile(r"^import time:\s+\d+ \|\s+(?P<us>\d+) \| sparkbake\.__main__$", re.M)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bin/bench_noop.py", description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("versions.yaml"))
    parser.add_argument("--tag", default="demo")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--before-src", type=Path, default=None, metavar="DIR",
                        help="also time the CLI from this source tree (a src/ folder)")
    parser.add_argument("--out", type=Path,
                        default=Path("benchmarks/noop-build-image-demo.json"))
    args = parser.parse_args(argv)
    config = args.config.resolve()
    cli = [sys.executable, "-m", "sparkbake", "--config", str(config), "build-image", args.tag]
    subprocess.run(cli, check=True, capture_output=True)  # every stage cached from here on
    here = Path(config_mod.__file__).parents[2]  # the source tree imported here
    result: dict[str, Any] = {
        "benchmark": f"a no-op `sparkbake build-image {args.tag}` (every stage cached)",
        "tag": args.tag, "runs": args.runs,
        **_cli_and_import(cli, here, args.runs),
        "in_process_s": _stats(_in_process(config, args.tag, args.runs)),
        "pip_processes": _pip_processes(config, args.tag),
    }
    if args.before_src is not None:
        before = _cli_and_import(cli, args.before_src.resolve(), args.runs)
        result["before"] = {"commit": _commit(args.before_src), **before}
        # the same run's figures, so the ratio holds whatever else the machine was doing
        result["cli_median_to_before"] = round(
            result["cli_s"]["median"] / before["cli_s"]["median"], 3)
    result["machine"] = _machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    return 0


def _cli_and_import(cli: list[str], src: Path, runs: int) -> dict[str, Any]:
    """The CLI's no-op as a process, and the import of its __main__, from the source tree
    src; one sample of each in turn, so that the machine's load hits both alike."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    importing = [sys.executable, "-X", "importtime", "-c", "import sparkbake.__main__"]
    cli_s, import_s = [], []
    for _ in range(runs):
        cli_s.append(_time(lambda: subprocess.run(cli, check=True, capture_output=True,
                                                  env=env)))
        done = subprocess.run(importing, check=True, capture_output=True, text=True, env=env)
        found = IMPORT_TOTAL.search(done.stderr)
        assert found is not None, "no import time of sparkbake.__main__"
        import_s.append(int(found["us"]) / 1e6)
    return {"cli_s": _stats(cli_s), "import_s": _stats(import_s)}


def _in_process(config: Path, tag: str, runs: int) -> list[float]:
    """The no-op as main runs it after parsing its arguments: settings made, the console
    configured, versions.yaml loaded, the command; output kept from the terminal."""
    samples = []
    for _ in range(runs):
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            samples.append(_time(functools.partial(_no_op, config, tag)))
    return samples


def _no_op(config: Path, tag: str) -> None:
    settings = Settings.of_process()
    console = Console(settings.environ, display.Verbosity.NORMAL)  # as main makes it
    loaded = config_mod.load(config)
    _ok(stage_commands.run_until(Run.of(loaded, settings, console), loaded.tag(tag), Stage.BAKE))


def _pip_processes(config: Path, tag: str) -> int:
    """The `pip config` processes one no-op starts (each value of pip's asked is one)."""
    asked: list[str] = []

    def counted(name: str, environ: Mapping[str, str]) -> str | None:
        asked.append(name)
        return pip_config(name, environ)

    loaded = config_mod.load(config)
    settings = Settings(Settings.of_process().environ, ask_pip=counted)
    with contextlib.redirect_stderr(io.StringIO()):
        _ok(stage_commands.run_until(Run.of(loaded, settings, Console(settings.environ)),
                                     loaded.tag(tag), Stage.BAKE))
    return len(asked)


def _stats(samples: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), 3), "min": round(min(samples), 3),
            "samples": [round(s, 3) for s in samples]}


def _commit(src: Path) -> str:
    done = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def _ok(code: int) -> None:
    if code != 0:
        raise SystemExit("bench-noop: the build failed (run it alone to see why)")


if __name__ == "__main__":
    sys.exit(main())
