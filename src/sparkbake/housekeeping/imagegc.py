"""The engine's images that sparkbake made and no tag of versions.yaml uses now (`gc`).

Only names this versions.yaml gives are looked at: `sparkbake-base/<base>` and
`sparkbake-builder/<base>` of its bases, its tags' repositories (images with sparkbake's
`dev.sparkbake.inputs` label), and untagged images that this checkout's bakes loaded
(build/loaded-images.txt) or that sparkbake imported for one of its bases. An untagged image
with one of its tag names in its labels, but loaded by another checkout, is not ours.
Another project's images on the same engine, under other names, stay; so does an image a
container uses (the engine refuses, and gc says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sparkbake import bases
from sparkbake.bake.runtime_image import INPUTS_LABEL
from sparkbake.config.platforms import Platform
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Base, Config, DebootstrapBase
from sparkbake.core.folders import Folders
from sparkbake.housekeeping.sweep import Item, Kept
from sparkbake.lock import pins
from sparkbake.oci.docker_engine import Client, image_labels
from sparkbake.planning import Plan
from sparkbake.wheels import container_build

__all__ = ["Current", "current", "stale_items"]

IMPORTED_BY = "sparkbake: debootstrap "  # bases._import's history line


@dataclass(frozen=True)
class Current:
    """What the tags use now, and the names of this versions.yaml that gc looks at."""

    base_refs: frozenset[str]
    builder_refs: frozenset[str]
    inputs: frozenset[str]
    base_names: frozenset[str]
    repositories: frozenset[str]
    loaded: frozenset[str]  # the image IDs this checkout's bakes loaded


def current(client: Client, config: Config, plans: Iterable[Plan],
            settings: Settings) -> Current:
    base_refs: set[str] = set()
    builder_refs: set[str] = set()
    inputs: set[str] = set()
    for plan in plans:
        tag = plan.tag
        base_refs.update(bases.local_ref(b, tag.platform) for b in (tag.builder, tag.runtime)
                         if isinstance(b, DebootstrapBase))
        builder = _base_image(client, tag.builder, tag.platform)
        lock_file = pins.lock_path(config, tag)
        if builder is not None and lock_file.is_file():
            builder_refs.add(container_build.builder_ref(builder, lock_file, settings))
        inputs.add(plan.inputs)
    tags = config.tags.values()
    record = Folders.of(config).loaded_images
    loaded = record.read_text().split() if record.is_file() else []
    return Current(frozenset(base_refs), frozenset(builder_refs), frozenset(inputs),
                   frozenset(b.name for t in tags for b in (t.builder, t.runtime)),
                   frozenset(t.repository for t in tags), frozenset(loaded))


def _base_image(client: Client, base: Base, platform: Platform) -> bases.BaseImage | None:
    """The base as the builder's key names it; None for a debootstrap base not made yet (no
    builder of it can be current then)."""
    import docker.errors  # here, as in each function that needs it: the SDK is slow to import

    if not isinstance(base, DebootstrapBase):
        return bases.BaseImage(base.name, base.image, base.digest)
    ref = bases.local_ref(base, platform)
    try:
        return bases.BaseImage(base.name, ref, str(client.images.get(ref).id))
    except docker.errors.ImageNotFound:
        return None


def stale_items(client: Client, now: Current) -> list[Item]:
    """An item per image whose every name is a stale one of ours (or, untagged, ours)."""
    items = []
    for image in client.images.list():
        refs = [ref for ref in image.attrs.get("RepoTags") or [] if ref != "<none>:<none>"]
        labels = image_labels(image.attrs)
        ours = [ref for ref in refs if _stale_ref(ref, labels, now)]
        if ours and len(ours) == len(refs):
            items.append(_item(client, image, ours, "no tag uses it now"))
        elif ours:  # other names keep the image: only ours go
            items.append(_untag_item(client, image, ours))
        elif not refs and _untagged_ours(image, labels, now):
            items.append(_item(client, image, [], "untagged, made by sparkbake"))
    return sorted(items, key=lambda item: item.label)


def _stale_ref(ref: str, labels: dict[str, str], now: Current) -> bool:
    repository = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    kind, _, name = repository.partition("/")
    if kind == "sparkbake-base" and name in now.base_names:
        return ref not in now.base_refs
    if kind == "sparkbake-builder" and name in now.base_names:
        return ref not in now.builder_refs
    return repository in now.repositories and INPUTS_LABEL in labels \
        and labels[INPUTS_LABEL] not in now.inputs


def _untagged_ours(image: Any, labels: dict[str, str], now: Current) -> bool:
    """Loaded by one of this checkout's bakes, or made on one of our bases as sparkbake
    imported it (a builder left untagged by an interrupted build too)."""
    import docker.errors

    if INPUTS_LABEL in labels and image.id in now.loaded:
        return True
    try:
        history = image.history()
    except docker.errors.NotFound:  # removed meanwhile
        return False
    made_by = str(history[-1].get("CreatedBy", "")) if history else ""
    if not made_by.startswith(IMPORTED_BY + "sparkbake-base/"):
        return False
    return made_by.removeprefix(IMPORTED_BY + "sparkbake-base/").split(":")[0] in now.base_names


def _item(client: Client, image: Any, refs: list[str], why: str) -> Item:
    label = "image " + (", ".join(refs) if refs else f"{image.id[:19]} (untagged)")

    def remove() -> None:
        for name in refs or [image.id]:  # the last name's removal deletes the image
            _remove(client, name)

    return Item(label, int(image.attrs.get("Size") or 0), why, remove)


def _untag_item(client: Client, image: Any, refs: list[str]) -> Item:
    def remove() -> None:
        for name in refs:
            _remove(client, name)

    return Item(f"image name {', '.join(refs)}", 0,
                "no tag uses it now; the image stays under its other names", remove)


def _remove(client: Client, name: str) -> None:
    import docker.errors

    try:
        client.images.remove(name)
    except docker.errors.ImageNotFound:
        return
    except docker.errors.APIError as exc:  # a container uses it, or an image is built on it
        raise Kept(f"the engine keeps it: {exc.explanation or exc}") from exc
