"""Write benchmarks/device-smoke.json from device smoke runs: each record as
`python -m sparkbake.smoke.oci_runtime BUNDLE --out RECORD` wrote it on the GPU machine, kept
whole under benchmarks/device-smoke/, and a summary of the bundles and the GPU checks for the
docs to quote.

Usage: device_smoke_summary.py --where TEXT BUNDLE RECORD [BUNDLE RECORD ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

from sparkbake.smoke.checks import GPU_CHECKS
from sparkbake.smoke.device_bundle import BUNDLE_FILE

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
MIB = 1024 * 1024


def bundle_facts(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        source = tar.extractfile(BUNDLE_FILE)
        if source is None:
            raise SystemExit(f"{archive}: no {BUNDLE_FILE}")
        about: dict[str, Any] = json.loads(source.read())
    return {"bundle_mib": round(archive.stat().st_size / MIB, 1),
            "root_files": about["root_files"], "image_files": about["image_files"],
            "root_mib": round(about["root_bytes"] / MIB),
            "image_mib": round(about["image_bytes"] / MIB)}


def summary(where: str, pairs: list[tuple[Path, Path]]) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmark": "device bundles run in runc on a GPU machine without a "
                           "container engine (sparkbake device-bundle TAG there, python -m "
                           "sparkbake.smoke.oci_runtime BUNDLE on the device)", "where": where}
    for archive, record_path in pairs:
        record = json.loads(record_path.read_text())
        smoke = record["smoke"]
        out["device"] = {"gpu": ", ".join(record["devices"]), "driver": record["driver"],
                         "runtime": record["runtime"]}
        checks = {c["name"]: c for c in smoke["checks"]}
        out[smoke["tag"]] = {
            **bundle_facts(archive), "image_id": smoke["image_id"], "passed": smoke["passed"],
            **{name: f"{checks[name]['status']}: {checks[name]['detail']}"
               for name in sorted(GPU_CHECKS)}}
        (BENCHMARKS / "device-smoke").mkdir(exist_ok=True)
        shutil.copyfile(record_path, BENCHMARKS / "device-smoke" / f"{smoke['tag']}.json")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--where", required=True, help="the machine the records come from")
    parser.add_argument("pairs", nargs="+", type=Path, metavar="BUNDLE RECORD")
    args = parser.parse_args()
    if len(args.pairs) % 2:
        parser.error("give each bundle with its record")
    pairs = list(zip(args.pairs[::2], args.pairs[1::2], strict=True))
    (BENCHMARKS / "device-smoke.json").write_text(
        json.dumps(summary(args.where, pairs), indent=2) + "\n")


if __name__ == "__main__":
    main()
