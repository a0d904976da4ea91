"""Benchmark of the patch stage on the real vLLM tree: `python bin/bench.py`.

Measures, in one run and interleaved: a plain `cp -r` of the pristine tree; the patch stage
applying a 20-patch series (copy + apply + hash, the upstream commit already made); a
no-op re-run (cache hit) through the CLI. Writes JSON with the machine it ran on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sparkbake import planning
from sparkbake.__main__ import main as cli
from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.config.versions import PypiUpstream
from sparkbake.console.display import Console
from sparkbake.fetch import upstream_tree
from sparkbake.hashing import tree_hash
from sparkbake.patch import apply, gitwork
from sparkbake.series import exchange

__all__ = ["main"]

VERSIONS = """\
schema: 1
defaults: {{repository: localhost:5000/bench, platform: linux/amd64, cuda_arch: "12.1a",
            builder: debian, runtime: debian}}
bases:
  debian: {{debootstrap: {{suite: bookworm}}}}
upstreams:
  vllm: {{pypi: {{name: vllm, version: "{version}", sha256: "{sha256}"}}}}
tags:
  bench: {{upstream: vllm, series: [bench]}}
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    project = args.work.resolve() / "project"
    upstream = config_mod.load(args.config).upstreams[args.upstream]
    assert isinstance(upstream, PypiUpstream), "the bench needs a PyPI upstream"
    project.mkdir(parents=True, exist_ok=True)
    (project / "versions.yaml").write_text(VERSIONS.format(version=upstream.version,
                                                           sha256=upstream.sha256))
    config = config_mod.load(project / "versions.yaml")
    tag = config.tag("bench")
    fetch_key = planning.make(config, tag).fetch_key
    pristine = upstream_tree.fetch(tag.upstream, config.build_dir / "sources" / fetch_key,
                                   Settings.of_process(), console=Console(dict(os.environ)))
    with (args.work / "bench.log").open("w") as log, contextlib.redirect_stderr(log):
        result = _measure(config, pristine, args.patches, args.runs)
    result["upstream"] = f"{upstream.name} {upstream.version} (sdist sha256 {upstream.sha256})"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["results"], indent=2))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python bin/bench.py", description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("versions.yaml"))
    parser.add_argument("--upstream", default="vllm-0.33.0", help="a PyPI upstream key")
    parser.add_argument("--patches", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("build/bench"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/patch-apply.json"))
    return parser


def _measure(config: config_mod.Config, pristine: Path, count: int, runs: int) -> dict[str, Any]:
    shutil.rmtree(pristine.parent / "upstream.git", ignore_errors=True)  # measured afresh
    message = apply.upstream_message(config.tag("bench").upstream)
    first = _time(lambda: gitwork.upstream_repo(pristine, message,
                                                console=Console(dict(os.environ))))
    _make_series(config, pristine, pristine.parent / "upstream.git", count)
    samples = _runs(config, pristine, runs)
    samples["upstream_commit_once_s"] = [first]
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {"benchmark": "patch stage: copy + apply + hash of a 20-patch series",
            "method": "steps interleaved per run, os.sync() before each; apply_s has the "
                      "upstream commit made (upstream_commit_once_s: its one-time cost); "
                      "hash_s: the tree hash alone, a part of apply_s",
            "patches": count, "runs": runs, "tree": _tree_size(pristine),
            "results": {name: {"median": round(medians[name], 3),
                               "samples": [round(x, 3) for x in values]}
                        for name, values in samples.items()},
            "apply_to_cp_ratio": round(medians["apply_s"] / medians["cp_r_s"], 2),
            "apply_to_cp_ratio_per_run": [round(a / c, 2) for a, c in
                                          zip(samples["apply_s"], samples["cp_r_s"],
                                              strict=True)],
            "machine": _machine()}


def _runs(config: config_mod.Config, pristine: Path, runs: int) -> dict[str, list[float]]:
    plan = planning.make(config, config.tag("bench"))
    entry = config.build_dir / "patched" / plan.patch_key
    copy_target = config.build_dir / "cp-r"
    samples: dict[str, list[float]] = {"cp_r_s": [], "apply_s": [], "hash_s": [],
                                       "noop_in_process_s": [], "noop_command_s": []}
    for _ in range(runs):
        shutil.rmtree(copy_target, ignore_errors=True)
        samples["cp_r_s"].append(_time(lambda: _cp(pristine, copy_target)))
        shutil.rmtree(entry, ignore_errors=True)
        samples["apply_s"].append(_time(lambda: apply.apply(plan, pristine, entry,
                                                            console=Console(dict(os.environ)))))
        samples["hash_s"].append(_time(lambda: tree_hash(entry / "tree")))  # part of apply_s
        samples["noop_in_process_s"].append(_time(lambda: _cli(config.path)))
        samples["noop_command_s"].append(_time(lambda: _command(config.path)))
    shutil.rmtree(copy_target, ignore_errors=True)
    return samples


def _make_series(config: config_mod.Config, pristine: Path, upstream: Path, count: int) -> None:
    """count patches, one per Python file of the tree, each a one-line real edit."""
    files = sorted(str(p.relative_to(pristine)) for p in (pristine / "vllm").rglob("*.py")
                   if p.stat().st_size > 4000)
    chosen = files[:: max(1, len(files) // count)][:count]
    scratch = config.build_dir / "bench-series"
    shutil.rmtree(scratch, ignore_errors=True)
    repo = gitwork.work_tree(upstream, pristine, scratch, sparse=chosen,
                             console=Console(dict(os.environ)))
    for number, name in enumerate(chosen, start=1):
        lines = (scratch / name).read_text().splitlines(keepends=True)
        middle = len(lines) // 2
        lines.insert(middle, f"# sparkbake bench patch {number}: a local note\n")
        (scratch / name).write_text("".join(lines))
        repo.git("add", name)
        repo.commit(f"bench: note {number} in {name}\n\nWhat: one line. Why: the benchmark.\n")
    exchange.export(config, scratch, "bench", f"{gitwork.UPSTREAM_TAG}..HEAD",
                    console=Console(dict(os.environ)))
    shutil.rmtree(scratch)


def _cp(source: Path, dest: Path) -> None:
    subprocess.run(["cp", "-r", str(source), str(dest)], check=True)


def _cli(config: Path) -> None:
    assert cli(["--config", str(config), "patch", "bench"]) == 0


def _command(config: Path) -> None:
    """The same no-op as a new process, Python start-up included."""
    subprocess.run([sys.executable, "-m", "sparkbake", "--config", str(config), "patch", "bench"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _time(action: Callable[[], object]) -> float:
    os.sync()  # each step starts with no dirty pages left by the one before
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _tree_size(tree: Path) -> dict[str, int]:
    files = [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def _machine() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").is_file() else ""
    kib = next((int(line.split()[1]) for line in meminfo.splitlines()
                if line.startswith("MemTotal:")), 0)
    git = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False)
    return {"cores": os.cpu_count(), "memory_gib": round(kib / 2**20, 1),
            "python": platform.python_version(), "git": git.stdout.strip(),
            "platform": platform.platform(), "machine": platform.machine()}


if __name__ == "__main__":
    sys.exit(main())
