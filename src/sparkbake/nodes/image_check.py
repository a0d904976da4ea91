"""up --require-signature: before anything runs on a node, the image each node's engine
holds under the name up runs is the tag's signed release, by the signed manifest digest or,
where a relay rewrote the manifest, by the config digest and layer DiffIDs the signed
manifest names (attest/image_identity.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from sparkbake.attest import image_identity, signing
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Tag
from sparkbake.console.display import Console
from sparkbake.errors import VerificationError
from sparkbake.nodes.engines import Node, connect
from sparkbake.oci import image_layout, registry_access

__all__ = ["require_signed"]


def require_signed(tag: Tag, image: str, key_path: Path, nodes: list[Node], *,
                   settings: Settings, console: Console) -> None:
    """The tag's release as published under its name (repository:NAME, signed by the key
    under that name) against the image each of nodes holds as image; one line per node."""
    key = signing.public_key(key_path)
    name = tag.release or tag.name
    session = registry_access.open_session(tag.repository, settings, VerificationError,
                                           console=console)
    digest = session.manifest_digest(name)
    if digest is None:
        raise VerificationError(f"{tag.repository}:{name} is not in its registry: no signed "
                                "release to check the nodes' image against",
                                "publish it with --sign-key, or leave --require-signature out")
    with tempfile.TemporaryDirectory(prefix="sparkbake-verify.") as work:
        signed = image_identity.signed_images(
            session, digest, key, image_layout.Layout(Path(work), console), name)
    for node in list(dict.fromkeys(nodes)):
        client = connect(node)
        try:
            console.notice(image_identity.check_held(client, [image], signed,
                                                     node.url).line())
        finally:
            client.close()
