"""Keys and signatures: ECDSA P-256 with SHA-256, in the formats cosign reads.

A key pair is two PEM files: the private key as PKCS#8 (encrypted with the passphrase when
one is given) and the public key as SubjectPublicKeyInfo, which `cosign verify --key` takes.
What is signed: the image digest as cosign's simple-signing payload (the `.sig` tag) and each
in-toto statement as a DSSE envelope (cosign's attestation format). Signatures are
deterministic (RFC 6979), so publishing again signs with the same bytes.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from sparkbake.attest.intoto import Provenance, Statement, TestResult
from sparkbake.errors import UsageError, VerificationError
from sparkbake.oci import referrers
from sparkbake.oci.documents import DescriptorDoc

if TYPE_CHECKING:
    # cryptography is imported where used at run time: it is slow to import and only
    # signing and checking signatures need it
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = [
    "COSIGN_SIGNATURE",
    "DSSE_TYPE",
    "IN_TOTO_PAYLOAD",
    "PREDICATE_ANNOTATION",
    "SIGNED_TAGS",
    "SIMPLE_SIGNING",
    "PublicKey",
    "SigningKey",
    "SimpleSigning",
    "envelope",
    "generate",
    "layer_signature",
    "open_envelope",
    "pae",
    "public_key",
    "signature_tag",
    "signed_statement",
    "signing_key",
    "simple_signing",
]

DSSE_TYPE = "application/vnd.dsse.envelope.v1+json"
# cosign's conventions, so its tools find and check what we attach
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
COSIGN_SIGNATURE = "dev.cosignproject.cosign/signature"
SIGNED_TAGS = "dev.sparkbake.tags"  # the payload's optional annotation: tags, comma-separated
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
SIMPLE_SIGNING_TYPE = "cosign container image signature"
KEYS_PAGE = "docs/how-to/publish-and-deploy.md#signing"

# cosign's simple signing payload (simple_signing): what a `.sig` layer signs
SignedIdentity = TypedDict("SignedIdentity", {"docker-reference": str})
SignedImage = TypedDict("SignedImage", {"docker-manifest-digest": str})


class SignedCritical(TypedDict):
    identity: SignedIdentity
    image: SignedImage
    type: str


class SimpleSigning(TypedDict):
    critical: SignedCritical
    optional: dict[str, str] | None  # cosign's annotations (SIGNED_TAGS)


def _algorithm() -> ec.ECDSA:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.ECDSA(hashes.SHA256(), deterministic_signing=True)


@dataclass(frozen=True)
class SigningKey:
    path: Path
    key: ec.EllipticCurvePrivateKey

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data, _algorithm())

    def public(self) -> PublicKey:
        return PublicKey(self.path, self.key.public_key())


@dataclass(frozen=True)
class PublicKey:
    path: Path
    key: ec.EllipticCurvePublicKey

    def verifies(self, data: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self.key.verify(signature, data, _algorithm())
        except InvalidSignature:
            return False
        return True


def generate(path: Path, passphrase: str | None) -> tuple[Path, Path]:
    """PATH (the private key, mode 0600) and PATH.pub; an existing PATH is never replaced."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    public = path.with_name(path.name + ".pub")
    _require_new_pair(path, public)
    key = ec.generate_private_key(ec.SECP256R1())
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode()) if passphrase
        else serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            encryption)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(pem)
        public.write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    except OSError as exc:
        raise UsageError(f"keys generate: cannot write {exc.filename or path} ({exc.strerror})",
                         f"give a PATH in a folder you can write ({path.parent})") from exc
    return path, public


def _require_new_pair(path: Path, public: Path) -> None:
    """Neither file of the pair exists yet, and their folder does (a key is never written
    over, and its folder never made: a mistyped folder would hide the key)."""
    for existing in (path, public):
        if existing.exists():
            raise UsageError(f"{existing} exists; a key is never overwritten",
                             "give another PATH, or remove the old pair yourself")
    if not path.parent.is_dir():
        state = "is not a folder" if path.parent.exists() else "does not exist"
        raise UsageError(f"keys generate: the folder {path.parent} {state}",
                         f"make it first (mkdir -p {path.parent}), or give a PATH in a folder "
                         "that exists")


