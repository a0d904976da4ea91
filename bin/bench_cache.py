"""Benchmark of the compile cache: `python bin/bench_cache.py` (`nox -s bench-cache`).

Measures, in one run: the fixture's wheels stage (its one CUDA kernel) cold (an empty local
sccache), with a warm local sccache, and with a warm Redis cache from a fresh builder
container (a real redis-server started here); then nvcc on one real vLLM kernel source
(csrc/fp32_router_gemm.cu of the fetched vLLM tree: CUDA headers only) for `12.1a` alone
and for vLLM's default CUDA 13 arch list. Writes JSON with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import _machine

from sparkbake import bases, planning
from sparkbake.__main__ import main as cli
from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.fetch import upstream_tree
from sparkbake.lock import pins
from sparkbake.oci.docker_engine import bridge_gateway, connect, run_container
from sparkbake.wheels import container_build
from sparkbake.wheels.report import REPORT, WheelsReport, read_report

__all__ = ["main"]

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data"
KERNEL = "csrc/fp32_router_gemm.cu"
# vLLM 0.33.0 CMakeLists.txt, CUDA_SUPPORTED_ARCHS for 13.0 <= nvcc < 13.4
VLLM_CUDA13_ARCHS = ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    result: dict[str, Any] = {"benchmark": "compile cache (sccache) and kernel arch list"}
    with _redis(args.redis_port, _fixture_base(work)) as url:
        result["fixture"] = _fixture(work, url, args.runs)
    if not args.skip_kernel:
        result["vllm_kernel"] = _vllm_kernel(work, args.config.resolve(), args.upstream)
    result["machine"] = _machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python bin/bench_cache.py", description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("versions.yaml"))
    parser.add_argument("--upstream", default="vllm-0.33.0", help="a PyPI upstream key")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--redis-port", type=int, default=16380)
    parser.add_argument("--skip-kernel", action="store_true", help="the fixture part only")
    parser.add_argument("--work", type=Path, default=Path("build/bench-cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/compile-cache.json"))
    return parser


def _fixture_base(work: Path) -> str:
    """The fixture's base image: a container of it tells the bridge's gateway address."""
    tag = config_mod.load(FIXTURE / "versions.yaml").tag("fixture")
    return bases.ensure(connect(settings=Settings.of_process()), tag.builder, tag.platform, work,
                        Settings.of_process(), console=Console(dict(os.environ))).ref


@contextmanager
def _redis(port: int, image: str) -> Iterator[str]:
    """redis-server on the Docker bridge's gateway address (builders reach it through their
    relay), stopped at the end."""
    gateway = bridge_gateway(connect(settings=Settings.of_process()), image)
    server = subprocess.Popen(["redis-server", "--bind", gateway, "--port", str(port),
                               "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                              stdout=subprocess.DEVNULL)
    try:
        time.sleep(1)
        yield f"redis://{gateway}:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _fixture(work: Path, redis: str, runs: int) -> dict[str, Any]:
    """Each sample: a fresh copy of the fixture project, its wheels stage timed (a new
    builder container; the builder image already made)."""
    samples: dict[str, list[float]] = {"cold_s": [], "warm_local_s": [], "warm_redis_s": []}
    hits: dict[str, list[int]] = {name: [] for name in samples}
    _wheels(work / "prime", {"SPARKBAKE_COMPILE_CACHE": "off"})  # builder image made
    for run in range(runs):
        local = work / f"cache-{run}"
        redis_db = f"{redis[:-1]}{run + 1}"  # an empty database per run
        _wheels(work / f"fill-{run}", {"SPARKBAKE_COMPILE_CACHE": redis_db,
                                       "SPARKBAKE_CACHE": str(work / "unused")})
        for name, env in (("cold_s", {"SPARKBAKE_CACHE": str(local)}),
                          ("warm_local_s", {"SPARKBAKE_CACHE": str(local)}),
                          ("warm_redis_s", {"SPARKBAKE_COMPILE_CACHE": redis_db,
                                            "SPARKBAKE_CACHE": str(work / "unused")})):
            seconds, report = _wheels(work / f"{name}-{run}", env)
            samples[name].append(seconds)
            assert report.compile_cache is not None  # a build in the builder records it
            hits[name].append(report.compile_cache.stats["hits"])
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {"what": "the fixture tag's wheels stage (one nvcc compile of csrc/scale.cu for "
                    "sm_121a, the link, the wheel), a fresh builder container each",
            "runs": runs, "results": {name: {"median": round(medians[name], 2),
                                             "samples": [round(x, 2) for x in values],
                                             "sccache_hits": hits[name]}
                                      for name, values in samples.items()},
            "cold_to_warm_local_ratio": round(medians["cold_s"] / medians["warm_local_s"], 2),
            "cold_to_warm_redis_ratio": round(medians["cold_s"] / medians["warm_redis_s"], 2)}


def _wheels(project: Path, env: dict[str, str]) -> tuple[float, WheelsReport]:
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "wheels"))
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        start = time.perf_counter()
        assert cli(["--config", str(project / "versions.yaml"), "wheels", "fixture"]) == 0
        seconds = time.perf_counter() - start
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return seconds, read_report(next((project / "wheels").glob(f"*/{REPORT}")).parent)


def _vllm_kernel(work: Path, config_path: Path, upstream_key: str) -> dict[str, Any]:
    """nvcc -c of one vLLM source in the fixture's builder, for 12.1a and the default list."""
    config = config_mod.load(config_path)
    upstream = config.upstreams[upstream_key]
    tag = next(t for t in config.tags.values() if t.upstream == upstream)
    settings = Settings.of_process()
    fetch_key = planning.make(config, tag).fetch_key
    tree = upstream_tree.fetch(upstream, config.build_dir / "sources" / fetch_key, settings,
                               console=Console(dict(os.environ)))
    fixture = config_mod.load(FIXTURE / "versions.yaml")
    ftag = fixture.tag("fixture")
    client = connect(settings=Settings.of_process())
    base = bases.ensure(client, ftag.builder, ftag.platform, work, settings,
                        console=Console(dict(os.environ)))
    builder = container_build.builder_image(client, base,
                                            pins.require_lock(fixture, ftag,
                                                              settings=Settings.of_process()),
                                       settings,
                                   work, console=Console(dict(os.environ)))
    threads = os.cpu_count() or 1
    timed = {}
    for name, arches in (("sm_121a_only", ("12.1a",)), ("vllm_default", VLLM_CUDA13_ARCHS)):
        timed[name] = _nvcc(client, builder, tree / "csrc", arches, threads)
    return {"source": f"{KERNEL} of {upstream_key} (sdist sha256 {upstream.sha256[:12]})"
            if isinstance(upstream, config_mod.PypiUpstream) else f"{KERNEL} of {upstream_key}",
            "builder": builder,
            "nvcc": f"-O3 -std=c++17 -c --threads {threads}, one -gencode per arch "
                    "(sm_XY; compute_XY PTX for the last, as CMake's default)",
            "vllm_default_archs": list(VLLM_CUDA13_ARCHS), "results": timed,
            "default_to_121a_ratio": round(timed["vllm_default"]["seconds"]
                                           / timed["sm_121a_only"]["seconds"], 2)}


