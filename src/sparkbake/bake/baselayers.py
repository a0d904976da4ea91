"""The runtime base's layers as blobs: exported from the engine and compressed once per
host into the base-layer cache (an OCI layout), keyed by the engine's image id. Every blob
is checked against its digest before it is reused (`trust`): a damaged one, or a damaged
record, makes the base be exported again."""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

from sparkbake import trust
from sparkbake.bases import BaseImage
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.errors import BakeError
from sparkbake.files import atomic_write
from sparkbake.hashing import data_hash
from sparkbake.oci import image_layout, layers
from sparkbake.oci.docker_engine import Client
from sparkbake.oci.documents import ConfigDoc

__all__ = ["Below", "ensure", "record_path"]


class BaseBlobs(TypedDict):
    """The cache's record of a base image's blobs (record_path)."""

    image: str  # the engine's image id
    config: str  # the config's digest
    layers: list[str]  # the layers' blob digests, bottom first


@dataclass(frozen=True)
class Below:
    """The base image's config and its layers as blobs in the layout."""

    config: ConfigDoc
    layers: list[image_layout.Descriptor]


def ensure(client: Client, base: BaseImage, cache: image_layout.Layout, layout: image_layout.Layout,
           work: Path, workers: int, *, console: Console) -> Below:
    """The base's layers, compressed once per host into cache (keyed by the engine's image
    id: the same base image gives the same blobs; workers: the threads that compress them),
    then put into the layout."""
    image_id = str(client.images.get(base.ref).id)
    record = record_path(cache, image_id)
    listing = _listing(record, console=console)
    # every blob checked (intact removes a damaged one), not only up to the first bad one
    if listing is None or not all([cache.intact(d) for d in [listing["config"],
                                                               *listing["layers"]]]):
        listing = _export_base(client, base, image_id, cache, work, workers, console=console)
        atomic_write(record, json.dumps(listing, indent=2) + "\n")
    return Below(cache.read_config_doc(listing["config"]),
                  [layout.add_file(cache.blob(d), d, layers.MEDIA_TYPE)
                   for d in listing["layers"]])


def record_path(cache: image_layout.Layout, image_id: str) -> Path:
    """The cache's record of a base image's blobs, compressed as layers are now: a base
    compressed otherwise (another compressor or block size) is exported again, not reused,
    so that every host gives the same base blobs."""
    made = data_hash(layers.COMPRESSION)[:12]
    return cache.root / "bases" / f"{image_id.split(':')[1]}.{made}.json"


def _listing(record: Path, *, console: Console) -> BaseBlobs | None:
    """The cache's record of a base's blobs; None when missing or damaged (removed)."""
    return cast(BaseBlobs | None,
                trust.record_or_drop(record, ("config", "layers"), "a base layers record",
                                     console=console))


def _export_base(client: Client, base: BaseImage, image_id: str, cache: image_layout.Layout,
                 work: Path, workers: int, *, console: Console) -> BaseBlobs:
    archive = work / "base.tar"
    with step(console, f"base layers of {base.ref} ({image_id[:19]})"), archive.open("wb") as out:
        for chunk in client.images.get(base.ref).save(named=False):
            out.write(chunk)
    with tarfile.open(archive) as tar:
        index = json.loads(_member(tar, "manifest.json"))[0]
        config = _member(tar, index["Config"])
        digests = []
        for name, diff_id in zip(index["Layers"], json.loads(config)["rootfs"]["diff_ids"],
                                 strict=True):
            source = tar.extractfile(name)
            assert source is not None
            layer = layers.compress(source, work / "base-layer.tar.gz", workers=workers)
            if layer.diff_id != diff_id:
                raise BakeError(f"base {base.ref}: its layer {name} is {layer.diff_id}, its "
                                f"config says {diff_id}", "remove the image and rebuild it")
            digests.append(cache.add_file(layer.path, layer.digest, layers.MEDIA_TYPE).digest)
    archive.unlink()
    return {"image": image_id, "config": cache.add_bytes(config, image_layout.CONFIG_TYPE).digest,
            "layers": digests}


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    data = tar.extractfile(name)
    assert data is not None
    return data.read()
