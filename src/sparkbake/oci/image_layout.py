"""OCI images as files: an image layout folder (blobs + index.json), the image config and
manifest documents, and the docker-archive tar that loads an image into an engine.

Every document is canonical JSON (sorted keys, no spaces), so equal content gives equal
digests. A blob is trusted by content (`trust`): sealed read-only when it goes in, checked
against its digest by its stamp before it is reused, hashed in full where asked; a damaged
one is removed with a warning. Pure file work: no Docker, no network.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from sparkbake import trust
from sparkbake.config.platforms import Platform
from sparkbake.console.display import Console
from sparkbake.files import atomic_write
from sparkbake.oci.documents import (
    ConfigDoc,
    ContainerConfig,
    DescriptorDoc,
    HistoryDoc,
    IndexDoc,
    ManifestDoc,
)

__all__ = ["CONFIG_TYPE", "FORMAT", "INDEX_TYPE", "LAYER_TYPE", "MANIFEST_TYPE", "REF_NAME",
           "ConfigChange", "Descriptor", "Layout", "Manifest", "canonical", "docker_archive",
           "image_config", "made_by", "manifest", "rfc3339", "write_docker_archive"]

FORMAT = 3  # raise when the bake writes other bytes for the same inputs
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"  # what oci.layers writes
REF_NAME = "org.opencontainers.image.ref.name"
# the parts of a base's config that describe how its containers run (others are build state)
RUNTIME_KEYS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir",
                "Labels", "StopSignal", "Healthcheck", "Shell")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STAMPS = ".verified"  # the blobs' stamps (trust), beside blobs/: no OCI tool reads it
READ_FILES = ".layer-files"  # beside blobs/: files read from a layer (attest.imagefiles)
CHUNK = 1 << 20  # bytes read at a time from a blob


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str  # sha256:<hex>
    size: int

    def json(self) -> DescriptorDoc:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}

    @classmethod
    def of(cls, doc: DescriptorDoc) -> Descriptor:
        return cls(str(doc["mediaType"]), str(doc["digest"]), int(doc["size"]))


@dataclass(frozen=True)
class Manifest:
    """What an image manifest points at: its config and layers, bottom first."""

    config: Descriptor
    layers: tuple[Descriptor, ...]


def canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Layout:
    """An OCI image layout folder: content-addressed blobs and index.json of named images."""

    def __init__(self, root: Path, console: Console) -> None:
        self.root = root
        self.console = console  # says which damaged blob or index was removed

    def blob(self, digest: str) -> Path:
        algorithm, _, hexdigest = digest.partition(":")
        return self.root / "blobs" / algorithm / hexdigest

    def has(self, digest: str) -> bool:
        return self.blob(digest).is_file()

    def intact(self, digest: str, size: int | None = None, *, full: bool = False) -> bool:
        """Is the blob there with its digest's bytes (and size)? Trusted from its stamp
        unless full; a damaged blob is removed, with a warning naming it."""
        path = self.blob(digest)
        if not path.is_file():
            return False
        if trust.verified(path, digest.partition(":")[2], self._stamp(digest), size=size,
                          full=full):
            return True
        self.console.notice(trust.removed(path, f"its bytes are not {digest[:19]}..."))
        self.drop(digest)
        return False

    def damaged(self, image: Descriptor, *, full: bool = False) -> list[str]:
        """The digests of the image's blobs (manifest, config, layers) that are missing or
        not their bytes; the damaged ones are removed (intact)."""
        if not self.intact(image.digest, image.size, full=full):
            return [image.digest]
        found = self.read_manifest(image.digest)
        return [blob.digest for blob in (found.config, *found.layers)
                if not self.intact(blob.digest, blob.size, full=full)]

    def drop(self, digest: str) -> None:
        """Remove a blob and its stamp (a link into a shared cache is unlinked, not emptied)."""
        for path in (self.blob(digest), self._stamp(digest), self.read_files(digest)):
            path.unlink(missing_ok=True)

    def read_files(self, digest: str) -> Path:
        """The record of what was read of a layer's files, by the layer's digest."""
        return self.root / READ_FILES / f"{digest.partition(':')[2]}.json"

    def _stamp(self, digest: str) -> Path:
        return self.root / STAMPS / digest.partition(":")[2]

    def _sealed(self, digest: str) -> None:
        """A blob just put in: read-only, and its stamp (its bytes are its digest's)."""
        trust.seal(self.blob(digest))
        trust.remember(self.blob(digest), self._stamp(digest))

    def read(self, digest: str) -> bytes:
        return self.blob(digest).read_bytes()

    def read_json(self, digest: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.read(digest))
        return doc

    def read_manifest_doc(self, digest: str) -> ManifestDoc:
        doc: ManifestDoc = json.loads(self.read(digest))
        return doc

    def read_config_doc(self, digest: str) -> ConfigDoc:
        doc: ConfigDoc = json.loads(self.read(digest))
        return doc

    def read_manifest(self, digest: str) -> Manifest:
        doc = self.read_manifest_doc(digest)
        return Manifest(Descriptor.of(doc["config"]),
                        tuple(Descriptor.of(layer) for layer in doc["layers"]))

    def add_bytes(self, data: bytes, media_type: str) -> Descriptor:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if not self.intact(digest, len(data)):
            self._init()
            atomic_write(self.blob(digest), data)
            self._sealed(digest)
        return Descriptor(media_type, digest, len(data))

    def add_file(self, path: Path, digest: str, media_type: str) -> Descriptor:
        """Put a file whose digest is known in, as a hard link where it can (else a copy)."""
        size = path.stat().st_size
        if not self.intact(digest, size):
            self._init()
            _place(path, self.blob(digest))
            self._sealed(digest)
        return Descriptor(media_type, digest, size)

    def tag(self, name: str, manifest: Descriptor) -> None:
        """Point the name at the manifest in index.json (other names stay)."""
        self._init()
        with self._locked():
            index = self._index()
            kept = [m for m in index["manifests"]
                    if (m.get("annotations") or {}).get(REF_NAME) != name]
            entry = manifest.json()
            entry["annotations"] = {REF_NAME: name}
            index["manifests"] = sorted([*kept, entry],
                                        key=lambda m: m["annotations"][REF_NAME])
            atomic_write(self.root / "index.json", json.dumps(index, indent=2) + "\n")

    def find(self, name: str) -> Descriptor | None:
        for entry in self._index()["manifests"]:
            if (entry.get("annotations") or {}).get(REF_NAME) == name:
                return Descriptor.of(entry)
        return None

    def _index(self) -> IndexDoc:
        path = self.root / "index.json"
        # damaged: the names are made again by their bakes
        index = cast(IndexDoc | None, trust.record_or_drop(path, console=self.console))
        return index or {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": []}

    def _init(self) -> None:
        (self.root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        marker = self.root / "oci-layout"
        if not marker.is_file():
            atomic_write(marker, json.dumps({"imageLayoutVersion": "1.0.0"}) + "\n")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with (self.root.parent / f".{self.root.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def _place(source: Path, dest: Path) -> None:
    """Link (or copy) source to dest through a temporary name: dest is never partial."""
    fd, name = tempfile.mkstemp(prefix=f".{dest.name[:12]}.", dir=dest.parent)
    os.close(fd)
    try:
        os.unlink(name)
        try:
            os.link(source, name)
        except OSError:
            shutil.copyfile(source, name)
        os.replace(name, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


@dataclass(frozen=True)
class ConfigChange:
    """What an image adds to its base's config."""

    created: int  # the source date
    platform: Platform
    layers: tuple[tuple[str, str], ...]  # (diff_id, what made it) per added layer
    env: tuple[tuple[str, str], ...]
    path: str  # put in front of the base's PATH
    labels: tuple[tuple[str, str], ...]
    entrypoint: tuple[str, ...]


def image_config(base: ConfigDoc, change: ConfigChange) -> ConfigDoc:
    """The config of base + change: the base's runtime settings, PATH, env and labels over
    them, the new entrypoint (which clears the base's Cmd, as in a Dockerfile)."""
    arch = change.platform.architecture
    runtime = cast(ContainerConfig, {k: v for k, v in (base.get("config") or {}).items()
                                     if k in RUNTIME_KEYS and v})
    env = _with_env(list(runtime.get("Env") or []), "PATH",
                    f"{change.path}:{_env_value(runtime.get('Env') or [], 'PATH')}")
    for name, value in change.env:
        env = _with_env(env, name, value)
    runtime.pop("Cmd", None)
    runtime |= {"Env": env, "Entrypoint": list(change.entrypoint),
                "Labels": {**(runtime.get("Labels") or {}), **dict(change.labels)}}
    created = rfc3339(change.created)
    config: ConfigDoc = {
        "architecture": arch, "os": change.platform.os, "created": created, "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": [*(base.get("rootfs") or {}).get(
            "diff_ids", []), *(diff_id for diff_id, _ in change.layers)]},
        "history": [*(base.get("history") or []),
                    *(HistoryDoc(created=created, created_by=what) for _, what in change.layers)],
    }
    if base.get("variant") and base.get("architecture") == arch:  # the base's CPU variant
        config["variant"] = base["variant"]
    return config


def _env_value(env: list[str], name: str) -> str:
    for item in env:
        if item.startswith(f"{name}="):
            return item.split("=", 1)[1]
    return DEFAULT_PATH


def _with_env(env: list[str], name: str, value: str) -> list[str]:
    """env with name set to value: in place if it is there, else appended."""
    entry = f"{name}={value}"
    if any(item.startswith(f"{name}=") for item in env):
        return [entry if item.startswith(f"{name}=") else item for item in env]
    return [*env, entry]


def manifest(config: Descriptor, layers: list[Descriptor]) -> ManifestDoc:
    return {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "config": config.json(),
            "layers": [layer.json() for layer in layers]}


def write_docker_archive(layout: Layout, image: Descriptor, ref: str, dest: Path,
                         omit: frozenset[str] = frozenset()) -> None:
    """docker_archive written into dest."""
    with dest.open("wb") as out:
        for chunk in docker_archive(layout, image, ref, omit):
            out.write(chunk)


def docker_archive(layout: Layout, image: Descriptor, ref: str,
                   omit: frozenset[str] = frozenset()) -> Generator[bytes, None, None]:
    """The docker-archive tar of an image for `docker load`, tagged ref, as chunks (streamed
    into the engine: no copy of the blobs on disk). Layers in omit (by blob digest) are
    named in it but left out: the engine has them (the base's layers)."""
    image_manifest = layout.read_manifest(image.digest)
    config = image_manifest.config.digest
    names = [f"{layer.digest.split(':')[1]}.tar.gz" for layer in image_manifest.layers]
    config_name = f"{config.split(':')[1]}.json"
    yield from _tar_member(config_name, layout.blob(config))
    for layer, name in zip(image_manifest.layers, names, strict=True):
        if layer.digest not in omit:
            yield from _tar_member(name, layout.blob(layer.digest))
    index = [{"Config": config_name, "RepoTags": [ref], "Layers": names}]
    yield from _tar_bytes("manifest.json", json.dumps(index).encode())
    yield bytes(2 * tarfile.BLOCKSIZE)  # the end of the archive


def _tar_member(name: str, path: Path) -> Iterator[bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = path.stat().st_size, 0o644
    yield info.tobuf(format=tarfile.PAX_FORMAT)
    with path.open("rb") as data:
        while chunk := data.read(CHUNK):
            yield chunk
    yield bytes(-info.size % tarfile.BLOCKSIZE)


def _tar_bytes(name: str, data: bytes) -> Iterator[bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    yield info.tobuf(format=tarfile.PAX_FORMAT)
    yield data + bytes(-len(data) % tarfile.BLOCKSIZE)


def made_by(config: ConfigDoc, index: int) -> str:
    """The history line of the index-th layer (history entries with empty_layer skip none)."""
    made = [h for h in config.get("history") or [] if not h.get("empty_layer")]
    if index < len(made):
        return str(made[index].get("created_by") or made[index].get("comment") or "")
    return ""
