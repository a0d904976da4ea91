"""Where the tags' current keys live on disk: the cache folders of build/ and wheels/, and
the entry names each tag's plan gives them now (what `gc` keeps, what `clean TAG` frees)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sparkbake.config.versions import Config
from sparkbake.core.folders import Folders
from sparkbake.core.stages import Stage
from sparkbake.fetch import sourcelock
from sparkbake.hashing import file_sha256
from sparkbake.lock import pins
from sparkbake.planning import Plan
from sparkbake.series import patchtests

__all__ = ["FAILED", "CacheFolder", "cache_folders", "current_names", "tag_files"]

FAILED = ".failed"  # a patch that failed leaves its tree as <key>.failed for inspection
HEX64 = re.compile(r"[0-9a-f]{64}")
# the log names of earlier versions, build/logs/<tag>-<stage>.log (now build/logs/<tag>/)
STAGE_LOGS = (Stage.FETCH, Stage.PATCH, Stage.KERNELS, Stage.WHEELS, Stage.BAKE, Stage.SMOKE)


@dataclass(frozen=True)
class CacheFolder:
    """A folder of cache entries: the names its entries have (anything else there is not
    sparkbake's and stays) and what they are, to say why one goes."""

    path: Path
    entries: re.Pattern[str]
    what: str


def cache_folders(config: Config) -> tuple[CacheFolder, ...]:
    layout = Folders.of(config)
    return (
        CacheFolder(layout.sources, HEX64, str(Stage.FETCH)),
        CacheFolder(layout.patched_trees, HEX64, str(Stage.PATCH)),
        CacheFolder(layout.kernel_cache, HEX64, str(Stage.KERNELS)),
        CacheFolder(layout.wheels, HEX64, str(Stage.WHEELS)),
        CacheFolder(layout.runtime_wheelhouses, re.compile(r"[0-9a-f]{16}"),
                    "runtime wheelhouse"),
        CacheFolder(layout.thirdparty, re.compile(r"[0-9a-f]{40,64}(-[\w.+-]+)?"),
                    "third-party source"),
        CacheFolder(layout.venvs, re.compile(r"patch-tests-[0-9a-f]{16}"), "patch-tests venv"),
    )


def current_names(config: Config, plan: Plan) -> dict[Path, set[str]]:
    """For each cache folder, the entries the tag's current keys name."""
    layout, tag = Folders.of(config), plan.tag
    names: dict[Path, set[str]] = {folder.path: set() for folder in cache_folders(config)}
    for entry in (layout.source(plan.fetch_key), layout.patched(plan.patch_key),
                  layout.kernels(plan.kernel_key), layout.wheel_set(plan.wheels_key)):
        names[entry.parent].add(entry.name)
    runtime_lock = pins.runtime_lock_path(config, tag)
    if runtime_lock is not None and runtime_lock.is_file():
        names[layout.runtime_wheelhouses].add(file_sha256(runtime_lock)[:16])
    locked = sourcelock.read(sourcelock.lock_path(config, tag))
    names[layout.thirdparty].update(source.key for source in (locked.sources if locked else ()))
    tests_lock = patchtests.lock_path(config, tag)
    if tests_lock.is_file():
        names[layout.venvs].add(f"patch-tests-{file_sha256(tests_lock)[:16]}")
    return names


def tag_files(config: Config, name: str) -> list[Path]:
    """What build/ keeps under the tag's own name: its smoke record, last build's inputs,
    patch-tests results, verify report and logs (the release record is history: it stays)."""
    layout = Folders.of(config)
    logs = [layout.logs(name).with_name(f"{name}-{stage}.log") for stage in STAGE_LOGS]
    smoke = layout.smoke_record(name)
    return [smoke, smoke.with_suffix(".xml"), layout.last_build(name), layout.patch_tests(name),
            layout.verify_report(name), layout.logs(name), *logs]
