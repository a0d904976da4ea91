"""Where the tags' current keys live on disk: the cache folders of build/ and wheels/, and
the entry names each tag's plan gives them now (what `gc` keeps, what `clean TAG` frees)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sparkbake.config.versions import Config
from sparkbake.fetch import sourcelock
from sparkbake.hashing import file_sha256
from sparkbake.lock import lockfiles
from sparkbake.pipeline.plan import Plan
from sparkbake.series import patchtests

__all__ = ["FAILED", "CacheFolder", "cache_folders", "current_names", "tag_files"]

FAILED = ".failed"  # a patch that failed leaves its tree as <key>.failed for inspection
HEX64 = re.compile(r"[0-9a-f]{64}")
# the log names of earlier versions, build/logs/<tag>-<stage>.log (now build/logs/<tag>/)
STAGE_LOGS = ("fetch", "patch", "kernels", "wheels", "bake", "smoke")


@dataclass(frozen=True)
class CacheFolder:
    """A folder of cache entries: the names its entries have (anything else there is not
    sparkbake's and stays) and what they are, to say why one goes."""

    path: Path
    entries: re.Pattern[str]
    what: str


def cache_folders(config: Config) -> tuple[CacheFolder, ...]:
    build, wheels = config.build_dir, config.wheels_dir
    return (
        CacheFolder(build / "sources", HEX64, "fetch"),
        CacheFolder(build / "patched", HEX64, "patch"),
        CacheFolder(wheels / "kernels", HEX64, "kernels"),
        CacheFolder(wheels, HEX64, "wheels"),
        CacheFolder(wheels / "runtime", re.compile(r"[0-9a-f]{16}"), "runtime wheelhouse"),
        CacheFolder(build / "thirdparty", re.compile(r"[0-9a-f]{40,64}(-[\w.+-]+)?"),
                    "third-party source"),
        CacheFolder(build / "venvs", re.compile(r"patch-tests-[0-9a-f]{16}"), "patch-tests venv"),
    )


def current_names(config: Config, plan: Plan) -> dict[Path, set[str]]:
    """For each cache folder, the entries the tag's current keys name."""
    build, wheels, tag = config.build_dir, config.wheels_dir, plan.tag
    names: dict[Path, set[str]] = {folder.path: set() for folder in cache_folders(config)}
    names[build / "sources"].add(plan.fetch_key)
    names[build / "patched"].add(plan.patch_key)
    names[wheels / "kernels"].add(plan.kernel_key)
    names[wheels].add(plan.wheels_key)
    runtime_lock = lockfiles.runtime_lock_path(config, tag)
    if runtime_lock is not None and runtime_lock.is_file():
        names[wheels / "runtime"].add(file_sha256(runtime_lock)[:16])
    locked = sourcelock.read(sourcelock.lock_path(config, tag))
    names[build / "thirdparty"].update(source.key for source in (locked.sources if locked else ()))
    tests_lock = patchtests.lock_path(config, tag)
    if tests_lock.is_file():
        names[build / "venvs"].add(f"patch-tests-{file_sha256(tests_lock)[:16]}")
    return names


def tag_files(config: Config, name: str) -> list[Path]:
    """What build/ keeps under the tag's own name: its smoke record, last build's inputs,
    patch-tests results, verify report and logs (the release record is history: it stays)."""
    build = config.build_dir
    logs = [build / "logs" / f"{name}-{stage}.log" for stage in STAGE_LOGS]
    return [build / "smoke" / f"{name}.json", build / "smoke" / f"{name}.xml",
            build / "plans" / f"{name}.json", build / "patch-tests" / name,
            build / "verify" / f"{name}.json", build / "logs" / name, *logs]
