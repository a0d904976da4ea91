"""bake: the runtime image of a tag, with provenance labels and /opt/sparkbake/manifest.json.

`bake` is the one entry point; its mechanism (today the engine's classic builder) can be
replaced without touching its callers.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import resources
from .bases import BaseImage
from .cache import scratch_dir
from .docker_api import Client, build_image, image_attrs, image_exists
from .errors import BakeError
from .patches import PatchedTree
from .plan import Plan, upstream_pin
from .proc import echo, step
from .wheels import WheelSet

__all__ = ["bake", "dockerfile_quote", "labels", "manifest"]

def manifest(plan: Plan, base: BaseImage, wheels: WheelSet, patched: PatchedTree) -> dict[str, Any]:
    """What went into the image, recorded inside it."""
    tag = plan.tag
    return {
        "schema": 1, "tag": tag.name, "image": tag.image_ref, "inputs": plan.inputs,
        "upstream": {"key": tag.upstream.key, **upstream_pin(tag.upstream)},
        "series": [{"name": s.name, "sha256": s.sha256,
                    "patches": [{"file": f, "sha256": h} for f, h in s.patches]}
                   for s in plan.series],
        "patched_tree": patched.tree_hash,
        "cuda_arch": tag.cuda_arch, "sm_arch": tag.sm_arch, "platform": tag.platform,
        "env": dict(tag.env),
        "base": {"name": base.name, "image": base.ref, "digest": base.digest},
        "wheels": wheels.wheels, "nvcc": wheels.report.get("nvcc", ""),
        "build": {"jobs": wheels.report.get("jobs", {}),
                  "kernels": wheels.report.get("kernels", {})},
    }


def labels(plan: Plan, base: BaseImage, patched: PatchedTree) -> dict[str, str]:
    tag = plan.tag
    pin = upstream_pin(tag.upstream)
    return {
        "org.opencontainers.image.version": tag.name,
        "org.opencontainers.image.revision": patched.tree_hash,
        "org.opencontainers.image.source": _source(pin),
        "org.opencontainers.image.created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.opencontainers.image.base.name": base.ref,
        "org.opencontainers.image.base.digest": base.digest,
        "dev.sparkbake.tag": tag.name,
        "dev.sparkbake.upstream": f"{tag.upstream.key} " + json.dumps(pin, sort_keys=True),
        "dev.sparkbake.series": plan.series_label(),
        "dev.sparkbake.inputs": plan.inputs,
        "dev.sparkbake.cuda-arch": tag.cuda_arch,
    }


def _source(pin: dict[str, str]) -> str:
    if pin["kind"] == "git":
        return pin["url"]
    if pin["kind"] == "pypi":
        return f"pypi:{pin['name']}=={pin['version']}"
    return f"dir:{pin['path']}"


def dockerfile_quote(value: str) -> str:
    """A double-quoted Dockerfile word: no variable expansion, quotes and backslashes kept."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def is_current(client: Client, plan: Plan) -> bool:
    """The tag's image exists and was baked from exactly these inputs."""
    if not image_exists(client, plan.tag.image_ref):
        return False
    found = (image_attrs(client, plan.tag.image_ref)["Config"].get("Labels") or {})
    return bool(found.get("dev.sparkbake.inputs") == plan.inputs)


def bake(client: Client, plan: Plan, base: BaseImage, wheels: WheelSet, patched: PatchedTree,
         build_dir: Path) -> str:
    """Make `<repository>:<tag>` unless an image with these inputs exists; return its id."""
    ref = plan.tag.image_ref
    if is_current(client, plan):
        echo(f"bake: {ref} is current (inputs {plan.inputs[:12]}), nothing to do")
        return str(client.images.get(ref).id)
    with step(f"bake {ref}"), scratch_dir(build_dir / "contexts", "runtime.") as context:
        _context(context, plan, base, wheels, patched)
        return build_image(client, context, ref, error=BakeError,
                           log_path=build_dir / "logs" / f"{plan.tag.name}-bake.log")


def _context(context: Path, plan: Plan, base: BaseImage, wheels: WheelSet,
             patched: PatchedTree) -> None:
    (context / "wheels").mkdir()
    for wheel in wheels.wheels:
        shutil.copy(wheels.folder / wheel["file"], context / "wheels" / wheel["file"])
    (context / "manifest.json").write_text(
        json.dumps(manifest(plan, base, wheels, patched), indent=2, sort_keys=True))
    shutil.copy(resources.path("entrypoint.py"), context / "entrypoint.py")
    (context / "Dockerfile").write_text(resources.render(
        "runtime.Dockerfile.j2",
        base_image=base.ref,
        requirements=sorted({w["name"] for w in wheels.wheels}),
        env=[(k, dockerfile_quote(v)) for k, v in plan.tag.env],
        labels=[(k, dockerfile_quote(v)) for k, v in labels(plan, base, patched).items()],
    ))
