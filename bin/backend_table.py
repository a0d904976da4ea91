"""vLLM's verdicts on every backend, asked in a tag's image: `python bin/backend_table.py TAG`
(`nox -s backend-table -- TAG`).

Runs images/smoke_backends.py in a network-less container of the tag's built image, for the
tag's cuda_arch and declared model family, and writes the table into
images/backend-verdicts.json (under the image's vLLM version), where the preflight reads it
and the smoke check backend-capability holds it to what the image says. Build the image
first.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from sparkbake import resources
from sparkbake.config import versions
from sparkbake.config.platforms import Platform
from sparkbake.config.settings import Settings
from sparkbake.oci import docker_engine, emulation
from sparkbake.smoke import checks

__all__ = ["main", "merge"]

REPO = Path(__file__).resolve().parents[1]
VERDICTS = REPO / "images" / "backend-verdicts.json"
SCRIPT = "smoke_backends.py"
VERSION = ("import importlib.metadata as m; "
           "print(m.version('vllm').split('+', 1)[0])")


Table = dict[str, dict[str, str]]


def merge(runs: dict[str, dict[str, dict[str, Table]]], version: str, cuda_arch: str,
          model: str, table: Table) -> dict[str, dict[str, dict[str, Table]]]:
    """The verdicts with this table at [version][cuda_arch][model], the others kept."""
    merged = json.loads(json.dumps(runs))
    merged.setdefault(version, {}).setdefault(cuda_arch, {})[model] = table
    return dict(merged)


def ask(client: docker_engine.Client, image: str, platform: Platform,
        command: list[str]) -> str:
    files = {f"{checks.CHECKER_DIR}/{name}": resources.path(name).read_bytes()
             for name in checks.CHECKER_FILES}
    with emulation.cpu_sysfs(client, platform) as volumes:
        result = docker_engine.run_container(
            client, image, command, entrypoint=[checks.PYTHON_IN_IMAGE], copy_in=files,
            volumes=volumes, network=False)
    if result.exit_code != 0:
        sys.exit(f"backend_table: {image}: exit {result.exit_code}: {result.tail(3)}")
    return result.output.strip().splitlines()[-1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag")
    parser.add_argument("--config", type=Path, default=REPO / "versions.yaml")
    parser.add_argument("--cuda-arch", help="another GPU's verdicts, asked of the same image "
                        "(default: the tag's cuda_arch)")
    args = parser.parse_args(argv)
    tag = versions.load(args.config).tag(args.tag)
    model = tag.capabilities.model if tag.capabilities else None
    if not model:
        sys.exit(f"backend_table: {tag.name} declares no model family (capabilities: model)")
    client = docker_engine.connect(settings=Settings.of_process())
    version = ask(client, tag.image_ref, tag.platform, ["-c", VERSION])
    cuda_arch = args.cuda_arch or tag.cuda_arch
    table = json.loads(ask(client, tag.image_ref, tag.platform,
                           ["-B", f"{checks.CHECKER_DIR}/{SCRIPT}", cuda_arch, model]))
    runs = json.loads(VERDICTS.read_text()) if VERDICTS.is_file() else {}
    runs = merge(runs, version, cuda_arch, model, table)
    VERDICTS.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    print(f"backend_table: {VERDICTS.name}: vLLM {version} on {cuda_arch} for {model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
