"""publish's part: the image's SBOM, provenance and smoke statements attached to its digest
in the registry, and the digest signed (or the release said to be unsigned).

The statements go as DSSE envelopes (signed with the key, if any); the provenance names the
SBOM's digest among its byproducts, so a signed provenance vouches for the SBOM too. The
signature is cosign's: a simple-signing payload under the tag `sha256-<hex>.sig`, one layer
per key, as cosign adds them. A digest signed already is published again only with one of
its keys, unless --force (which adds another key's signature beside the first).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path

from sparkbake import records
from sparkbake.attest import signing, statements, stored
from sparkbake.attest.signing import SigningKey
from sparkbake.bake import runtime_image
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.core.folders import Folders
from sparkbake.core.smoke_record import SmokeReport
from sparkbake.errors import PublishError
from sparkbake.files import read_json
from sparkbake.oci import artifacts, image_layout, referrers
from sparkbake.oci.distribution import Session
from sparkbake.oci.documents import ConfigDoc, DescriptorDoc, ManifestDoc
from sparkbake.planning import Plan
from sparkbake.publish import releases
from sparkbake.publish.record import Attached

__all__ = ["attach", "attach_baked", "sign"]


def attach_baked(session: Session, config: Config, plan: Plan, baked: runtime_image.Image,
                 key: SigningKey | None, tags: Sequence[str], force: bool, *,
                 console: Console) -> Attached:
    """attach for the tag's baked image, with the smoke record of exactly that image."""
    layout = image_layout.Layout(baked.layout, console)
    recorded = releases.image_manifest(layout, baked.image) or {}
    return attach(session, config, plan, layout, baked.image,
                  _smoke_of(Folders.of(config).smoke_record(plan.tag.name), baked.config),
                  recorded, key, tags, force, console=console)


def _smoke_of(path: Path, image_id: str) -> SmokeReport | None:
    try:
        record = records.from_json(SmokeReport, read_json(path))
    except (OSError, ValueError, KeyError, TypeError):  # none, or unreadable: publish said so
        return None
    return record if record.image_id == image_id else None


def attach(session: Session, config: Config, plan: Plan, layout: image_layout.Layout,
           image: image_layout.Descriptor, smoke: SmokeReport | None, recorded: BakedManifest,
           key: SigningKey | None, tags: Sequence[str], force: bool, *,
           console: Console) -> Attached:
    """Push the image's artifacts with image as their subject, then sign the digest as
    published in this repository under `tags`."""
    repository = f"{session.remote.host}/{session.remote.path}"
    signed = check_signers(session, layout, repository, image.digest, key, force)
    sbom = stored.ensure_sbom(layout, plan.tag.name, image, console=console)
    sbom_blob = image_layout.Descriptor.of(layout.read_manifest_doc(sbom.digest)["layers"][0])
    made = {"provenance": statements.provenance(config, plan, repository, image.digest,
                                                recorded, sbom_blob)}
    if smoke is not None:
        made["smoke"] = statements.test_result(repository, image.digest, smoke)
    listing = referrers.attach(session, layout, sbom, image.digest)
    pushed = {what: _statement(session, layout, image, data, key) for what, data in made.items()}
    console.detail(f"attached to {image.digest[:19]}: sbom, {', '.join(pushed)} ({listing})")
    return Attached(sbom.digest, pushed["provenance"], pushed.get("smoke"), listing,
                    sign(session, layout, repository, image.digest, key, tags, signed,
                         console=console))


def _statement(session: Session, layout: image_layout.Layout, image: image_layout.Descriptor,
               data: bytes, key: SigningKey | None) -> str:
    predicate = _predicate_type(data)
    artifact = artifacts.add(layout, signing.DSSE_TYPE, signing.envelope(data, key), image,
                             {signing.PREDICATE_ANNOTATION: predicate})
    referrers.attach(session, layout, artifact, image.digest)
    return artifact.digest


def _predicate_type(data: bytes) -> str:
    return str(json.loads(data)["predicateType"])


def check_signers(session: Session, layout: image_layout.Layout, repository: str, digest: str,
                  key: SigningKey | None, force: bool) -> list[DescriptorDoc]:
    """A digest signed already is published again with one of its keys, or with --force:
    unsigned statements beside the signed ones, or a second signer, are asked for. Its
    signatures in the registry now (the `.sig` manifest's layers, pulled into layout)."""
    layers = signature_layers(session, layout, digest)
    if not layers or force:
        return layers
    if key is None:
        raise PublishError(
            f"{repository}@{digest[:19]} is signed already ({len(layers)} signature(s)); "
            "publishing it again unsigned would attach unsigned statements to it",
            "give --sign-key with the key it was signed with, or --force")
    if not any(_signed_by(layout, layer, key) for layer in layers):
        raise PublishError(
            f"{repository}@{digest[:19]} is signed already, by other keys than {key.path}",
            "give the key it was signed with, or --force to add this key's signature beside "
            "the others (both then verify)")
    return layers


def signature_layers(session: Session, layout: image_layout.Layout,
                     digest: str) -> list[DescriptorDoc]:
    """The layers of digest's `.sig` manifest in the registry (pulled into layout): one per
    signature; none when it is not signed."""
    found = session.manifest_digest(signing.signature_tag(digest))
    if found is None:
        return []
    session.pull(found, layout)
    return layout.read_manifest_doc(found)["layers"]


def _signed_by(layout: image_layout.Layout, layer: DescriptorDoc, key: SigningKey) -> bool:
    return key.public().verifies(layout.read(layer["digest"]), signing.layer_signature(layer))


def sign(session: Session, layout: image_layout.Layout, repository: str, digest: str,
         key: SigningKey | None, tags: Sequence[str], signed: list[DescriptorDoc], *,
         console: Console) -> str | None:
    """cosign's signature of digest, as published in repository under tags, under
    `sha256-<hex>.sig`, beside the other keys' among `signed` (its layers there now, from
    check_signers; this key's own earlier one replaced); None (and said) without a key."""
    if key is None:
        console.notice(f"publish: {repository}@{digest[:19]} is unsigned (no --sign-key, no "
                       "SPARKBAKE_SIGNING_KEY)")
        return None
    payload = signing.simple_signing(repository, digest, tags)
    blob = layout.add_bytes(payload, signing.SIMPLE_SIGNING)
    others = [layer for layer in signed if not _signed_by(layout, layer, key)]
    layer = blob.json()
    layer["annotations"] = {
        signing.COSIGN_SIGNATURE: base64.b64encode(key.sign(payload)).decode()}
    layers = [*others, layer]
    config = layout.add_bytes(image_layout.canonical(_signature_config(layers)),
                              image_layout.CONFIG_TYPE)
    doc: ManifestDoc = {"schemaVersion": 2, "mediaType": image_layout.MANIFEST_TYPE,
                        "config": config.json(), "layers": layers}
    manifest = layout.add_bytes(image_layout.canonical(doc), image_layout.MANIFEST_TYPE)
    session.push(layout, manifest, [signing.signature_tag(digest)])
    console.detail(f"signed {repository}@{digest[:19]} with {key.path} "
                   f"({signing.signature_tag(digest)})")
    return manifest.digest


def _signature_config(layers: list[DescriptorDoc]) -> ConfigDoc:
    """The image config cosign writes for a signature manifest: its layers' diff IDs."""
    zero = "0001-01-01T00:00:00Z"
    return {"architecture": "", "config": {}, "created": zero,
            "history": [{"created": zero} for _ in layers], "os": "",
            "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]}}
