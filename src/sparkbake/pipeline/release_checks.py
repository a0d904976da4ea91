"""The commands of signed releases: `keys generate`, `verify-release`, and the signing key
publish uses (`--sign-key`, else SPARKBAKE_SIGNING_KEY)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from sparkbake import records
from sparkbake.attest import image_identity, signing, verification
from sparkbake.attest.signing import PublicKey, SigningKey
from sparkbake.config import versions as config_mod
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.errors import UsageError, VerificationError
from sparkbake.oci import image_layout, registry_access
from sparkbake.oci.distribution import MANIFEST_TYPES, Session
from sparkbake.pipeline import relayed_release, release_rebuild
from sparkbake.publish import releases
from sparkbake.run import Run

__all__ = ["keys_generate", "require_signature", "require_signed", "signing_key",
           "split_reference", "verify_release"]


def keys_generate(run: Run, path: Path) -> int:
    passphrase = run.settings.signing.passphrase
    private, public = signing.generate(path, passphrase)
    protected = "protected by SPARKBAKE_SIGNING_PASSPHRASE" if passphrase else \
        "NOT protected: set SPARKBAKE_SIGNING_PASSPHRASE to encrypt it"
    run.console.result(f"keys: {private} (private, {protected}), {public} (public: give it to "
                   "whoever verifies)")
    return 0


def signing_key(given: Path | None, settings: Settings) -> SigningKey | None:
    """The key of --sign-key, else of SPARKBAKE_SIGNING_KEY; None: publish unsigned."""
    signing_settings = settings.signing
    path = given or signing_settings.key
    return signing.signing_key(path, signing_settings.passphrase) if path else None


def split_reference(reference: str) -> tuple[str, str]:
    """(repository, tag or digest) of `HOST/PATH:TAG` or `HOST/PATH@sha256:...`, each part
    in Docker's grammar (checked before anything is sent)."""
    repository, at, name = reference.partition("@")
    if not at:
        repository, colon, name = reference.rpartition(":")
        if not colon or "/" in name:
            raise UsageError(f"{reference!r} names no tag or digest",
                             "give HOST/PATH:TAG or HOST/PATH@sha256:<hex>")
    if not config_mod.REPOSITORY.fullmatch(repository):
        raise UsageError(f"{reference!r}: {repository!r} is not a repository name",
                         "write HOST[:PORT]/PATH in lower case, e.g. localhost:5000/name")
    if at and not config_mod.DIGEST.fullmatch(name):
        raise UsageError(f"{reference!r}: {name!r} is not a digest", "write sha256:<64 hex>")
    if not at and not config_mod.TAG_NAME.fullmatch(name):
        raise UsageError(f"{reference!r}: {name!r} is not an image tag",
                         "use letters, digits, '_', '.' and '-', at most 128 characters")
    return repository, name


def verify_release(run: Run, reference: str, key_path: Path, against: Path | None, *,
                   as_json: bool = False, rebuild: bool = False, hosts: str | None = None,
                   image: str | None = None) -> int:
    settings, console = run.settings, run.console
    if rebuild and against is None:
        raise UsageError("--rebuild builds the tag the provenance names in a versions.yaml: "
                         "add --against VERSIONS_YAML")
    if image is not None and hosts is None:
        raise UsageError("--image names the image on the nodes of --hosts: add --hosts URL,URL")
    repository, name = split_reference(reference)
    key = signing.public_key(key_path)
    session = registry_access.open_session(repository, settings, VerificationError, console=console)
    digest = session.manifest_digest(name)
    if digest is None:
        raise VerificationError(f"{reference}: not in the registry",
                                "check the name and the registry")
    tag = None if name.startswith("sha256:") else name
    with tempfile.TemporaryDirectory(prefix="sparkbake-verify.") as work:
        relayed_release.explain_unsigned(run, session, digest, key, Path(work) / "relayed")
        images = _digests(session, repository, digest, key, Path(work), tag, console=console)
        checked = [verification.verify(session, d, key,
                                       image_layout.Layout(Path(work) / d[7:19], console),
                                       tag if d == digest else None,
                                       console=console)  # not an index's child
                   for d in images]
        nodes = [] if hosts is None else \
            on_nodes(run, session, digest, key, Path(work) / "nodes", tag, hosts, image)
    built_as = [_shown(one, key, against, console=console) for one in checked]
    if rebuild and against is not None:  # once every signature and statement held
        pinned = Run.of(config_mod.load(against), settings, console)
        for one, tag in zip(checked, built_as, strict=True):
            release_rebuild.require_rebuilt(session, pinned, tag, one.digest)
    if as_json:
        print(json.dumps([_as_json(c, nodes if hosts is not None else None) for c in checked],
                         indent=2))
    return 0


