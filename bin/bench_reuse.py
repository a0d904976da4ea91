"""Benchmark of kernel reuse: `python bin/bench_reuse.py` (`nox -s bench-reuse`).

Measures, in one run and in fresh work folders (the builder images made beforehand): the
wheels stage of a real vLLM tag whose kernel key is cached (the repository's
vllm-reuse-sm90: the four production series, a Python-only change, built around the cached
kernels), and the wheels stage of the fixture tag compiling its CUDA kernel with no cache at
all (SPARKBAKE_COMPILE_CACHE=off). Writes JSON with the machine it ran on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import _machine

from sparkbake import planning
from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.core.stages import Stage
from sparkbake.pipeline import stage_commands
from sparkbake.run import Run

__all__ = ["main"]

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bin/bench_reuse.py", description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("versions.yaml"))
    parser.add_argument("--tag", default="vllm-reuse-sm90", help="a tag with a seeded kernel")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("build/bench-reuse"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/kernel-reuse.json"))
    args = parser.parse_args(argv)
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    # no compile cache on either side
    settings = Settings.of_process().with_environ(SPARKBAKE_COMPILE_CACHE="off")
    loaded = config_mod.load(args.config.resolve())
    kernels = _prime(loaded, settings, args.tag, work / "prime")
    fixture = config_mod.load(FIXTURE / "versions.yaml")
    _timed(fixture, settings, "fixture", work / "prime-fixture")  # builder image made
    reuse, compile_ = [], []
    for run in range(args.runs):  # interleaved: the machine's load hits both alike
        reuse.append(_timed(loaded, settings, args.tag, work / f"reuse-{run}", kernels))
        compile_.append(_timed(fixture, settings, "fixture", work / f"fixture-{run}"))
    medians = statistics.median(reuse), statistics.median(compile_)
    result = {
        "benchmark": "wheels stage: Python-only change on real vLLM vs a full kernel compile",
        "reuse": {"tag": args.tag, "what": "vLLM 0.33.0 + the production series around the "
                  "seed's kernels: the release wheel with the series' Python files, made on the "
                  "host (no builder), and the SASS check",
                  "median_s": round(medians[0], 1), "samples_s": [round(x, 1) for x in reuse]},
        "compile": {"tag": "fixture", "what": "tinykern: one nvcc compile for sm_121a, the "
                    "link, the wheel, no compile cache",
                    "median_s": round(medians[1], 1),
                    "samples_s": [round(x, 1) for x in compile_]},
        "reuse_to_fixture_compile_ratio": round(medians[0] / medians[1], 2),
        "runs": args.runs, "machine": _machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    return 0


def _prime(loaded: config_mod.Config, settings: Settings, tag: str, work: Path) -> Path:
    """Build the tag once (builder image, seed): its kernel cache entry, to copy into runs."""
    _timed(loaded, settings, tag, work)
    plan = planning.make(loaded, loaded.tag(tag))
    return work / "wheels" / "kernels" / plan.kernel_key


def _timed(loaded: config_mod.Config, settings: Settings, tag: str, work: Path,
           kernels: Path | None = None) -> float:
    """The wheels stage of tag in a fresh work folder (kernels: a kernel entry put there)."""
    scratch = dataclasses.replace(loaded, work=work)
    plan = planning.make(scratch, scratch.tag(tag))
    if kernels is not None:
        shutil.copytree(kernels, scratch.wheels_dir / "kernels" / plan.kernel_key)
    stage_commands.run_until(Run.of(scratch, settings, Console(dict(os.environ))),
                             scratch.tag(tag), Stage.PATCH)  # not timed
    start = time.perf_counter()
    assert stage_commands.run_until(Run.of(scratch, settings, Console(dict(os.environ))),
                                    scratch.tag(tag), Stage.WHEELS) == 0
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
