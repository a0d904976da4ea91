"""Artifacts attached to a manifest in a registry, as the OCI distribution spec (1.1) says:
pushed with `subject`, listed by `GET /v2/<name>/referrers/<digest>`. A registry without
the referrers API (one that answers the push without an `OCI-Subject` header, such as
docker-registry 2.8) gets the spec's fallback: an image index under the tag
`sha256-<hex>` that lists them, which the reader looks at when the API answers 404.
"""

from __future__ import annotations

import json
from typing import Literal

from sparkbake.oci import image_layout
from sparkbake.oci.distribution import MANIFEST_TYPES, Session
from sparkbake.oci.documents import DescriptorDoc, IndexDoc, ManifestDoc

__all__ = ["Listing", "attach", "fallback_tag", "listed", "pull"]

Listing = Literal["referrers API", "fallback tag"]


def fallback_tag(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}-{hexdigest}"


def attach(session: Session, layout: image_layout.Layout, artifact: image_layout.Descriptor,
           subject: str) -> Listing:
    """The artifact's blobs and manifest (by digest) into the registry; listed among the
    subject's referrers by the registry or, failing that, by the fallback tag's index."""
    session.push(layout, artifact, [])  # the blobs the registry lacks; no tags
    data = layout.read(artifact.digest)
    response = session.request("PUT", session.url("manifests", artifact.digest),
                               body=lambda: data, headers={"Content-Type": artifact.media_type})
    _expect(session, response.status_code, 201, f"pushing the artifact {artifact.digest[:19]}")
    if response.headers.get("OCI-Subject"):
        return "referrers API"
    _add_to_fallback(session, layout, artifact, subject)
    return "fallback tag"


def _add_to_fallback(session: Session, layout: image_layout.Layout,
                     artifact: image_layout.Descriptor, subject: str) -> None:
    tag = fallback_tag(subject)
    index: IndexDoc = _fallback_index(session, subject) or {
        "schemaVersion": 2, "mediaType": image_layout.INDEX_TYPE, "manifests": []}
    if any(m["digest"] == artifact.digest for m in index["manifests"]):
        return
    index["manifests"].append(_entry(layout.read_manifest_doc(artifact.digest), artifact))
    data = image_layout.canonical(index)
    response = session.request("PUT", session.url("manifests", tag), body=lambda: data,
                               headers={"Content-Type": image_layout.INDEX_TYPE})
    _expect(session, response.status_code, 201, f"pushing the referrers index {tag}")


def _entry(doc: ManifestDoc, artifact: image_layout.Descriptor) -> DescriptorDoc:
    """A referrer as the spec lists it: the descriptor, its artifactType and annotations."""
    entry = artifact.json()
    entry["artifactType"] = doc.get("artifactType") or doc["config"]["mediaType"]
    if doc.get("annotations"):
        entry["annotations"] = doc["annotations"]
    return entry


def listed(session: Session, subject: str) -> tuple[list[DescriptorDoc], Listing | None]:
    """The subject's referrers (descriptors with artifactType) and where they were found;
    ([], None) when neither the API nor the fallback tag has any."""
    response = session.request("GET", session.url("referrers", subject),
                               headers={"Accept": image_layout.INDEX_TYPE})
    if response.status_code == 200:
        found = list(json.loads(response.content).get("manifests", []))
        if found:
            return found, "referrers API"
    index = _fallback_index(session, subject)
    return (list(index["manifests"]), "fallback tag") if index else ([], None)


def _fallback_index(session: Session, subject: str) -> IndexDoc | None:
    response = session.request("GET", session.url("manifests", fallback_tag(subject)),
                               headers={"Accept": MANIFEST_TYPES})
    if response.status_code == 404:
        return None
    _expect(session, response.status_code, 200, f"reading {fallback_tag(subject)}")
    index: IndexDoc = json.loads(response.content)
    return index


def pull(session: Session, layout: image_layout.Layout, digest: str) -> tuple[ManifestDoc, bytes]:
    """An artifact of one blob out of the registry: its manifest and the blob."""
    session.pull(digest, layout)
    doc = layout.read_manifest_doc(digest)
    return doc, layout.read(doc["layers"][0]["digest"])


def _expect(session: Session, status: int, expected: int, step: str) -> None:
    if status != expected:
        remote = session.remote
        raise session.error(f"{remote.host}/{remote.path}: {step} failed (HTTP {status})",
                            "check that the registry takes OCI artifacts and pushes")
