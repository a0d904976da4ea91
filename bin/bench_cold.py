"""Benchmark of the cold bake: `python bin/bench_cold.py` (`nox -s bench-cold`).

In a copy of the project (versions.yaml, patches/, locks/, and wheels/ as hard links, so
nothing is downloaded or compiled again) with its own build/ and base layer cache: the
tag's stages up to the wheels, then the bake from cold once per worker count (every
layer written and compressed, the base exported, the image loaded into an engine that
does not have it). Per layer: size, compress time (its bake step) per worker count; the
load time; the bake's speed-up from 1 to 2 workers. Writes JSON with the machine it ran on,
and beside it the last cold bake of bench-incremental (the single gzip stream) as before.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import _machine
from bench_incremental import _copy_project as copy_project
from bench_incremental import _layers

from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.core.stages import Stage
from sparkbake.oci import docker_engine, image_layout
from sparkbake.pipeline import stage_commands
from sparkbake.run import Run

__all__ = ["main", "project_copy"]

STEP_DONE = re.compile(r"^<== (?P<name>.+): done in (?P<seconds>[\d.]+)s$", re.M)
LAYER_STEP = "layer "  # venvlayers' step per layer written: "layer <its history line>"
LOAD_STEP = "load into the engine"
BASE_STEP = "base layers of "
RUNTIME_LAYER = ": runtime packages: "  # in a runtime group layer's history line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bin/bench_cold.py", description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("versions.yaml"))
    parser.add_argument("--tag", default="production-3.73-vision-seeded")
    parser.add_argument("--workers", default="1,2", help="compress worker counts, in order")
    parser.add_argument("--work", type=Path, default=Path("build/bench-cold"))
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/cold-<tag>.json")
    args = parser.parse_args(argv)
    root, work = args.config.resolve().parent, args.work.resolve()
    loaded = project_copy(root, work)
    tag = loaded.tag(args.tag)
    # the base layers' cache: cold too
    settings = Settings.of_process().with_environ(SPARKBAKE_CACHE=str(work / "cache"))
    start = time.perf_counter()
    _ok(stage_commands.run_until(Run.of(loaded, settings, Console(dict(os.environ))), tag,
                                 Stage.WHEELS))
    until_wheels = round(time.perf_counter() - start, 1)
    runs = {workers: _cold_bake(loaded, settings, tag, workers)
            for workers in (int(n) for n in args.workers.split(","))}
    result = {
        "benchmark": "the bake from cold (layers written, compressed and loaded), per worker "
                     "count",
        "tag": tag.name, "stages_until_wheels_s": until_wheels,
        "runs": {str(n): run for n, run in runs.items()},
        "speedup": _speedups(runs),
        "runtime_groups": _groups(runs[max(runs)]["layers"]),
        "before": _before(root, tag.name),
        "machine": _machine(),
    }
    out = args.out or root / "benchmarks" / f"cold-{tag.name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("machine", "runs")},
                     indent=2))
    return 0


def project_copy(root: Path, work: Path) -> config_mod.Config:
    """A fresh copy of the project at root under work/project (its wheels/ beside it as
    hard links), loaded with work as its work folder."""
    shutil.rmtree(work, ignore_errors=True)
    project = _copy_project(root, work / "project")
    return dataclasses.replace(config_mod.load(project / "versions.yaml"), work=work)


def _copy_project(root: Path, dest: Path) -> Path:
    """bench-incremental's copy of the project, with wheels/ beside it as hard links."""
    copy_project(root, dest)
    # the built wheels and the runtime wheelhouse as they are: the bake is what is measured
    shutil.copytree(root / "wheels", dest.parent / "wheels", copy_function=os.link,
                    ignore=shutil.ignore_patterns("*.lock"))
    return dest


def _cold_bake(loaded: config_mod.Config, settings: Settings, tag: config_mod.Tag,
               workers: int) -> dict[str, Any]:
    """One bake with nothing of it cached: no layer, no base export, no image in the engine."""
    for folder in ("oci", "layers", "contexts"):
        shutil.rmtree(loaded.build_dir / folder, ignore_errors=True)
    shutil.rmtree(settings.cache_dir, ignore_errors=True)
    client = docker_engine.connect(settings=Settings.of_process())
    if docker_engine.image_exists(client, tag.image_ref):
        client.images.remove(tag.image_ref, noprune=False)
    with_workers = settings.with_environ(SPARKBAKE_COMPRESS_WORKERS=str(workers))
    start = time.perf_counter()
    _ok(stage_commands.run_until(Run.of(loaded, with_workers, Console(dict(os.environ))), tag,
                                 Stage.BAKE))
    bake_s = round(time.perf_counter() - start, 1)
    steps = _steps(loaded.build_dir / "logs" / tag.name / "bake.log")
    layers = _layers(loaded, tag)
    for layer in layers:
        layer["compress_s"] = steps.get(LAYER_STEP + layer["what"])
    written = round(sum(layer["compress_s"] or 0 for layer in layers), 1)
    return {"workers": workers, "bake_s": bake_s, "layers_written_s": written,
            "base_export_s": next((s for n, s in steps.items() if n.startswith(BASE_STEP)),
                                  None),
            "load_s": steps.get(LOAD_STEP), "layers": layers,
            "digest": _manifest_digest(loaded, tag)}


def _steps(log: Path) -> dict[str, float]:
    """The bake log's finished steps: name -> seconds."""
    return {m["name"]: float(m["seconds"]) for m in STEP_DONE.finditer(log.read_text())}


def _manifest_digest(loaded: config_mod.Config, tag: config_mod.Tag) -> str:
    image = image_layout.Layout(loaded.build_dir / "oci",
                                console=Console(dict(os.environ))).find(tag.name)
    assert image is not None
    return image.digest


def _speedups(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """From the fewest workers to the most: the bake's, and the written layers' together."""
    if len(runs) < 2:
        return {}
    few, many = runs[min(runs)], runs[max(runs)]
    written = few["layers_written_s"], many["layers_written_s"]
    return {"workers": [min(runs), max(runs)],
            "bake": round(few["bake_s"] / many["bake_s"], 2),
            "layers_written": round(written[0] / written[1], 2) if written[1] else None,
            "same_digest": few["digest"] == many["digest"]}


def _groups(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """The runtime groups' layers: what a lock change in the smallest one re-pushes, as a
    share of all the runtime packages' bytes."""
    sizes = {layer["what"]: layer["size"] for layer in layers if RUNTIME_LAYER in layer["what"]}
    total = sum(sizes.values())
    return {"sizes": sizes, "bytes": total,
            "smallest_share": round(min(sizes.values()) / total, 4) if total else None}


def _before(root: Path, tag: str) -> dict[str, Any] | None:
    """The cold bake as bench-incremental last measured it (one gzip stream, level 6)."""
    path = root / "benchmarks" / f"incremental-{tag}.json"
    if not path.is_file():
        return None
    cold = json.loads(path.read_text())["cold"]
    return {"from": path.name, "bake_s": cold["bake_s"], "build_image_s": cold["build_image_s"],
            "layers": cold["layers"]}


def _ok(code: int) -> None:
    if code != 0:
        raise SystemExit("bench-cold: a stage failed (see above)")


if __name__ == "__main__":
    sys.exit(main())
