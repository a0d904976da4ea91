"""`clean` and `gc` of the project's build/ and wheels/ (README: Caches).

gc removes the cache entries no tag of versions.yaml has as a key now, failed patch trees,
and what interrupted runs left (scratch folders, half-written entries) once nothing has
written into them for an hour, so a build running now keeps its own; gc --check also hashes
every cache entry and removes the damaged ones (`cachecheck`). clean TAG removes the
entries only that tag's current keys name, and its records; clean --all empties build/ and
wheels/ but for the release records, deploy reports, flock files, a running registry's
data and the record of a cluster that is up (down removes it). Nothing outside build/ and
wheels/ is touched here (`imagegc`, `cachetrim`: the rest).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from sparkbake import planning
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.errors import UsageError
from sparkbake.housekeeping import cachecheck, cachetrim, containergc, imagegc
from sparkbake.housekeeping.cachekeys import FAILED, cache_folders, current_names, tag_files
from sparkbake.housekeeping.sweep import Item, newest_change, path_item, report
from sparkbake.oci import local_registry
from sparkbake.oci.docker_engine import engine_or_none
from sparkbake.planning import Plan
from sparkbake.run import Run

__all__ = ["clean", "clean_all_items", "clean_command", "clean_tag_items", "gc", "gc_command",
           "gc_items", "roots"]

LEFTOVER_AGE = 3600.0  # seconds without a write before a scratch folder counts as left over
HALF_WRITTEN = re.compile(r"\..+\.tmp")  # cache.atomic_dir's temporary folders
SCRATCH = ("contexts", "bases", "rebase-check", "import", "verify")  # build/<x>/ scratch dirs
# history, not cache: clean --all keeps them (gc reads loaded-images.txt)
RECORDS = ("releases", "deploys", "loaded-images.txt")
CLUSTERS = "clusters"  # up's records (nodes/cluster.py): a cluster that is up keeps its own


def gc_command(args: argparse.Namespace, run: Run) -> int:
    return gc(run.config, run.settings, args.dry_run, args.max_cache_size, args.check,
              console=run.console)


def clean_command(args: argparse.Namespace, run: Run) -> int:
    return clean(run.config, args.tag, args.everything, args.dry_run)


def gc(config: Config, settings: Settings, dry_run: bool, max_cache_size: str,
       check: bool = False, *, console: Console) -> int:
    """Remove what no tag uses now: cache entries, leftovers, the containers of runs that
    ended without removing them, the engine's stale images of this versions.yaml, and the
    oldest files beyond max_cache_size of the compile cache and of the bytecode cache (each);
    with check, also every cache entry whose bytes are not its digest's (cachecheck)."""
    limit = cachetrim.parse_size(max_cache_size)  # a bad size stops before anything goes
    plans = [planning.make(config, tag) for tag in config.tags.values()]
    items = gc_items(config, plans)
    if check:
        stale = {item.label for item in items}
        items += [item for item in cachecheck.check_items(config, settings.cache_dir,
                                                          console=console)
                  if item.label not in stale]
    client = engine_or_none(settings=settings)
    if client is None:
        console.detail("gc: the engine's images are left alone: no Docker engine answers")
    else:
        # containers first: a leftover container keeps its image from being removed
        items += containergc.leftover_items(client)
        items += imagegc.stale_items(client, imagegc.current(client, config, plans, settings))
    caches = (settings.compile_cache.folder, settings.bytecode_folder)
    trimmed = [cachetrim.trim_item(folder, limit) for folder in caches]
    report("gc", [*items, *[item for item in trimmed if item]], dry_run)
    return 0


def clean(config: Config, tag_name: str | None, everything: bool, dry_run: bool) -> int:
    """clean TAG: what only the tag's current keys name, and its records; clean --all:
    build/ and wheels/ but for records, flock files and a running registry's data."""
    if (tag_name is None) != everything:
        raise UsageError("clean takes a TAG or --all (one of them)",
                         "run `sparkbake clean TAG` or `sparkbake clean --all`")
    if tag_name is None:
        report("clean", clean_all_items(config), dry_run)
        return 0
    tag = config.tag(tag_name)
    others = {name: planning.make(config, other) for name, other in config.tags.items()
              if name != tag.name}
    report("clean", clean_tag_items(config, planning.make(config, tag), others), dry_run)
    return 0


def roots(config: Config) -> tuple[Path, Path]:
    """The folders clean and gc may remove files from."""
    return config.build_dir, config.wheels_dir


def gc_items(config: Config, plans: list[Plan], now: float | None = None) -> list[Item]:
    """Every entry of a cache folder that no plan names, failed trees, and leftovers."""
    now = time.time() if now is None else now
    kept: dict[Path, set[str]] = {}
    for plan in plans:
        for path, names in current_names(config, plan).items():
            kept.setdefault(path, set()).update(names)
    items = []
    for folder in cache_folders(config):
        for entry in _children(folder.path):
            why = _stale(entry, folder.entries, kept.get(folder.path, set()), now)
            if why:
                items.append(_item(config, entry, why.replace("KEY", f"{folder.what} key")))
    return items + _leftovers(config, now)


