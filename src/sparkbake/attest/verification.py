"""verify-release: what anyone with the publisher's public key can check of a published
image, from the registry alone: the digest's cosign signature, the statements attached to
it (each signed, each about this digest), the SBOM the signed provenance names.

Each failure is one VerificationError (exit 7) that names what did not hold.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TypedDict, cast

from sparkbake import planning
from sparkbake.attest import signing, statements, stored
from sparkbake.attest.intoto import Provenance, Statement, TestResult
from sparkbake.attest.signing import PublicKey
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.errors import VerificationError
from sparkbake.oci import image_layout, referrers
from sparkbake.oci.distribution import Session
from sparkbake.oci.documents import DescriptorDoc

__all__ = ["Verified", "check_against", "check_signature", "check_statements", "verify"]

REPUBLISH = "publish the image again with --sign-key (or check that this is its digest)"


class SbomComponent(TypedDict, total=False):
    purl: str


class SbomDoc(TypedDict, total=False):
    """The parts of the attached CycloneDX SBOM that verify-release reads."""

    components: list[SbomComponent]


@dataclass(frozen=True)
class Verified:
    """A published image that passed: its statements and SBOM, as the registry serves them."""

    reference: str  # repository@digest
    digest: str
    provenance: Statement[Provenance]
    smoke: Statement[TestResult] | None
    sbom: SbomDoc
    listing: referrers.Listing

    def lines(self, key: PublicKey) -> list[str]:
        """What the image is made of, in a few lines."""
        build = self.provenance["predicate"]["buildDefinition"]
        deps = {d["name"]: d for d in build["resolvedDependencies"]}
        upstream = deps.get("upstream", {})
        kinds: dict[str, int] = {}
        for part in self.sbom.get("components", []):
            kind = str(part.get("purl", "pkg:other/")).split(":", 1)[1].split("/", 1)[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        series = [n.removeprefix("series:") for n in deps if n.startswith("series:")]
        smoke = self.smoke["predicate"] if self.smoke else None
        return [
            f"verified {self.reference}: signed by {key.path}; statements about this digest "
            f"(listed by the {self.listing})",
            f"  tag {build['externalParameters']['tag']}, inputs "
            f"{build['internalParameters']['inputs'][:12]}, sparkbake "
            f"{build['internalParameters']['sparkbake']}",
            f"  upstream {upstream.get('uri', '?')}; series: {', '.join(series) or 'none'}",
            f"  sbom: {len(self.sbom.get('components', []))} components ("
            + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")",
            "  smoke: " + (f"{smoke['result']} ({len(smoke['passedTests'])} passed, "
                           f"{len(smoke['warnedTests'])} skipped)" if smoke else "no statement"),
        ]


def verify(session: Session, digest: str, key: PublicKey, work: image_layout.Layout,
           tag: str | None = None, *, console: Console) -> Verified:
    """The image digest as published in the session's repository (under tag, when asked
    by one), its statements and SBOM."""
    repository = f"{session.remote.host}/{session.remote.path}"
    check_signature(session, repository, digest, key, work, tag)
    found, listing = referrers.listed(session, digest)
    if listing is None:
        raise VerificationError(f"{repository}@{digest}: no SBOM or statements are attached "
                                "(the registry lists no referrers of it)",
                                "publish it again with this sparkbake; a registry that drops "
                                "referrers cannot carry them")
    by_type = check_statements(session, found, digest, key, work, console=console)
    if statements.PROVENANCE not in by_type:
        raise VerificationError(f"{repository}@{digest}: no provenance signed by {key.path} "
                                "is attached", REPUBLISH)
    # each statement's predicate is the one its predicateType names
    provenance = cast(Statement[Provenance], by_type[statements.PROVENANCE])
    smoke = cast(Statement[TestResult] | None, by_type.get(statements.TEST_RESULT))
    document = _sbom(session, found, provenance, repository, work)
    return Verified(f"{repository}@{digest}", digest, provenance, smoke, document, listing)


def check_signature(session: Session, repository: str, digest: str, key: PublicKey,
                    work: image_layout.Layout, tag: str | None = None) -> None:
    """The `.sig` tag of digest holds a payload signed by key for exactly digest, published
    in this repository and, when a tag is asked for, under that tag."""
    signatures = signing.signature_tag(digest)
    found = session.manifest_digest(signatures)
    if found is None:
        raise VerificationError(f"{repository}@{digest} is not signed (no {signatures})",
                                REPUBLISH)
    session.pull(found, work)
    for layer in work.read_manifest_doc(found)["layers"]:
        payload = work.read(layer["digest"])
        if not key.verifies(payload, signing.layer_signature(layer)):
            continue
        document: signing.SimpleSigning = json.loads(payload)
        signed = document["critical"]["image"]["docker-manifest-digest"]
        if signed != digest:
            raise VerificationError(
                f"{repository}@{digest}: its signature is of {signed}, not of this digest "
                "(the image under this name is not the one signed)",
                "do not run it; find who pushed it")
        _check_name(document, repository, digest, tag)
        return
    raise VerificationError(f"{repository}@{digest}: {signatures} is not signed by {key.path}",
                            "check that this is the publisher's public key")


def _check_name(payload: signing.SimpleSigning, repository: str, digest: str,
                tag: str | None) -> None:
    """The signed repository is this one, and the tag asked for is one it was signed under:
    a signed digest copied to another name is not the release of that name."""
    signed_in = payload["critical"]["identity"].get("docker-reference")
    if signed_in != repository:
        raise VerificationError(
            f"{repository}@{digest} was signed as published in {signed_in}, not in "
            f"{repository}: a copy, not the release",
            f"verify it where it was published ({signed_in}), or publish it to "
            f"{repository} with the key")
    if tag is None:
        return
    tags = str((payload.get("optional") or {}).get(signing.SIGNED_TAGS, "")).split(",")
    if tag not in tags:
        signed_as = ", ".join(t for t in tags if t) or "no tag (signed by digest alone)"
        raise VerificationError(
            f"{repository}:{tag} is {digest}, which was signed as {signed_as}, not as {tag}",
            f"do not run it under this name: it is another release; verify "
            f"{repository}@{digest} to see which")


def check_statements(session: Session, found: list[DescriptorDoc], digest: str,
                     key: PublicKey, work: image_layout.Layout, *,
                     console: Console) -> dict[str, Statement[Provenance | TestResult]]:
    """Each attached in-toto statement signed by key, which must be about digest, by
    predicate type. Statements key did not sign (unsigned, another publisher's) are skipped,
    and said: anyone who can push can attach one, and it must not hide the signed ones."""
    by_type: dict[str, Statement[Provenance | TestResult]] = {}
    skipped = 0
    for entry in found:
        if entry.get("artifactType") != signing.DSSE_TYPE:
            continue
        _, data = referrers.pull(session, work, entry["digest"])
        statement = signing.signed_statement(data, key)
        if statement is None:
            skipped += 1
            continue
        subjects = [s["digest"].get("sha256") for s in statement.get("subject", [])]
        if digest.removeprefix("sha256:") not in subjects:
            raise VerificationError(
                f"the {statement.get('predicateType')} statement {entry['digest'][:19]} is "
                f"about sha256:{', '.join(map(str, subjects))}, not {digest}",
                "a statement of another image is attached to this one: do not trust it")
        by_type[str(statement["predicateType"])] = statement
    if skipped:
        console.notice(f"verify-release: {skipped} attached statement(s) of {digest[:19]} not "
                       f"signed by {key.path}, skipped")
    return by_type


def _sbom(session: Session, found: list[DescriptorDoc], provenance: Statement[Provenance],
          repository: str, work: image_layout.Layout) -> SbomDoc:
    """The attached SBOM whose digest the signed provenance names."""
    named = {b["digest"]["sha256"] for b in provenance["predicate"]["runDetails"]["byproducts"]
             if b.get("name") == "sbom"}
    for entry in found:
        if entry.get("artifactType") == stored.MEDIA_TYPE:
            _, data = referrers.pull(session, work, entry["digest"])
            if hashlib.sha256(data).hexdigest() in named:
                document: SbomDoc = json.loads(data)
                return document
    raise VerificationError(f"{repository}: no attached SBOM is the one its provenance names",
                            REPUBLISH)


def check_against(config: Config, provenance: Statement[Provenance]) -> str:
    """The provenance's inputs are those config pins for its tag now, entry by entry; the
    tag's name. A mismatch names the input."""
    build = provenance["predicate"]["buildDefinition"]
    tag = config.tag(build["externalParameters"]["tag"])
    plan = planning.make(config, tag)
    expected = {d["name"]: d.get("digest") for d in statements.resolved(config, plan)}
    found = {d["name"]: d.get("digest") for d in build["resolvedDependencies"]
             if not d["name"].startswith(statements.BUILT_PREFIXES)}
    for name in sorted(expected.keys() | found.keys()):
        if expected.get(name) != found.get(name):
            raise VerificationError(
                f"the provenance's {name} is {_digest(found.get(name))}; {config.path} pins "
                f"{_digest(expected.get(name))} for {tag.name}",
                "the image was built from other inputs than this checkout's")
    if build["internalParameters"]["inputs"] != plan.inputs:
        raise VerificationError(
            f"the provenance's inputs are {build['internalParameters']['inputs'][:12]}, "
            f"{config.path} gives {plan.inputs[:12]} for {tag.name}",
            f"compare with `sparkbake plan {tag.name}`: a stage's inputs differ")
    return tag.name


def _digest(digest: dict[str, str] | None) -> str:
    return ", ".join(f"{k}:{v[:16]}" for k, v in sorted(digest.items())) if digest else "absent"
