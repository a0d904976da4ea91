"""The SBOM of a baked image, kept in build/oci beside it: an artifact manifest whose subject
is the image, named `<tag>.sbom` in the layout's index. Made once per image digest (reading
the layers of a 10 GB image takes about a minute), at bake time, or by publish for an image
baked before sparkbake made SBOMs.
"""

from __future__ import annotations

from sparkbake.attest import imagefiles
from sparkbake.console.display import Console
from sparkbake.oci import artifacts, image_layout

__all__ = ["MEDIA_TYPE", "SUFFIX", "ensure_sbom", "find_sbom"]

SUFFIX = ".sbom"
MEDIA_TYPE = "application/vnd.cyclonedx+json"  # the artifact's type: a CycloneDX JSON SBOM


def find_sbom(layout: image_layout.Layout, tag: str,
              image: image_layout.Descriptor) -> image_layout.Descriptor | None:
    """The layout's SBOM artifact of image, if it has one for exactly this digest."""
    found = layout.find(tag + SUFFIX)
    if found is None or not layout.has(found.digest):
        return None
    return found if layout.read_json(found.digest)["subject"]["digest"] == image.digest else None


def ensure_sbom(layout: image_layout.Layout, tag: str,
                image: image_layout.Descriptor, *, console: Console) -> image_layout.Descriptor:
    """The image's SBOM artifact, made from its layers if the layout lacks it."""
    found = find_sbom(layout, tag, image)
    if found is not None:
        return found
    # the CycloneDX library takes a noticeable part of a second to import: only to make one
    from sparkbake.attest import sbom

    document = sbom.document(imagefiles.read(layout, image, console=console), image)
    made = artifacts.add(layout, MEDIA_TYPE, document, image)
    layout.tag(tag + SUFFIX, made)
    console.detail(f"sbom: {tag}{SUFFIX} = {made.digest} ({len(document)} bytes)")
    return made
