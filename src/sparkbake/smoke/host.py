"""What the smoke stage works out on the host: the labels the plan gives the image, and the
sha256 that each patched Python file must have where it lands in site-packages."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbake import bases
from sparkbake.bake import runtime_image
from sparkbake.config.platforms import Platform
from sparkbake.config.versions import Base, ImageBase
from sparkbake.core.smoke_record import CheckFailed
from sparkbake.hashing import file_sha256
from sparkbake.oci.docker_engine import Client, image_exists, image_labels
from sparkbake.patch.apply import PatchedTree
from sparkbake.planning import Plan, touched_paths

__all__ = ["Facts", "check_labels", "patched_files", "site_path", "wheel_members"]

BASE_DIGEST = "org.opencontainers.image.base.digest"
SHOWN = 48


@dataclass(frozen=True)
class Facts:
    """What the host knows of the tag beyond the plan: its patched tree (files and hash) and
    its source date, from the fetch and patch stages' cache entries."""

    patched: PatchedTree
    source_date: int


def expected_base(client: Client, base: Base, platform: Platform) -> tuple[bases.BaseImage, str]:
    """The runtime base as the bake saw it, and a note when its digest cannot be known here
    (a debootstrap base is an image of the engine that made it)."""
    if isinstance(base, ImageBase):
        return bases.BaseImage(base.name, base.image, base.digest), ""
    ref = bases.local_ref(base, platform)
    if image_exists(client, ref):
        return bases.BaseImage(base.name, ref, str(client.images.get(ref).id)), ""
    return bases.BaseImage(base.name, ref, ""), f"; {BASE_DIGEST} not checked: {ref} is not " \
                                                 "in this engine"


def _shown(value: str | None) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN - 4] + "...'"


def check_labels(client: Client, attrs: dict[str, Any], plan: Plan, facts: Facts) -> str:
    """The image's labels, as the engine reports them, against those the plan gives it."""
    actual = image_labels(attrs)
    base, note = expected_base(client, plan.tag.runtime, plan.tag.platform)
    wanted = runtime_image.labels(plan, base, facts.patched, facts.source_date)
    if note:
        del wanted[BASE_DIGEST]
    wrong = [f"{key}: image has {_shown(actual.get(key))}, the plan says {_shown(value)}"
             for key, value in sorted(wanted.items()) if actual.get(key) != value]
    if wrong:
        raise CheckFailed("; ".join(wrong))
    return (f"{len(wanted)} labels as the plan says (revision {facts.patched.tree_hash[:12]}, "
            f"series {plan.series_label()[:40] or 'none'}){note}")


def patched_python_paths(plan: Plan) -> dict[str, str]:
    """Each .py path the tag's patches touch -> the last patch touching it (series/file)."""
    touched: dict[str, str] = {}
    for series in plan.series:
        for name, _sha in series.patches:
            for path in sorted(touched_paths(series.path(name))):
                if path.endswith(".py"):
                    touched[path] = f"{series.name}/{name}"
    return touched


def wheel_members(wheels: list[Path]) -> tuple[set[str], set[str]]:
    """The files the wheels install under site-packages (`.data/purelib|platlib/` moved up,
    metadata left out), and the folders holding them."""
    files: set[str] = set()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                top, _, rest = name.partition("/")
                if top.endswith(".data") and rest.startswith(("purelib/", "platlib/")):
                    files.add(rest.split("/", 1)[1])
                elif not top.endswith((".dist-info", ".data")) and not name.endswith("/"):
                    files.add(name)
    folders = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    return files, folders


def site_path(path: str, files: set[str], folders: set[str], deleted: bool) -> str | None:
    """Where a tree's file lands in site-packages: at its own path, or without a leading
    `src/` (a src layout); a deleted file, where its folder lands."""
    for candidate in (path, path[4:]) if path.startswith("src/") else (path,):
        folder = candidate.rpartition("/")[0]
        if (deleted and folder in folders) or (not deleted and candidate in files):
            return candidate
    return None


def patched_files(plan: Plan, tree: Path, wheel_folder: Path) -> dict[str, Any]:
    """smoke_check.py's `patched_files`: the expected sha256 of each patched .py that lands in
    site-packages (None: the series delete it), or the reason there is nothing to check."""
    touched = patched_python_paths(plan)
    if not touched:
        why = "the series patch no Python file" if plan.series else "the tag has no patch series"
        return {"files": [], "none": why}
    wheels = sorted(wheel_folder.glob("*.whl"))
    if not wheels:
        return {"problem": f"no wheels in {wheel_folder}, so where the patched files land is "
                           f"unknown: run `sparkbake wheels {plan.tag.name}`"}
    files, folders = wheel_members(wheels)
    expected, not_installed = [], []
    for path, patch in sorted(touched.items()):
        source = tree / path
        site = site_path(path, files, folders, deleted=not source.is_file())
        if site is None:
            not_installed.append(path)
            continue
        expected.append({"path": site, "tree": path, "patch": patch,
                         "sha256": file_sha256(source) if source.is_file() else None})
    return {"files": expected, "not_installed": not_installed}
