"""Which image an engine holds, checked against a signed release by one of two identities.

The signature covers the release's manifest digest. A relay that copies the image and
rewrites its manifest (recompressed layers, another media type) gives it another manifest
digest, and the signature and the attached statements do not follow. What does follow is in
what the signed manifest names: its config, by digest, and through the config the
uncompressed digest of each layer (its DiffIDs). So an image an engine holds is the signed
release when either

- the engine pulled it by the signed manifest digest (its RepoDigests name it), or
- its image ID is the config digest the signed manifest names (Docker's image store keys an
  image by its config), and its layers' DiffIDs are the config's, in order.

An engine checks each layer it pulls or loads against the config's DiffID, so the second
identity holds the layers' contents as well as the first does. An engine on the containerd
image store keys an image by its manifest instead; there only the first identity is known.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from sparkbake.attest import verification
from sparkbake.attest.signing import PublicKey
from sparkbake.errors import VerificationError
from sparkbake.oci import docker_engine, image_layout
from sparkbake.oci.distribution import MANIFEST_TYPES, Session
from sparkbake.oci.docker_engine import Client

__all__ = ["HeldImage", "Identity", "NodeCheck", "SignedImage", "check_held", "identify",
           "identity_line", "read_document", "signed_images"]

Identity = Literal["manifest digest", "config digest and DiffIDs"]
NOT_IT = "do not run it: it is not the signed release; deploy the release to the node again"


@dataclass(frozen=True)
class SignedImage:
    """What a signed manifest names: its config and, through it, its layers' DiffIDs."""

    reference: str  # repository@manifest digest, as signed (a platform's, under an index)
    manifest: str
    config: str
    diff_ids: tuple[str, ...]
    index: str | None = None  # the signed index that lists it (a multi-platform release)

    @property
    def signed(self) -> set[str]:
        """The digests an engine that pulled it by the signed digest holds it by."""
        return {self.manifest} if self.index is None else {self.manifest, self.index}


@dataclass(frozen=True)
class HeldImage:
    """An image as an engine holds it (`docker image inspect`)."""

    image_id: str
    manifests: tuple[str, ...]  # the manifest digests of its RepoDigests
    diff_ids: tuple[str, ...]

    @classmethod
    def of_attrs(cls, attrs: dict[str, Any]) -> HeldImage:
        held = attrs.get("RepoDigests") or []
        return cls(str(attrs.get("Id")), tuple(r.rpartition("@")[2] for r in held if "@" in r),
                   tuple((attrs.get("RootFS") or {}).get("Layers") or ()))


def identify(held: HeldImage, signed: SignedImage, where: str) -> Identity:
    """The identity by which held is the signed image, or one VerificationError (exit 7)
    naming what differs; where names the image (node and name) in that line."""
    by_manifest = not signed.signed.isdisjoint((*held.manifests, held.image_id))
    if held.diff_ids != signed.diff_ids:
        raise VerificationError(f"{where}: {_layers_differ(held.diff_ids, signed)}", NOT_IT)
    if by_manifest:
        return "manifest digest"
    if held.image_id == signed.config:
        return "config digest and DiffIDs"
    raise VerificationError(
        f"{where}: its config {held.image_id[:19]} is not {signed.config[:19]}, the one "
        f"{signed.reference} names (the same layers, another config: env, entrypoint or "
        "labels)", NOT_IT)


@dataclass(frozen=True)
class NodeCheck:
    """A node's image found to be the signed release, and by which identity."""

    node: str  # the engine's URL
    image: str  # the name the node holds it under
    reference: str  # the signed repository@digest it is (a platform's, under an index)
    identity: Identity
    image_id: str  # its config digest
    manifests: tuple[str, ...]  # the manifest digests the node holds it by (RepoDigests)
    layers: int  # the DiffIDs checked
    signed: str  # the digest the signature covers (an index's, for a multi-platform release)

    def line(self) -> str:
        """The result line: what the node holds, what it is, and by what."""
        if self.identity == "manifest digest":
            how = f"by its manifest digest {self.signed[:19]}"
        else:
            seen = ", ".join(m[:19] for m in self.manifests) or "no manifest digest"
            how = (f"by its config digest {self.image_id[:19]} and {self.layers} layer DiffIDs "
                   f"(its manifest was rewritten: held as {seen})")
        return f"verified node {self.node}: {self.image} = {self.reference} {how}"