def _nvcc(client: Any, builder: str, csrc: Path, arches: Sequence[str],
          threads: int) -> dict[str, Any]:
    numbers = [a.replace(".", "") for a in arches]
    gencode = [f"-gencode=arch=compute_{n},code=sm_{n}" for n in numbers]
    gencode.append(f"-gencode=arch=compute_{numbers[-1]},code=compute_{numbers[-1]}")
    script = ("start=$(date +%s.%N); nvcc -O3 -std=c++17 -c -Xcompiler -fPIC "
              f"--threads {threads} {' '.join(gencode)} /csrc/{Path(KERNEL).name} "
              "-o /tmp/k.o && end=$(date +%s.%N) && "
              "echo SECONDS=$(echo \"$end - $start\" | bc -l 2>/dev/null || "
              "python3 -c \"print($end - $start)\") && stat -c SIZE=%s /tmp/k.o")
    result = run_container(client, builder, ["-c", script], network=False, quiet=True,
                           volumes={str(csrc): {"bind": "/csrc", "mode": "ro"}},
                           entrypoint="bash")
    values = dict(line.split("=", 1) for line in result.output.splitlines()
                  if line.startswith(("SECONDS=", "SIZE=")))
    if result.exit_code != 0 or "SECONDS" not in values:
        raise RuntimeError(f"nvcc failed for {arches}: {result.tail()}")
    return {"arches": list(arches), "seconds": round(float(values["SECONDS"]), 1),
            "object_bytes": int(values["SIZE"])}


if __name__ == "__main__":
    sys.exit(main())
