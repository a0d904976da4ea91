"""OCI artifacts: a manifest of one blob, typed by artifactType, that refers to another
manifest by `subject` (the image it is about). The registry lists such manifests as the
subject's referrers; an OCI layout keeps them beside the image.
"""

from __future__ import annotations

from sparkbake.oci import image_layout
from sparkbake.oci.documents import ManifestDoc

__all__ = ["EMPTY", "Artifact", "add", "read"]

# the spec's empty config: `{}` as the config of a manifest that is not an image
EMPTY = image_layout.Descriptor(
    "application/vnd.oci.empty.v1+json",
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", 2)

Artifact = tuple[str, bytes]  # (artifactType, the blob)


def document(artifact_type: str, blob: image_layout.Descriptor, subject: image_layout.Descriptor,
             annotations: dict[str, str]) -> ManifestDoc:
    doc: ManifestDoc = {"schemaVersion": 2, "mediaType": image_layout.MANIFEST_TYPE,
                        "artifactType": artifact_type, "config": EMPTY.json(),
                        "layers": [blob.json()], "subject": subject.json()}
    if annotations:
        doc["annotations"] = annotations
    return doc


def add(layout: image_layout.Layout, artifact_type: str, data: bytes,
        subject: image_layout.Descriptor, annotations: dict[str, str] | None = None
        ) -> image_layout.Descriptor:
    """The artifact's blobs and manifest into layout; the manifest's descriptor."""
    layout.add_bytes(b"{}", EMPTY.media_type)
    blob = layout.add_bytes(data, artifact_type)
    doc = document(artifact_type, blob, subject, annotations or {})
    return layout.add_bytes(image_layout.canonical(doc), image_layout.MANIFEST_TYPE)


def read(layout: image_layout.Layout, manifest: str) -> tuple[ManifestDoc, bytes]:
    """An artifact's manifest and its one blob."""
    doc = layout.read_manifest_doc(manifest)
    return doc, layout.read(doc["layers"][0]["digest"])