def check_held(client: Client, names: list[str], signed: list[SignedImage],
               node: str) -> NodeCheck:
    """The first of names the engine at URL node holds, checked against the signed image
    (one of an index's platforms); VerificationError when it holds none or another."""
    for name in names:
        attrs = docker_engine.image_attrs_or_none(client, name)
        if attrs is None:
            continue
        held = HeldImage.of_attrs(attrs)
        errors: list[VerificationError] = []
        for one in signed:
            try:
                identity = identify(held, one, f"node {node}: {name}")
            except VerificationError as exc:
                errors.append(exc)
                continue
            return NodeCheck(node, name, one.reference, identity, held.image_id,
                             held.manifests, len(one.diff_ids), one.index or one.manifest)
        raise errors[0]
    also = f", nor an image of its config {names[-1][:19]}" if len(names) > 1 else ""
    raise VerificationError(f"node {node} holds no {names[0]}{also}",
                            "deploy the release to it first (sparkbake deploy), or name the "
                            "image it holds with --image")


def _layers_differ(held: tuple[str, ...], signed: SignedImage) -> str:
    theirs = signed.diff_ids
    if len(held) != len(theirs):
        return f"{len(held)} layers where the signed {signed.reference} has {len(theirs)}"
    index = next(i for i, (a, b) in enumerate(zip(held, theirs, strict=True)) if a != b)
    return (f"layer {index + 1} of {len(theirs)} has DiffID {held[index][:19]} where the "
            f"signed {signed.reference} has {theirs[index][:19]}")


def identity_line(identity: Identity, signed: SignedImage, held: HeldImage) -> str:
    """What was checked, for the result line."""
    if identity == "manifest digest":
        return f"by its manifest digest {(signed.index or signed.manifest)[:19]}"
    seen = ", ".join(m[:19] for m in held.manifests) or "no manifest digest"
    return (f"by its config digest {signed.config[:19]} and {len(signed.diff_ids)} layer "
            f"DiffIDs (its manifest was rewritten: held as {seen})")


def signed_images(session: Session, digest: str, key: PublicKey, work: image_layout.Layout,
                  tag: str | None = None) -> list[SignedImage]:
    """The image digest as signed by key in the session's repository (under tag, when
    asked by one): its config and DiffIDs; an index's, each platform's (the index's
    signature covers its children: it names them by digest)."""
    repository = f"{session.remote.host}/{session.remote.path}"
    verification.check_signature(session, repository, digest, key, work, tag)
    document = read_document(session, "manifests", digest)
    if document.get("mediaType") == image_layout.INDEX_TYPE:
        return [_image(session, repository, str(child["digest"]), index=digest)
                for child in document.get("manifests", [])]
    return [_image(session, repository, digest, document)]


def _image(session: Session, repository: str, digest: str,
           manifest: dict[str, Any] | None = None, *, index: str | None = None) -> SignedImage:
    manifest = manifest or read_document(session, "manifests", digest)
    config = str(manifest["config"]["digest"])
    diff_ids = read_document(session, "blobs", config).get("rootfs", {}).get("diff_ids", [])
    return SignedImage(f"{repository}@{digest}", digest, config, tuple(map(str, diff_ids)),
                       index)


def read_document(session: Session, kind: str, digest: str) -> dict[str, Any]:
    """A manifest or a config by digest, held to its digest: what the registry serves under
    a digest is trusted only when its bytes hash to it."""
    response = session.request("GET", session.url(kind, digest),
                               headers={"Accept": MANIFEST_TYPES})
    data = response.content if response.status_code == 200 else b""
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise VerificationError(f"{session.remote.host}/{session.remote.path}: the registry "
                                f"serves {'no' if not data else 'other'} bytes for {digest}",
                                "check the registry; the signed image cannot be read from it")
    document: dict[str, Any] = json.loads(data)
    return document
