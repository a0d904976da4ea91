"""wheels: build the patched tree's wheels in a builder container and check their kernels."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import resources
from .bases import BaseImage
from .cache import atomic_dir, scratch_dir
from .config import HostSettings, Tag
from .docker_api import Client, build_image, image_exists, run_container
from .errors import BuildError
from .hashing import data_hash, file_sha256
from .patches import PatchedTree
from .proc import echo, step

__all__ = ["WheelSet", "build", "builder_image", "check_sass"]

REPORT = "wheels.json"
OOM_EXIT = 137


@dataclass(frozen=True)
class WheelSet:
    """Wheels of one build: wheels/<key>/*.whl and their report (sha256, SASS per kernel)."""

    folder: Path
    key: str
    report: dict[str, Any]

    @property
    def wheels(self) -> list[dict[str, Any]]:
        wheels: list[dict[str, Any]] = self.report["wheels"]
        return wheels


def builder_image(client: Client, base: BaseImage, settings: HostSettings, build_dir: Path) -> str:
    """The builder image for a base, rendered from images/builder.Dockerfile.j2 once."""
    names = ("builder.Dockerfile.j2", "builder-requirements.txt", "build_wheels.py")
    key = data_hash({"base": base.digest, "files": [resources.digest(n) for n in names],
                     "index": settings.index_url, "ca": bool(settings.ca_bundle)})
    ref = f"sparkbake-builder/{base.name}:{key[:12]}"
    if image_exists(client, ref):
        return ref
    with step(f"builder image {ref}"), scratch_dir(build_dir / "contexts", "builder.") as context:
        (context / "Dockerfile").write_text(resources.render(
            "builder.Dockerfile.j2", base_image=base.ref, ca_bundle=bool(settings.ca_bundle),
            index_url=settings.index_url))
        for name in names[1:]:
            shutil.copy(resources.path(name), context / name)
        if settings.ca_bundle:
            shutil.copy(settings.ca_bundle, context / "ca-bundle.crt")
        build_image(client, context, ref, error=BuildError,
                    log_path=build_dir / "logs" / f"builder-{base.name}.log")
    return ref


def build(client: Client, tag: Tag, builder: str, patched: PatchedTree, folder: Path,
          key: str, log_dir: Path) -> WheelSet:
    """Build wheels into folder (= wheels/<key>) unless cached; check every kernel's SASS."""
    report_path = folder / REPORT
    if report_path.is_file():
        echo(f"wheels: {tag.name} cached at wheels/{folder.name[:12]}")
        return WheelSet(folder, key, json.loads(report_path.read_text()))
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{tag.name}-wheels.log"
    with step(f"wheels for {tag.name} ({tag.sm_arch})"), atomic_dir(folder) as out:
        result = run_container(
            client, builder, [],
            volumes={str(patched.path): {"bind": "/src", "mode": "ro"},
                     str(out): {"bind": "/out", "mode": "rw"}},
            environment={"TORCH_CUDA_ARCH_LIST": tag.cuda_arch, "SPARKBAKE_TAG": tag.name},
            network=False, log_path=log,
        )
        if result.exit_code != 0:
            raise _build_failure(tag, result.exit_code, result.tail(), log)
        built = json.loads((out / "build-report.json").read_text())
        (out / "build-report.json").unlink()
        report = _report(tag, out, built)
        check_sass(tag, report)
        (out / REPORT).write_text(json.dumps(report, indent=2))
    return WheelSet(folder, key, report)


def _build_failure(tag: Tag, exit_code: int, tail: str, log: Path) -> BuildError:
    if exit_code == OOM_EXIT:
        return BuildError(
            f"the builder for {tag.name} was killed (exit 137, out of memory); log: {log}",
            "lower the compile job count (MAX_JOBS) or free memory on the engine host",
        )
    return BuildError(f"building wheels for {tag.name} failed (exit {exit_code}); "
                      f"full log: {log}\n{tail}", "fix the error above (see the log)")


def _report(tag: Tag, out: Path, built: dict[str, Any]) -> dict[str, Any]:
    wheels = []
    for wheel in built["wheels"]:
        path = out / wheel["file"]
        wheels.append({**wheel, "sha256": file_sha256(path),
                       "name": wheel["file"].split("-", 1)[0]})
    if not wheels:
        raise BuildError(f"the build of {tag.name} produced no wheel", "check the build log")
    return {"cuda_arch": tag.cuda_arch, "sm_arch": tag.sm_arch, "nvcc": built["nvcc"],
            "wheels": wheels}


def check_sass(tag: Tag, report: dict[str, Any]) -> None:
    """Every CUDA shared library must carry SASS for the tag's arch."""
    for wheel in report["wheels"]:
        for kernel in wheel["kernels"]:
            if tag.sm_arch not in kernel["sass"]:
                found = ", ".join(kernel["sass"]) or "none"
                raise BuildError(
                    f"{wheel['file']}: {kernel['path']} has no {tag.sm_arch} SASS (has: {found})",
                    f"build it for cuda_arch {tag.cuda_arch} (TORCH_CUDA_ARCH_LIST)",
                )
