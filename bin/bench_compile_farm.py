"""Benchmark of the compile farm: `python bin/bench_compile_farm.py` (`nox -s bench-farm`).

Measures the fixture's wheels stage (its one CUDA source for 12.1a) cold, in turns: compiled
locally, and through `compile-farm up --local 2` (two sccache-dist servers on this machine);
each run with its own empty compile cache. Records the share of compiles that ran on the
farm, the time the farm adds, and whether every wheel is the same bytes. Then models the
cold sm_121a production compile on four Sparks against one from per-unit figures measured
on a Spark-class compile (the formula is written into the JSON). Writes JSON with the
machine it ran on.

`--tag TAG` measures a vLLM tag of this project instead, in this project: a cold wheels stage
through the farm, then one here (about an hour each for cpu-3.73 on this project's 2-core
machine), each with an empty compile cache beside the user's other caches. Its figures are
added to the JSON beside the fixture's, under `vllm`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import _machine

from sparkbake.__main__ import main as cli
from sparkbake.config.settings import Settings

__all__ = ["main", "model"]

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data"
BENCHMARK = ("compile farm (sccache-dist, two local servers): the fixture, and a vLLM tag of "
             "the project (vllm)")
REMOTE = re.compile(r"^compiled remotely: (\d+) of (\d+)$", re.MULTILINE)
# The production compile's per-unit figures (sccache 0.16.0, sm_121a, measured on loopback
# with two servers and estimated from a sample of vLLM's units): what the model takes.
PRODUCTION: dict[str, float] = {"units": 383, "one_spark_min": 55.0, "local_share": 0.19,
              "remote_inflation_small": 1.0, "remote_inflation_cub": round(23.2 / 18.2, 3),
              "nodes": 4, "target_min": 15.0}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.tag:
        return _vllm_tag(args)
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    local, farm = _project(work / "local"), _project(work / "farm")
    _sparkbake(farm, work / "farm-cache", "compile-farm", "up", "--local", "2")
    try:
        runs = [(_run(local, work / "local-cache"), _run(farm, work / "farm-cache"))
                for _ in range(args.runs)]
    finally:
        _sparkbake(farm, work / "farm-cache", "compile-farm", "down")
    earlier = json.loads(args.out.read_text()) if args.out.is_file() else {}
    result = {"benchmark": BENCHMARK, "fixture": _fixture(runs),
              "production_model": model(PRODUCTION), "not_measured": "any run on Sparks",
              "machine": _machine()}
    if "vllm" in earlier:  # a vLLM tag's figures (--tag) stay until measured again
        result["vllm"] = earlier["vllm"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2, help="pairs of cold builds (default 2)")
    parser.add_argument("--work", type=Path, default=Path("build/bench-farm"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/compile-farm.json"))
    parser.add_argument("--tag", help="a vLLM tag of this project: cold through the farm, "
                        "then cold here")
    parser.add_argument("--skip-farm", action="store_true",
                        help="with --tag: the farm's figures from an earlier run's JSON")
    return parser


def _vllm_tag(args: argparse.Namespace) -> int:
    """Two cold wheels stages of the tag in this project, each with an empty compile cache:
    through `compile-farm up --local 2`, then here; the farm's figures are kept in the JSON
    before the second starts (`--skip-farm` takes them from there)."""
    project, work = Path.cwd(), args.work.resolve()
    # the user's cache, read before _sparkbake points SPARKBAKE_CACHE at a cold one
    users = Settings.of_process().cache_dir
    result = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if args.skip_farm:
        if result.get("vllm", {}).get("tag") != args.tag:
            sys.exit(f"--skip-farm: {args.out} has no farm figures of {args.tag}")
        farm = result["vllm"]["farm"]
    else:
        cache = _cold_compile_cache(users, work / "cache")
        _sparkbake(project, cache, "compile-farm", "up", "--local", "2")
        try:
            farm = _tag_wheels(project, cache, args.tag)
        finally:
            _sparkbake(project, cache, "compile-farm", "down")
        result["vllm"] = {"tag": args.tag, "farm": farm, "machine": _machine()}
        result["benchmark"] = BENCHMARK
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    # the farm's wheels and kept kernels out of the way, so that the same keys compile again
    moved = work / "farm-wheels"
    shutil.rmtree(moved, ignore_errors=True)
    moved.mkdir(parents=True)
    shutil.move(project / "wheels" / farm["wheels_key"], moved / "wheels")
    shutil.move(project / "wheels" / "kernels" / farm["kernels_key"], moved / "kernels")
    local = _tag_wheels(project, _cold_compile_cache(users, work / "cache"), args.tag)
    shutil.rmtree(moved)
    if local["remote"] or local["compile_cache"].get("misses", 0) < farm["compiled"]:
        sys.exit(f"the local build of {args.tag} was not cold: {local}")
    remote, compiled = farm["remote"], farm["compiled"]
    result["vllm"] = {
        "tag": args.tag, "farm": farm, "local": local,
        "compiled_remotely": f"{remote} of {compiled}",
        "share_remote": round(remote / compiled, 3) if compiled else None,
        "ratio_farm_to_local": round(farm["seconds"] / local["seconds"], 3),
        "farm_minus_local_per_unit_s":
            round((farm["seconds"] - local["seconds"]) / compiled, 2) if compiled else None,
        "identical": {"wheels": farm["wheels"] == local["wheels"],
                      "libraries": farm["libraries"] == local["libraries"]},
        "note": "two servers on the build's own two cores, and MAX_JOBS counting their slots: "
                "not a speed-up to expect on Sparks, but the share and the cost of sending",
        "machine": _machine()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["vllm"], indent=2))
    return 0


def _tag_wheels(project: Path, cache: Path, tag: str) -> dict[str, Any]:
    """One wheels stage of the tag (cold: its key's wheels absent, the cache empty)."""
    start = time.monotonic()
    _sparkbake(project, cache, "wheels", tag)
    seconds = round(time.monotonic() - start, 1)
    found = REMOTE.search((project / "build" / "logs" / tag / "wheels.log").read_text())
    record = max((project / "wheels").glob("*/wheels.json"), key=lambda p: p.stat().st_mtime)
    report = json.loads(record.read_text())
    return {"seconds": seconds, "wheels_key": record.parent.name,
            "kernels_key": report["kernels"]["key"],
            "remote": int(found[1]) if found else 0, "compiled": int(found[2]) if found else 0,
            "wheels": sorted(wheel["sha256"] for wheel in report["wheels"]),
            "libraries": sorted(f"{kernel['path']} {kernel['sha256']}"
                                for wheel in report["wheels"]
                                for kernel in wheel.get("kernels", ())),
            "compile_cache": report.get("compile_cache", {}).get("stats", {})}


def _cold_compile_cache(real: Path, work: Path) -> Path:
    """A host cache folder whose compile cache is empty and whose other entries (base
    layers, bytecode, the registry's CA) are those of the cache folder real, linked."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for entry in real.iterdir() if real.is_dir() else ():
        if entry.name != "sccache":
            (work / entry.name).symlink_to(entry)
    return work


def _project(folder: Path) -> Path:
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("build", "wheels"))
    return folder


def _sparkbake(project: Path, cache: Path, *args: str) -> None:
    os.environ["SPARKBAKE_CACHE"] = str(cache)
    os.environ.pop("SPARKBAKE_COMPILE_CACHE", None)
    if cli(["--config", str(project / "versions.yaml"), *args]) != 0:
        sys.exit(f"sparkbake {' '.join(args)} failed in {project}")


def _run(project: Path, cache: Path) -> dict[str, Any]:
    """One cold wheels stage: no wheels, an empty compile cache."""
    shutil.rmtree(project / "wheels", ignore_errors=True)
    shutil.rmtree(cache / "sccache", ignore_errors=True)
    start = time.monotonic()
    _sparkbake(project, cache, "wheels", "fixture")
    seconds = round(time.monotonic() - start, 2)
    report = json.loads(next((project / "wheels").glob("*/wheels.json")).read_text())
    log = (project / "build" / "logs" / "fixture" / "wheels.log").read_text()
    found = REMOTE.search(log)
    return {"seconds": seconds, "remote": int(found[1]) if found else 0,
            "compiled": int(found[2]) if found else 0,
            "wheels": [wheel["sha256"] for wheel in report["wheels"]]}


def _fixture(runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    local = [pair[0]["seconds"] for pair in runs]
    farm = [pair[1]["seconds"] for pair in runs]
    remote = sum(pair[1]["remote"] for pair in runs)
    compiled = sum(pair[1]["compiled"] for pair in runs)
    wheels = {tuple(run["wheels"]) for pair in runs for run in pair}
    return {"runs": len(runs), "local_s": {"median": statistics.median(local), "all": local},
            "farm_s": {"median": statistics.median(farm), "all": farm},
            "compiled_remotely": f"{remote} of {compiled}",
            "share_remote": round(remote / compiled, 3) if compiled else None,
            "farm_minus_local_s": round(statistics.median(farm) - statistics.median(local), 2),
            "identical_wheels": len(wheels) == 1,
            "note": "the fixture has one CUDA source, whose local compile takes well under a "
                    "second: the difference is the farm's cost per build (the test compile, "
                    "sccache packaging nvcc's and gcc's toolchains for the servers once per "
                    "builder, the bridge), not a per-unit overhead"}


def model(figures: dict[str, float]) -> dict[str, Any]:
    """The cold production compile on N Sparks: each unit's local share l runs on the head;
    its remote share, slowed by the remote inflation k, spreads over every node's slots,
    the head's among them."""
    one, share, nodes = figures["one_spark_min"], figures["local_share"], figures["nodes"]

    def minutes(inflation: float) -> float:
        return round(max(one * share, one * (share + (1 - share) * inflation) / nodes), 1)

    best = minutes(figures["remote_inflation_small"])
    worst = minutes(figures["remote_inflation_cub"])
    return {"formula": "T_N = max(T_1 * l, T_1 * (l + (1 - l) * k) / N)",
            "inputs": {"units": int(figures["units"]), "T_1_min": one, "l": share,
                       "k_small_units": figures["remote_inflation_small"],
                       "k_cub_units": figures["remote_inflation_cub"], "N": int(nodes)},
            "four_sparks_min": {"small_units": best, "cub_units": worst},
            "one_spark_min": one, "target_min": figures["target_min"],
            "meets_target": {"small_units": best <= figures["target_min"],
                             "cub_units": worst <= figures["target_min"]}}


if __name__ == "__main__":
    sys.exit(main())