def _as_json(one: verification.Verified,
             nodes: list[image_identity.NodeCheck] | None) -> dict[str, object]:
    """An image's statements; with --hosts, each node that holds it and by which identity."""
    shown: dict[str, object] = {"reference": one.reference, "provenance": one.provenance,
                                "smoke": one.smoke}
    if nodes is not None:
        shown["nodes"] = [records.to_json(n) for n in nodes if n.reference == one.reference]
    return shown


def on_nodes(run: Run, session: Session, digest: str, key: PublicKey, work: Path,
             tag: str | None, hosts: str, image: str | None) -> list[image_identity.NodeCheck]:
    """verify-release --hosts: each node's image (image, else the signed digest or, from a
    relay that rewrote its manifest, the config it names) is the signed one; each node's
    check, its line printed."""
    from sparkbake.nodes import engines

    signed = image_identity.signed_images(session, digest, key,
                                          image_layout.Layout(work, run.console), tag)
    repository = f"{session.remote.host}/{session.remote.path}"
    names = [image] if image else [f"{repository}@{digest}", *(s.config for s in signed)]
    checks: list[image_identity.NodeCheck] = []
    for node in engines.parse_hosts(hosts):
        client = engines.connect(node)
        try:
            checks.append(image_identity.check_held(client, names, signed, node.url))
        finally:
            client.close()
        run.console.result(checks[-1].line())
    return checks


def _shown(one: verification.Verified, key: PublicKey, against: Path | None, *,
           console: Console) -> str:
    """Print what the image is made of, and that it matches against's pins; the tag its
    provenance names."""
    for line in one.lines(key):
        console.result(line)
    tag = str(one.provenance["predicate"]["buildDefinition"]["externalParameters"]["tag"])
    if against is not None:
        tag = verification.check_against(config_mod.load(against), one.provenance)
        console.result(f"  matches {against} for {tag}: upstream, patches, locks, inputs")
    return tag


def _digests(session: Session, repository: str, digest: str, key: PublicKey,
             work: Path, tag: str | None, *, console: Console) -> list[str]:
    """The image digests to verify: digest itself, or, for an index (a multi-platform
    release), each platform's, once the index's own signature holds (under tag)."""
    response = session.request("GET", session.url("manifests", digest),
                               headers={"Accept": MANIFEST_TYPES})
    doc = json.loads(response.content) if response.status_code == 200 else {}
    if doc.get("mediaType") != image_layout.INDEX_TYPE:
        return [digest]
    verification.check_signature(session, repository, digest, key,
                                 image_layout.Layout(work / "index", console), tag)
    console.result(f"verified {repository}@{digest}: the index is signed by {key.path}")
    return [str(m["digest"]) for m in doc.get("manifests", [])]


def require_signature(run: Run, pinned: str, tag: str,
                      key_path: Path) -> list[image_identity.SignedImage]:
    """deploy --require-signature: the release's digest is signed by the key, as published
    in its repository under its tag (else exit 7, before any node is touched); what the
    signed manifest names (each platform's, for an index)."""
    console = run.console
    key = signing.public_key(key_path)
    repository, digest = split_reference(pinned)
    session = registry_access.open_session(repository, run.settings, VerificationError,
                                           console=console)
    with tempfile.TemporaryDirectory(prefix="sparkbake-verify.") as work:
        signed = image_identity.signed_images(session, digest, key,
                                              image_layout.Layout(Path(work), console), tag)
    console.notice(f"deploy: {pinned} is signed by {key.path}")
    return signed


def require_signed(run: Run, name: str,
                   key_path: Path | None) -> tuple[image_identity.SignedImage, ...]:
    """deploy --require-signature of the tag's or release's recorded digest (none: not
    asked). The record's image IDs must be the configs the signed manifest names: the nodes'
    images are checked against those."""
    if key_path is None:
        return ()
    record = releases.read_record(run.folders.releases, name, settings=run.settings)
    signed = require_signature(run, record.pinned, record.tag, key_path)
    configs = {one.config for one in signed}
    for image_id in [p.image_id for p in record.platforms] or [record.image_id]:
        if image_id not in configs:
            raise VerificationError(
                f"the release record of {name} names image {image_id[:19]}, but the signed "
                f"{record.pinned} names config {', '.join(c[:19] for c in sorted(configs))}",
                f"publish it again (`{run.settings.command('publish', name)}`), or deploy "
                "from the checkout it was published from")
    return tuple(signed)
