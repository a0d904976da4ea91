"""The release's image on a node, checked: by the digest the node pulled, or by the image
ID (its config digest) of an image present or streamed there, and, with --require-signature,
against what the signed manifest names (attest/image_identity.py), so that a copy whose
manifest a relay rewrote passes by its config digest and layer DiffIDs."""

from __future__ import annotations

from sparkbake.attest import image_identity
from sparkbake.attest.image_identity import HeldImage, Identity, SignedImage
from sparkbake.console.display import Console
from sparkbake.errors import PublishError
from sparkbake.nodes.engines import Node
from sparkbake.oci import docker_engine
from sparkbake.oci.docker_engine import Client
from sparkbake.publish.record import Release

__all__ = ["check_image_id", "check_repo_digest", "tag_and_verify"]


def check_image_id(node: Node, ref: str, release: Release, found: str | None) -> None:
    """The node's image under ref must be the release's: its image ID (the config digest),
    or its manifest digest, which an engine with the containerd image store uses as ID."""
    if found is not None and found in (release.image_id, release.digest):
        return
    raise PublishError(f"node {node.url}: {ref} is {found[:19] if found else 'missing'}, not "
                       f"the released image {release.image_id[:19]}",
                       "the registry or the node's engine holds another image under that "
                       "digest or name: check both, then deploy again (--stream sends ours)")


def tag_and_verify(release: Release, tag_ref: str, signed: tuple[SignedImage, ...], node: Node,
                   client: Client, pulled: bool, *, console: Console) -> tuple[str, Identity]:
    """Name the image on the node (the published names and the tag's own); what was pulled
    (the pinned digest) or loaded (the image ID), then each name, must be the release's
    image (and, where signed is given, the signed one). Returns its ID on the node and the
    identity it was checked by."""
    source = release.pinned if pulled else release.image_id
    found = _image_id(client, source)
    check_image_id(node, source, release, found)
    identity, how = _identity(release, signed, node, client, source, pulled)
    names = list(dict.fromkeys([*release.images, tag_ref]))
    for name in names:
        repository, tag = name.rsplit(":", 1)
        client.api.tag(source, repository, tag, force=True)
        check_image_id(node, name, release, _image_id(client, name))
    console.notice(f"deploy: {node.url}: {', '.join([source, *names])} = {str(found)[:19]} "
                   f"(verified {how})")
    return str(found), identity


def _identity(release: Release, signed: tuple[SignedImage, ...], node: Node, client: Client,
              source: str, pulled: bool) -> tuple[Identity, str]:
    """What the node's image was checked by, and the words for it: against the signed
    manifest where --require-signature read it (a copy whose manifest a relay rewrote
    passes by its config and DiffIDs), else the record's pinned digest or image ID."""
    mine = next((one for one in signed if one.config == release.image_id), None)
    if mine is not None:
        held = HeldImage.of_attrs(docker_engine.image_attrs(client, source))
        identity = image_identity.identify(held, mine, f"node {node.url}: {source}")
        return identity, image_identity.identity_line(identity, mine, held)
    if pulled:
        return "manifest digest", f"by its manifest digest {release.pinned.split('@')[1][:19]}"
    return "config digest and DiffIDs", f"by its config digest {release.image_id[:19]} (the " \
        "image ID, which names its layers' DiffIDs)"


def check_repo_digest(release: Release, node: Node, client: Client) -> str:
    """The node's engine must hold the image by the digest it pulled (the release's, an
    index for a multi-platform release): its RepoDigests name it."""
    held = client.images.get(release.pinned).attrs.get("RepoDigests") or []
    if release.pinned not in held:
        raise PublishError(f"node {node.url}: the pulled image is held as "
                           f"{', '.join(held) or 'no repository digest'}, not as "
                           f"{release.pinned}", "check the node's registry and deploy again")
    return release.pinned


def _image_id(client: Client, ref: str) -> str | None:
    import docker.errors

    try:
        return str(client.images.get(ref).id)
    except docker.errors.ImageNotFound:
        return None
