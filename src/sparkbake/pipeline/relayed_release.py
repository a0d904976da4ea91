"""verify-release of an image digest that has no signature, which may be a relay's copy of a
signed release.

A copy whose manifest was rewritten (its layers compressed again, another media type) has
another manifest digest, and the release's signature and statements do not follow it. What
the copy keeps is the release's config, by digest, and through it the layers' DiffIDs. So
before such an image is called unsigned, the signed releases it may be a copy of are looked
up: those of this project's release records (build/releases, where a versions.yaml is), and
the release its config's tag label names in its own repository. One signed by the key whose
manifest names the same config is named in one line, with the check that does hold for such
a copy: the image a node holds, by its config digest and DiffIDs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sparkbake.attest import image_identity, signing
from sparkbake.attest.signing import PublicKey
from sparkbake.errors import FatalError, VerificationError
from sparkbake.oci import image_layout, registry_access
from sparkbake.oci.distribution import Session
from sparkbake.publish import releases
from sparkbake.run import Run

__all__ = ["explain_unsigned"]


def explain_unsigned(run: Run, session: Session, digest: str, key: PublicKey,
                     work: Path) -> None:
    """Nothing where digest is signed (verify-release checks that signature itself), or is
    no copy of a release signed by key that is known here; VerificationError (exit 7) naming
    the signed release whose config it holds."""
    if session.manifest_digest(signing.signature_tag(digest)) is not None:
        return
    manifest = image_identity.read_document(session, "manifests", digest)
    config = (manifest.get("config") or {}).get("digest")
    if not isinstance(config, str):
        return  # an index: its children are no copy of one image
    for pinned, tag in _candidates(run, session, config):
        if _signed_with(run, pinned, tag, key, config, work / pinned[-12:]):
            raise _copy_of(run, session, digest, config, pinned, key)


def _candidates(run: Run, session: Session, config: str) -> Iterator[tuple[str, str]]:
    """(repository@digest, tag) of each release that may have config: the records' that
    name it, then the release of the config's tag label in the copy's repository."""
    yield from _recorded(run, config)
    from sparkbake.bake.runtime_image import TAG_LABEL  # the bake's, read here only

    labels = image_identity.read_document(session, "blobs", config).get("config", {})
    tag = (labels.get("Labels") or {}).get(TAG_LABEL)
    found = session.manifest_digest(tag) if isinstance(tag, str) else None
    if found is not None:
        yield f"{session.remote.host}/{session.remote.path}@{found}", str(tag)


def _recorded(run: Run, config: str) -> Iterator[tuple[str, str]]:
    """The release records of the project here whose image (or a platform's) is config;
    none where no versions.yaml is read (verify-release runs anywhere)."""
    try:
        folder = run.folders.releases
    except FatalError:
        return
    for entry in releases.entries(folder):
        try:
            record = releases.read_record(folder, entry.tag, settings=run.settings)
        except FatalError:  # an index line whose record is gone
            continue
        if config in {record.image_id, *(p.image_id for p in record.platforms)}:
            yield record.pinned, record.tag


def _signed_with(run: Run, pinned: str, tag: str, key: PublicKey, config: str,
                 work: Path) -> bool:
    """Whether pinned is signed by key under tag in its registry and names config."""
    repository, _, digest = pinned.partition("@")
    try:
        session = registry_access.open_session(repository, run.settings, VerificationError,
                                               console=run.console)
        signed = image_identity.signed_images(
            session, digest, key, image_layout.Layout(work, run.console), tag)
    except VerificationError:
        return False
    return any(one.config == config for one in signed)


def _copy_of(run: Run, session: Session, digest: str, config: str, pinned: str,
             key: PublicKey) -> VerificationError:
    copy = f"{session.remote.host}/{session.remote.path}@{digest}"
    check = run.settings.command("verify-release", pinned, "--key", str(key.path), "--hosts",
                                 "URL,URL", "--image", copy)
    return VerificationError(
        f"{copy} is not signed: it holds the config {config[:19]} of the signed release "
        f"{pinned}, under another manifest (a relay's copy: no signature covers it)",
        f"verify the release and, by its config digest and DiffIDs, the image each node "
        f"holds: `{check}`")