def signing_key(path: Path, passphrase: str | None) -> SigningKey:
    """The private key at path, or a one-line UsageError: missing, no or a wrong passphrase,
    not an ECDSA P-256 key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    data = _read(path, "signing key")
    try:
        key = serialization.load_pem_private_key(data, passphrase.encode() if passphrase
                                                 else None)
    except TypeError as exc:  # encrypted without a passphrase, or one given for a plain key
        if passphrase:
            raise UsageError(f"signing key {path} has no passphrase, but one is set",
                             "unset SPARKBAKE_SIGNING_PASSPHRASE") from exc
        raise UsageError(f"signing key {path} is protected by a passphrase and none is set",
                         "set SPARKBAKE_SIGNING_PASSPHRASE") from exc
    except ValueError as exc:
        what = "the passphrase is wrong, or it" if passphrase else "it"
        raise UsageError(f"signing key {path}: {what} is not a PEM private key",
                         f"make one with `sparkbake keys generate PATH` ({KEYS_PAGE})") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise UsageError(f"signing key {path} is not an ECDSA P-256 key",
                         f"make one with `sparkbake keys generate PATH` ({KEYS_PAGE})")
    return SigningKey(path, key)


def public_key(path: Path) -> PublicKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    data = _read(path, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise UsageError(f"public key {path} is not a PEM public key",
                         "give the PATH.pub that `sparkbake keys generate PATH` wrote") from exc
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise UsageError(f"public key {path} is not an ECDSA key",
                         "give the PATH.pub that `sparkbake keys generate PATH` wrote")
    return PublicKey(path, key)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise UsageError(f"{what} {path}: no such file",
                         f"give the right path, or make a pair: `sparkbake keys generate PATH` "
                         f"({KEYS_PAGE})") from exc
    except OSError as exc:
        raise UsageError(f"{what} {path} cannot be read ({exc.strerror})",
                         "check its permissions") from exc


def simple_signing(reference: str, digest: str, tags: Sequence[str] = ()) -> bytes:
    """cosign's payload for the image digest: what the `.sig` tag's layer holds and signs.
    `reference` is the repository it is published in; `tags`, the names it is published
    under, go in cosign's optional annotations (SIGNED_TAGS), so that a copy of the digest
    under another name does not verify as the release."""
    payload: SimpleSigning = {
        "critical": {"identity": {"docker-reference": reference},
                     "image": {"docker-manifest-digest": digest}, "type": SIMPLE_SIGNING_TYPE},
        "optional": {SIGNED_TAGS: ",".join(tags)} if tags else None}
    return json.dumps(payload, separators=(",", ":")).encode()


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what a DSSE signature signs."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def envelope(statement: bytes, key: SigningKey | None) -> bytes:
    """A DSSE envelope of an in-toto statement, signed by key (none: no signatures)."""
    signatures = [{"keyid": "", "sig": _b64(key.sign(pae(IN_TOTO_PAYLOAD, statement)))}] \
        if key else []
    return json.dumps({"payload": _b64(statement), "payloadType": IN_TOTO_PAYLOAD,
                       "signatures": signatures}, sort_keys=True).encode()


def layer_signature(layer: DescriptorDoc) -> bytes:
    """The signature a `.sig` manifest's layer carries (cosign's annotation); b"": none."""
    return base64.b64decode((layer.get("annotations") or {}).get(COSIGN_SIGNATURE, ""))


def signed_statement(data: bytes, key: PublicKey) -> Statement[Provenance | TestResult] | None:
    """The statement inside a DSSE envelope that key signed; None for any other envelope
    (unsigned, another key's, not an envelope)."""
    try:
        return open_envelope(data, key, "statement")
    except VerificationError:
        return None


def open_envelope(data: bytes, key: PublicKey, what: str) -> Statement[Provenance | TestResult]:
    """The statement inside a DSSE envelope that key signed, else VerificationError."""
    try:
        doc = json.loads(data)
        payload = base64.b64decode(doc["payload"])
        signatures = [base64.b64decode(s["sig"]) for s in doc.get("signatures", [])]
    except (ValueError, KeyError, TypeError) as exc:
        raise VerificationError(f"the {what} is not a DSSE envelope", "publish it again") from exc
    if not signatures:
        raise VerificationError(f"the {what} is not signed",
                                "publish the image again with --sign-key")
    if not any(key.verifies(pae(doc["payloadType"], payload), s) for s in signatures):
        raise VerificationError(f"the {what} is not signed by {key.path}",
                                "check that this is the publisher's public key")
    statement: Statement[Provenance | TestResult] = json.loads(payload)
    return statement


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def signature_tag(digest: str) -> str:
    """The tag cosign gives an image's signature: the digest's fallback tag with `.sig`."""
    return referrers.fallback_tag(digest) + ".sig"
