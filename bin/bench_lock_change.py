"""Benchmark of a runtime lock change: `python bin/bench_lock_change.py`
(`nox -s bench-lock-change`).

In a copy of the project (as bench-cold's: wheels/ as hard links, so nothing is compiled
again) and its own build/, with the embedded registry: build-image and publish the tag; then
move one package of its runtime lock to another version (--move NAME==VERSION, with the hash
of that version's wheel on the package index), and build-image and publish again. What the
second publish sent, as a share of the runtime packages' bytes (the issue's target: moving a
package of the smallest group sends at most a quarter), which layers changed, and the second
bake's steps. Writes JSON with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench import _machine
from bench_cold import LAYER_STEP, RUNTIME_LAYER, _steps, project_copy
from bench_incremental import _build_and_publish, _kept

from sparkbake.bake import venvgroups
from sparkbake.config import versions as config_mod
from sparkbake.console.display import Console
from sparkbake.hashing import file_sha256
from sparkbake.lock import pins, wheelhouse
from sparkbake.oci import local_registry

__all__ = ["main", "moved_lock"]

WHEELHOUSE_STEP = "wheelhouse for "  # lock/wheelhouse's step: "wheelhouse for <lock>"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bin/bench_lock_change.py",
                                     description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("versions.yaml"))
    parser.add_argument("--tag", default="production-3.73-vision-seeded")
    parser.add_argument("--move", default="idna==3.19", metavar="NAME==VERSION",
                        help="the runtime lock's package to move, and its new version")
    parser.add_argument("--port", type=int, default=5056, help="the embedded registry's port")
    parser.add_argument("--work", type=Path, default=Path("build/bench-lock-change"))
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/lock-change-<tag>.json")
    args = parser.parse_args(argv)
    name, _, version = args.move.partition("==")
    if not name or not version:
        parser.error(f"--move {args.move!r}: write NAME==VERSION, e.g. idna==3.19")
    root = args.config.resolve().parent
    loaded = project_copy(root, args.work.resolve())
    tag = loaded.tag(args.tag)
    lock = pins.runtime_lock_path(loaded, tag)
    if lock is None or not lock.is_file():
        raise SystemExit(f"bench-lock-change: {tag.name} has no runtime lock to change")
    local_registry.start(loaded, args.port)
    try:
        before = _build_and_publish(loaded, tag, args.port)
        old = moved_lock(lock, name, version, _wheel_sha256(name, version, tag))
        after = _build_and_publish(loaded, tag, args.port)
    finally:
        local_registry.stop(loaded, console=Console(dict(os.environ)))
    runtime_bytes = sum(layer["size"] for layer in after["layers"]
                        if RUNTIME_LAYER in layer["what"])
    steps = _steps(loaded.build_dir / "logs" / tag.name / "bake.log")
    result = {
        "benchmark": "build-image and publish after one package of the runtime lock moves",
        "tag": tag.name, "moved": {"from": old, "to": args.move,
                                   "group": venvgroups.group_of(name).title},
        "before": before, "after": after,
        "layers_kept": _kept(before["layers"], after["layers"]),
        "runtime_bytes": runtime_bytes,
        "sent_share_of_runtime": round(after["publish"]["bytes_sent"] / runtime_bytes, 4),
        "after_wheelhouse_s": next((seconds for step, seconds in steps.items()
                                    if step.startswith(WHEELHOUSE_STEP)), None),
        "after_bake_steps_s": {step: seconds for step, seconds in steps.items()
                               if not step.startswith(LAYER_STEP)},
        "machine": _machine(),
    }
    out = args.out or root / "benchmarks" / f"lock-change-{tag.name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items()
                      if k not in ("machine", "before", "after")}, indent=2))
    return 0


def moved_lock(lock: Path, name: str, version: str, sha256: str) -> str:
    """Pin name at version with the one hash sha256 in lock (its lines as `uv pip compile`
    writes them); the old pin, e.g. `idna==3.20`."""
    block = re.compile(rf"(?im)^({re.escape(name)}==\S+)( \\\n    --hash=sha256:[0-9a-f]{{64}})+"
                       r"$")
    text = lock.read_text()
    found = block.search(text)
    if found is None:
        raise SystemExit(f"bench-lock-change: {lock.name} pins no {name}")
    lock.write_text(text[:found.start()] + f"{name}=={version} \\\n    --hash=sha256:{sha256}"
                    + text[found.end():])
    return found.group(1)


def _wheel_sha256(name: str, version: str, tag: config_mod.Tag) -> str:
    """The sha256 of name==version's wheel for the tag's runtime, downloaded from the
    configured package index into a scratch folder."""
    platforms = [f"--platform={p}" for p in wheelhouse.platform_tags(tag.platform)]
    with tempfile.TemporaryDirectory(prefix="bench-lock-change.") as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", f"--python-version={tag.runtime.python or ''}",
                        "--implementation=cp", *platforms, "--dest", scratch,
                        f"{name}=={version}"], check=True)
        wheels = sorted(Path(scratch).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"bench-lock-change: {name}=={version}: {len(wheels)} wheels")
        return file_sha256(wheels[0])


if __name__ == "__main__":
    sys.exit(main())
