"""Benchmark of a Python-only change: `python bin/bench_incremental.py`
(`nox -s bench-incremental`).

In a copy of the project (versions.yaml, patches/, locks/) with its own build/ and wheels/:
a cold build-image and publish of a real vLLM tag to an embedded registry, then a one-line
change to one of its Python patches (an added comment line), and build-image and publish
again, --changes times (each a change more); the sample of median build-image time is
kept, with every sample's time. Times each stage, counts the image's layers that kept
their digest and the bytes each publish sent. Writes JSON with the machine it ran on.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import _machine

from sparkbake import planning
from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.core.stages import Stage
from sparkbake.oci import image_layout, local_registry
from sparkbake.pipeline import commands, stage_commands
from sparkbake.run import Run

__all__ = ["main"]

COPIED = ("versions.yaml", "patches", "locks")
# an added comment line of a Python file's hunk: changing it changes no line count
ADDED_COMMENT = re.compile(r"^\+(\s*)# (.+)$", re.M)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bin/bench_incremental.py",
                                     description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("versions.yaml"))
    parser.add_argument("--tag", default="production-3.73-vision-seeded")
    parser.add_argument("--port", type=int, default=5055, help="the embedded registry's port")
    parser.add_argument("--work", type=Path, default=Path("build/bench-incremental"))
    parser.add_argument("--changes", type=int, default=3,
                        help="one-line changes built one after another (the median is kept)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/incremental-<tag>.json")
    args = parser.parse_args(argv)
    if args.changes < 1:  # before the cold build, not after it
        parser.error("--changes must be at least 1")
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    project = _copy_project(args.config.resolve().parent, work / "project")
    loaded = dataclasses.replace(config_mod.load(project / "versions.yaml"), work=work)
    tag = loaded.tag(args.tag)
    local_registry.start(loaded, args.port)
    try:
        cold = _build_and_publish(loaded, tag, args.port)
        samples = []
        for _ in range(args.changes):
            changed = _change_a_python_patch(loaded, tag)
            loaded = config_mod_reload(loaded)
            samples.append(_build_and_publish(loaded, tag, args.port))
            if samples[-1]["keys"]["kernels"] != cold["keys"]["kernels"]:
                raise SystemExit(f"bench-incremental: the change to {changed} changed the "
                                 "kernel key: not a Python-only change")
    finally:
        local_registry.stop(loaded, console=Console(dict(os.environ)))
    warm = median_sample(samples)
    result = {
        "benchmark": "build-image and publish after a one-line change to a Python patch",
        "tag": tag.name, "changed": changed, "cold": cold, "after_change": warm,
        "after_change_build_image_s": [sample["build_image_s"] for sample in samples],
        "layers_kept": _kept(cold["layers"], warm["layers"]),
        "ratios": {"bake": _ratio(warm["bake_s"], cold["bake_s"]),
                   "wheels": _ratio(warm["wheels_s"], cold["wheels_s"]),
                   "bytes_sent": _ratio(warm["publish"].get("bytes_sent"),
                                        cold["publish"].get("bytes_sent"))},
        "machine": _machine(),
    }
    out = args.out or Path("benchmarks") / f"incremental-{tag.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    return 0


def median_sample(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The sample whose build-image time is the median (the lower one of an even count)."""
    if not samples:
        raise SystemExit("bench-incremental: --changes must be at least 1")
    ordered = sorted(samples, key=lambda sample: float(sample["build_image_s"]))
    return ordered[(len(ordered) - 1) // 2]


def config_mod_reload(loaded: config_mod.Config) -> config_mod.Config:
    """The project's versions.yaml read again: the patch's sha256 is part of the plan."""
    return dataclasses.replace(config_mod.load(loaded.path), work=loaded.work)


def _copy_project(root: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in COPIED:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, dest / name)
        else:
            shutil.copy(source, dest / name)
    return dest


def _build_and_publish(loaded: config_mod.Config, tag: config_mod.Tag,
                       port: int) -> dict[str, Any]:
    tag = loaded.tag(tag.name)
    settings = Settings.of_process()
    run = Run.of(loaded, settings, Console(settings.environ))
    timed: dict[str, Any] = {}
    steps = ((Stage.PATCH, "patch_s"), (Stage.WHEELS, "wheels_s"), (Stage.BAKE, "bake_s"))
    for stage, what in steps:
        timed[what] = _seconds(functools.partial(stage_commands.run_until, run, tag, stage))
    timed["publish_s"] = _seconds(
        lambda: commands.publish(run, tag, f"127.0.0.1:{port}", force=True,
                                 skip_smoke=True))  # smoke is not what is measured
    timed["build_image_s"] = round(timed["patch_s"] + timed["wheels_s"] + timed["bake_s"], 1)
    record = json.loads((loaded.build_dir / "releases" / f"{tag.name}.json").read_text())
    transfer = record["transfer"]
    timed["publish"] = {"digest": record["digest"], "bytes_sent": transfer["sent"]["bytes"],
                        "blobs_sent": transfer["sent"]["blobs"],
                        "blobs_present": transfer["present"]["blobs"]}
    plan = planning.make(loaded, tag)
    timed["keys"] = {"kernels": plan.kernel_key[:16], "wheels": plan.wheels_key[:16],
                     "bake": plan.inputs[:16]}
    timed["layers"] = _layers(loaded, tag)
    return timed


def _seconds(action: Callable[[], int]) -> float:
    start = time.perf_counter()
    if action() != 0:
        raise SystemExit("bench-incremental: a stage failed (see above)")
    return round(time.perf_counter() - start, 1)


def _layers(loaded: config_mod.Config, tag: config_mod.Tag) -> list[dict[str, Any]]:
    """The image's layers in build/oci: digest, size and what made it (its history)."""
    layout = image_layout.Layout(loaded.build_dir / "oci", console=Console(dict(os.environ)))
    image = layout.find(tag.name)
    assert image is not None
    manifest = layout.read_manifest_doc(image.digest)
    config = layout.read_config_doc(manifest["config"]["digest"])
    return [{"digest": layer["digest"], "size": layer["size"],
             "what": image_layout.made_by(config, index)}
            for index, layer in enumerate(manifest["layers"])]


def _change_a_python_patch(loaded: config_mod.Config, tag: config_mod.Tag) -> str:
    """Append a word to the first added comment line of a Python file in the tag's series."""
    for series in tag.series:
        for patch in sorted((loaded.patches_dir / series).glob("*.patch")):
            text = patch.read_text()
            for hunk in re.split(r"(?m)^diff --git ", text)[1:]:
                if not hunk.split("\n", 1)[0].endswith(".py"):
                    continue
                found = ADDED_COMMENT.search(hunk)
                if found:
                    line = found.group(0)
                    patch.write_text(text.replace(line, line + " (changed)", 1))
                    return f"{series}/{patch.name}: {line.strip()[:60]}"
    raise SystemExit(f"bench-incremental: no Python comment line to change in {tag.series}")


def _kept(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    same = {layer["digest"] for layer in before} & {layer["digest"] for layer in after}
    return {"kept": sum(layer["digest"] in same for layer in after), "of": len(after),
            "changed": [{"what": layer["what"], "size": layer["size"]}
                        for layer in after if layer["digest"] not in same]}


def _ratio(new: float | None, old: float | None) -> float | None:
    return round(new / old, 4) if new is not None and old else None


if __name__ == "__main__":
    sys.exit(main())