def _stale(entry: Path, entries: re.Pattern[str], kept: set[str], now: float) -> str:
    """Why a cache folder's entry goes ("" if it stays): KEY stands for the folder's key."""
    name = entry.name
    if name.endswith(FAILED) and entries.fullmatch(name.removesuffix(FAILED)):
        return "a failed patch tree"
    if entries.fullmatch(name) and name not in kept:
        return "no tag's current KEY"
    if HALF_WRITTEN.fullmatch(name) and _idle(entry, now):
        return "left by an interrupted write"
    return ""


def _leftovers(config: Config, now: float) -> list[Item]:
    """Scratch folders nothing has written into for LEFTOVER_AGE (a killed run's)."""
    found = []
    for name in SCRATCH:
        for entry in _children(config.build_dir / name):
            if entry.is_dir() and not entry.is_symlink() and _idle(entry, now):
                found.append(_item(config, entry, "a scratch folder left by an earlier run"))
    return found


def clean_tag_items(config: Config, plan: Plan, others: dict[str, Plan]) -> list[Item]:
    """What only this tag's current keys name, its failed tree, and its own records; an
    entry another tag's key names too stays (said in the item's refusal)."""
    shared: dict[Path, dict[str, list[str]]] = {}
    for name, other in others.items():
        for folder, names in current_names(config, other).items():
            for entry in names:
                shared.setdefault(folder, {}).setdefault(entry, []).append(name)
    items = []
    for folder, names in current_names(config, plan).items():
        for entry in sorted(names):
            path = folder / entry
            users = shared.get(folder, {}).get(entry, [])
            if path.exists() or path.is_symlink():
                items.append(_tag_item(config, path, plan.tag.name, users))
    patched = Folders.of(config).patched(plan.patch_key)
    failed = patched.with_name(patched.name + FAILED)
    records = [failed, *tag_files(config, plan.tag.name)]
    return items + [_item(config, path, f"{plan.tag.name}'s") for path in records
                    if path.exists() or path.is_symlink()]


def _tag_item(config: Config, path: Path, tag: str, users: list[str]) -> Item:
    item = _item(config, path, f"{tag}'s current key")
    if not users:
        return item
    return Item(item.label, 0, item.why, item.remove,
                refused=f"{', '.join(sorted(users))} use{'s' if len(users) == 1 else ''} it too")


def clean_all_items(config: Config) -> list[Item]:
    """Everything in build/ and wheels/ but records, flock files and a running registry."""
    registry_pid = local_registry.running(config)
    items = []
    for root in roots(config):
        for entry in _children(root):
            if root == config.build_dir and entry.name in RECORDS:
                continue
            if entry.name.endswith(".lock") or (root == config.wheels_dir and
                                                entry == config.build_dir):
                continue
            if root == config.build_dir and entry.name == CLUSTERS:
                items += _cluster_items(config, entry)
                continue
            item = _item(config, entry, "clean --all")
            if registry_pid is not None and entry == config.build_dir / "registry":
                item = Item(item.label, 0, item.why, item.remove, refused=(
                    f"the embedded registry runs (pid {registry_pid}); `sparkbake registry "
                    "stop` first to remove its data"))
            items.append(item)
    return items


def _cluster_items(config: Config, folder: Path) -> list[Item]:
    """build/clusters/: up's record of a cluster stays until down removes it, with its
    measurements (one line naming it); the measurements of clusters taken down go."""
    from sparkbake.nodes import cluster  # here: only clean --all reads up's records

    items = []
    for entry in _children(folder):
        # TAG.json, its measurements (TAG.memory.json, TAG.bench.json) and bench log
        tag = entry.name.removesuffix(".json").removesuffix(".log").removesuffix(".memory") \
            .removesuffix(".bench")
        if entry.name.endswith(".lock"):
            continue
        if not cluster.state_path(config, tag).is_file():
            items.append(_item(config, entry, "clean --all"))
        elif entry == cluster.state_path(config, tag):
            kept = _item(config, entry, "clean --all")
            items.append(Item(kept.label, 0, kept.why, kept.remove, refused=(
                f"the record of {tag}'s cluster, up on its nodes (its measurements stay with "
                f"it); `sparkbake down {tag}` first")))
    return items


def _item(config: Config, path: Path, why: str) -> Item:
    return path_item(path, why, roots(config), config.root)


def _children(folder: Path) -> list[Path]:
    """A folder's entries, sorted; none if it is missing or not a folder."""
    if not folder.is_dir():
        return []
    return sorted(folder.iterdir())


def _idle(entry: Path, now: float) -> bool:
    return now - newest_change(entry) > LEFTOVER_AGE
