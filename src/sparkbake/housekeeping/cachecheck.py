"""`gc --check`: every cache entry hashed against the digest it is stored under, and the
damaged ones removed (the next build makes them again). What it reads: the blobs of the bake's
OCI layout (build/oci) and of the per-host base-layer cache, the records beside them
(build/layers/, the cache's bases/, the layout's index.json), and the wheels and kernel cache
entries against their wheels.json and kernels.json. Stamps are not trusted here: each file is
read in full (`trust`), and its stamp written anew when it is right."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkbake import trust
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.housekeeping.cachekeys import HEX64
from sparkbake.housekeeping.sweep import Item, path_item
from sparkbake.oci import image_layout
from sparkbake.wheels import entrycheck

__all__ = ["Checked", "check_items"]


@dataclass(frozen=True)
class Checked:
    """What one check found: how many entries it read, and an item per damaged one."""

    count: int
    damaged: list[Item]


def check_items(config: Config, cache_dir: Path, *, console: Console) -> list[Item]:
    """An item for each damaged entry of the project's caches and of the host's layer cache
    (cache_dir/layers); prints how many entries were checked."""
    layout = Folders.of(config)
    roots = (config.build_dir, config.wheels_dir)
    shared = image_layout.Layout(cache_dir / "layers", console)
    found = [_blobs(image_layout.Layout(layout.oci, console), config.root, roots),
             _blobs(shared, config.root, (shared.root,)),
             _records([layout.oci / "index.json", *_jsons(layout.layers)], config.root, roots),
             _records(_jsons(shared.root / "bases"), config.root, (shared.root,)),
             _entries(_keyed(layout.wheels), entrycheck.damage, config.root, roots),
             _entries(_keyed(layout.kernel_cache), entrycheck.kernels_damage, config.root,
                      roots)]
    items = [item for checked in found for item in checked.damaged]
    console.detail(f"gc --check: {sum(c.count for c in found)} cache entries hashed, "
         f"{len(items)} damaged")
    return items


def _blobs(layout: image_layout.Layout, shown_from: Path, roots: tuple[Path, ...]) -> Checked:
    """Each blob of a layout against its name."""
    folder = layout.root / "blobs" / "sha256"
    blobs = sorted(folder.iterdir()) if folder.is_dir() else []
    damaged = [_blob_item(layout, f"sha256:{blob.name}", shown_from, roots) for blob in blobs
               if blob.is_file() and not trust.verified(
                   blob, blob.name, layout.root / image_layout.STAMPS / blob.name, full=True)]
    return Checked(len(blobs), damaged)


def _blob_item(layout: image_layout.Layout, digest: str, shown_from: Path,
               roots: tuple[Path, ...]) -> Item:
    item = path_item(layout.blob(digest), "damaged: its bytes are not its digest's", roots,
                     shown_from)
    return Item(item.label, item.size, item.why, lambda: layout.drop(digest), item.refused)


def _records(paths: list[Path], shown_from: Path, roots: tuple[Path, ...]) -> Checked:
    """Each JSON record: readable as one (a missing one is no damage)."""
    damaged = []
    for path in paths:
        try:
            trust.read_record(path)
        except trust.Damaged as exc:
            damaged.append(path_item(path, f"damaged: {exc.why}", roots, shown_from))
    return Checked(len(paths), damaged)


def _entries(folders: list[Path], damage: Callable[..., str | None], shown_from: Path,
             roots: tuple[Path, ...]) -> Checked:
    """Each wheels (or kernel cache) entry, every wheel hashed; a damaged one goes whole."""
    damaged = []
    for folder in folders:
        why = damage(folder, full=True)
        if why:
            damaged.append(path_item(folder, f"damaged: {why}", roots, shown_from))
    return Checked(len(folders), damaged)


def _jsons(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _keyed(folder: Path) -> list[Path]:
    """The entries of a cache folder named by a key."""
    if not folder.is_dir():
        return []
    return sorted(entry for entry in folder.iterdir()
                  if entry.is_dir() and HEX64.fullmatch(entry.name))
