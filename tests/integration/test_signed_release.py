"""A signed release against the embedded docker-registry (2.8: no referrers API, so the
artifacts are listed by the spec's fallback tag): publish attaches the SBOM and the
statements and signs the digest; verify-release passes on it and fails, each with one line
and exit 7, on a tampered copy, another key, a statement of another digest and an unsigned
image; deploy --require-signature refuses before it reaches a node."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError as DsseVerificationError
from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # re-exported

from sparkbake.__main__ import main
from sparkbake.attest import signing
from sparkbake.config.settings import Settings
from sparkbake.errors import PublishError
from sparkbake.oci import artifacts, image_layout, referrers, registry_access
from sparkbake.publish import attach, push, release_index
from tests.conftest import plain_console, printed
from tests.integration.test_publish import TAG, Project, client, local, project
from tests.integration.test_publish_release import RELEASE, build_both
from tests.integration.test_publish_release import project as multi

pytestmark = pytest.mark.docker

__all__ = ["client", "local", "multi", "project"]  # the fixtures this module shares


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return signing.generate(tmp_path / "signing.key", None)[0]


def published(project: Project, payload: str, key: Path | None, force: bool = False
              ) -> dict[str, Any]:
    project.build(payload)
    project.smoke()
    signer = signing.signing_key(key, None) if key else None
    return printed(push.publish(project.client, project.config, Settings.of_process(),
                                project.plan, None, force, key=signer, console=plain_console()))


def verify(reference: str, pub: Path, *more: str) -> int:
    return main(["verify-release", reference, "--key", str(pub), *more])


def skopeo_copy(source: str, dest: str) -> None:
    subprocess.run(["skopeo", "copy", "--preserve-digests", "--src-tls-verify=false",
                    "--dest-tls-verify=false", f"docker://{source}", f"docker://{dest}"],
                   check=True, capture_output=True, timeout=120)


def http_copy(repository: str, name: str, dest: str) -> None:
    """A manifest (an index with what it lists), its blobs and its name, copied by the
    registry's HTTP API into dest: what a mirror does, artifacts included."""
    host, _, path = repository.partition("/")
    source, target = f"http://{host}/v2/{path}", f"http://{host}/v2/{dest.partition('/')[2]}"
    accept = {"Accept": f"{image_layout.MANIFEST_TYPE}, {image_layout.INDEX_TYPE}"}
    got = requests.get(f"{source}/manifests/{name}", headers=accept, timeout=30)
    doc = got.json()
    for child in doc.get("manifests", []):
        http_copy(repository, child["digest"], dest)
    for blob in [*([doc["config"]] if "config" in doc else []), *doc.get("layers", [])]:
        data = requests.get(f"{source}/blobs/{blob['digest']}", timeout=30).content
        start = requests.post(f"{target}/blobs/uploads/", timeout=30)
        location = urljoin(target + "/", start.headers["Location"])
        sep = "&" if "?" in location else "?"
        requests.put(f"{location}{sep}digest={blob['digest']}", data=data, timeout=30,
                     headers={"Content-Type": "application/octet-stream"}).raise_for_status()
    requests.put(f"{target}/manifests/{name}", data=got.content, timeout=30,
                 headers={"Content-Type": got.headers["Content-Type"]}).raise_for_status()


def independently_verified(reference: str, public: Path, work: Path) -> bool:
    """cosign's checks made with other code than ours, of what the registry serves (its
    HTTP API read with requests): a `.sig` layer whose signature openssl(1) verifies must
    name the digest, the repository and (for a tag) the tag; and the statements that key
    signed (DSSE, by securesystemslib), the provenance among them, must be about the
    digest."""
    repository, _, name = reference.rpartition("@") if "@" in reference else \
        reference.rpartition(":")
    host, _, path = repository.partition("/")
    api = f"http://{host}/v2/{path}"
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json, "
                        "application/vnd.oci.image.index.v1+json"}
    found = requests.get(f"{api}/manifests/{name}", headers=accept, timeout=30)
    digest = found.headers["Docker-Content-Digest"]
    sig = requests.get(f"{api}/manifests/{signing.signature_tag(digest)}", headers=accept,
                       timeout=30)
    if sig.status_code != 200:
        return False  # not signed
    signed = []
    for layer in sig.json()["layers"]:
        payload, signature = work / f"{uuid.uuid4().hex}.json", work / f"{uuid.uuid4().hex}.der"
        payload.write_bytes(requests.get(f"{api}/blobs/{layer['digest']}", timeout=30).content)
        signature.write_bytes(base64.b64decode(layer["annotations"][signing.COSIGN_SIGNATURE]))
        checked = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(public),
                                  "-signature", str(signature), str(payload)],
                                 capture_output=True, text=True, check=False)
        if checked.returncode == 0:
            signed.append(json.loads(payload.read_bytes()))
    if not any(p["critical"]["identity"]["docker-reference"] == repository
               and p["critical"]["image"]["docker-manifest-digest"] == digest
               and (name == digest or name in (p.get("optional") or {}).get(
                   signing.SIGNED_TAGS, "").split(",")) for p in signed):
        return False
    index = requests.get(f"{api}/manifests/{referrers.fallback_tag(digest)}", headers=accept,
                         timeout=30).json()
    loaded = SSlibKey.from_crypto(serialization.load_pem_public_key(public.read_bytes()),
                                  scheme="ecdsa-sha2-nistp256")
    verifier = SSlibKey("", loaded.keytype, loaded.scheme, loaded.keyval)
    types = []
    for entry in index["manifests"]:
        if entry.get("artifactType") != signing.DSSE_TYPE:
            continue
        manifest = requests.get(f"{api}/manifests/{entry['digest']}", headers=accept,
                                timeout=30).json()
        data = requests.get(f"{api}/blobs/{manifest['layers'][0]['digest']}", timeout=30)
        envelope = Envelope.from_dict(data.json())
        try:
            envelope.verify([verifier], 1)
        except DsseVerificationError:
            continue  # not this key's: skipped, as verify-release skips it
        statement = json.loads(envelope.payload)
        if digest[7:] not in [s["digest"].get("sha256") for s in statement["subject"]]:
            return False
        types.append(statement["predicateType"])
    return "https://slsa.dev/provenance/v1" in types


def test_a_signed_release_verifies_and_a_tampered_copy_or_another_key_does_not(
        project: Project, key: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = published(project, "signed", key)
    repository = record["repository"]
    attached = record["attestations"]
    assert attached["listed_by"] == "fallback tag" and attached["signature"]
    assert verify(f"{repository}:{TAG}", Path(f"{key}.pub"),
                  "--against", str(project.config.path)) == 0
    out = capsys.readouterr().err  # the result lines: stdout is for --json
    assert f"verified {repository}@{record['digest']}: signed by {key}.pub" in out
    assert "smoke: PASSED (1 passed, 0 skipped)" in out
    assert f"matches {project.config.path} for {TAG}" in out
    assert independently_verified(f"{repository}:{TAG}", Path(f"{key}.pub"), tmp_path)

    other = signing.generate(tmp_path / "other.key", None)[1]
    assert verify(f"{repository}:{TAG}", other) == 7
    assert not independently_verified(f"{repository}:{TAG}", other, tmp_path)
    assert f"sparkbake: error: {repository}@{record['digest']}: " \
        f"{signing.signature_tag(record['digest'])} is not signed by {other}\n" in \
        capsys.readouterr().err

    # another image under the tag, with the first one's signature copied beside it
    tampered = published(project, "tampered", None, force=True)["digest"]
    skopeo_copy(f"{repository}:{signing.signature_tag(record['digest'])}",
                f"{repository}:{signing.signature_tag(tampered)}")
    assert verify(f"{repository}:{TAG}", Path(f"{key}.pub")) == 7
    assert f"its signature is of {record['digest']}, not of this digest" in \
        capsys.readouterr().err
    assert not independently_verified(f"{repository}:{TAG}", Path(f"{key}.pub"), tmp_path)


def test_a_statement_of_another_digest_and_an_unsigned_image_fail(
        project: Project, key: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = published(project, "first", key)
    unsigned = published(project, "unsigned", None, force=True)
    repository = first["repository"]
    assert verify(f"{repository}@{unsigned['digest']}", Path(f"{key}.pub")) == 7
    assert f"{repository}@{unsigned['digest']} is not signed" in capsys.readouterr().err

    second = published(project, "second", key, force=True)
    layout = image_layout.Layout(project.config.build_dir / "oci", console=plain_console())
    envelope = artifacts.read(layout, first["attestations"]["provenance"])[1]
    subject = image_layout.Descriptor(image_layout.MANIFEST_TYPE, second["digest"], 1)
    moved = artifacts.add(layout, signing.DSSE_TYPE, envelope, subject)
    session = registry_access.open_session(repository, Settings.of_process(),
                                           console=plain_console())
    referrers.attach(session, layout, moved, second["digest"])
    assert verify(f"{repository}:{TAG}", Path(f"{key}.pub")) == 7
    assert f"about sha256:{first['digest'][7:]}, not {second['digest']}" in \
        capsys.readouterr().err


def test_unsigned_statements_and_a_second_key_do_not_lock_the_release_out(
        project: Project, key: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = published(project, "relocked", key)
    repository, digest, pub = record["repository"], record["digest"], Path(f"{key}.pub")
    with pytest.raises(PublishError) as unsigned:
        published(project, "relocked", None)
    assert unsigned.value.message == (
        f"{repository}@{digest[:19]} is signed already (1 signature(s)); publishing it again "
        "unsigned would attach unsigned statements to it")
    # anyone who can push can attach an unsigned statement beside the signed ones
    layout = image_layout.Layout(project.config.build_dir / "oci", console=plain_console())
    statement = json.loads(base64.b64decode(json.loads(artifacts.read(
        layout, record["attestations"]["provenance"])[1])["payload"]))
    statement["predicate"]["buildDefinition"]["externalParameters"]["tag"] = "forged"
    forged = artifacts.add(layout, signing.DSSE_TYPE, signing.envelope(
        json.dumps(statement).encode(), None), image_layout.Descriptor(
        image_layout.MANIFEST_TYPE, digest, 1))
    referrers.attach(registry_access.open_session(repository, Settings.of_process(),
                                                  console=plain_console()),
                     layout, forged, digest)
    capsys.readouterr()
    assert verify(f"{repository}:{TAG}", pub) == 0
    err = capsys.readouterr().err
    assert f"1 attached statement(s) of {digest[:19]} not signed by {pub}, skipped" in err
    assert f"tag {TAG}, inputs" in err  # the signed provenance, not the forged one
    assert independently_verified(f"{repository}:{TAG}", pub, tmp_path)

    other = signing.generate(tmp_path / "other.key", None)[0]
    with pytest.raises(PublishError) as second:
        published(project, "relocked", other)
    assert second.value.message == \
        f"{repository}@{digest[:19]} is signed already, by other keys than {other}"
    published(project, "relocked", other, force=True)  # a second signature, beside the first
    published(project, "relocked", key)  # the first key again: both stay
    for public in (pub, Path(f"{other}.pub")):
        assert verify(f"{repository}:{TAG}", public) == 0
        assert independently_verified(f"{repository}:{TAG}", public, tmp_path)
    sig = json.loads(subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false",
         f"docker://{repository}:{signing.signature_tag(digest)}"],
        check=True, capture_output=True, text=True, timeout=60).stdout)
    assert len(sig["layers"]) == 2


def test_deploy_require_signature_refuses_an_unsigned_release_before_any_node(
        project: Project, key: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = published(project, "deploy-unsigned", None)
    code = main(["--config", str(project.config.path), "deploy", TAG,
                 "--hosts", "tcp://127.0.0.1:9", "--require-signature", f"{key}.pub"])
    assert code == 7
    assert f"{record['pinned']} is not signed" in capsys.readouterr().err


def test_the_fallback_index_lists_the_artifacts_by_type(project: Project, key: Path) -> None:
    record = published(project, "listed", key)
    session = registry_access.open_session(record["repository"], Settings.of_process(),
                                console=plain_console())
    found, listing = referrers.listed(session, record["digest"])
    assert listing == "fallback tag"
    kinds = sorted((m["artifactType"], (m.get("annotations") or {}).get(
        signing.PREDICATE_ANNOTATION, "")) for m in found)
    assert kinds == [("application/vnd.cyclonedx+json", ""),
                     (signing.DSSE_TYPE, "https://in-toto.io/attestation/test-result/v0.1"),
                     (signing.DSSE_TYPE, "https://slsa.dev/provenance/v1")]
    again = printed(push.publish(project.client, project.config, Settings.of_process(),
                                 project.plan, None, False, key=signing.signing_key(key, None),
                                 console=plain_console()))
    assert again["attestations"] == record["attestations"]  # deterministic: nothing new
    assert len(referrers.listed(session, record["digest"])[0]) == 3
    sig = json.loads(subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false",
         f"docker://{record['repository']}:{signing.signature_tag(record['digest'])}"],
        check=True, capture_output=True, text=True, timeout=60).stdout)
    assert sig["layers"][0]["mediaType"] == signing.SIMPLE_SIGNING


def test_a_signed_multi_platform_release_verifies_by_its_index(
        multi: Project, key: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_both(multi)
    tags = multi.config.targets(RELEASE)
    record = printed(release_index.publish_release(multi.client, multi.config,
                                                   Settings.of_process(), RELEASE, tags, None,
                                                   False, key=signing.signing_key(key, None),
                                                   console=plain_console()))
    assert verify(f"{record['repository']}:{RELEASE}", Path(f"{key}.pub")) == 0
    shown = capsys.readouterr().err
    assert f"verified {record['repository']}@{record['digest']}: the index is signed" in shown
    for platform in record["platforms"]:
        assert platform["attestations"]["signature"]
        assert f"verified {record['repository']}@{platform['digest']}: signed by" in shown


def test_a_signed_image_verifies_only_under_the_names_it_was_published_under(
        project: Project, key: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The signed manifest copied under another tag of its repository (a manifest PUT) or
    into another repository, signature and referrers with it, is not the release."""
    record = published(project, "named", key)
    repository, digest, pub = record["repository"], record["digest"], Path(f"{key}.pub")
    per_build = record["images"][1].rsplit(":", 1)[1]
    for name in (TAG, per_build, digest):
        reference = f"{repository}{'@' if name == digest else ':'}{name}"
        assert verify(reference, pub) == 0
        assert independently_verified(reference, pub, tmp_path)
    capsys.readouterr()
    skopeo_copy(f"{repository}@{digest}", f"{repository}:production-3.73-vision")
    assert verify(f"{repository}:production-3.73-vision", pub) == 7
    assert f"sparkbake: error: {repository}:production-3.73-vision is {digest}, which was " \
        f"signed as {TAG}, {per_build}, not as production-3.73-vision\n" in \
        capsys.readouterr().err
    assert not independently_verified(f"{repository}:production-3.73-vision", pub, tmp_path)
    copy = f"{repository}-copy"
    for name in (TAG, signing.signature_tag(digest)):
        skopeo_copy(f"{repository}:{name}", f"{copy}:{name}")
    http_copy(repository, referrers.fallback_tag(digest), copy)  # the referrers too
    for reference in (f"{copy}:{TAG}", f"{copy}@{digest}"):
        assert verify(reference, pub) == 7
        assert f"sparkbake: error: {copy}@{digest} was signed as published in {repository}, " \
            f"not in {copy}: a copy, not the release\n" in capsys.readouterr().err
        assert not independently_verified(reference, pub, tmp_path)


def test_a_signed_image_without_its_referrers_fails_as_such(
        project: Project, key: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An image copied into a repository of its own and signed there, with no SBOM or
    statements attached to it."""
    record = published(project, "bare", key)
    bare = f"{record['repository']}-bare"
    skopeo_copy(f"{record['repository']}:{TAG}", f"{bare}:{TAG}")
    attach.sign(registry_access.open_session(bare, Settings.of_process(), console=plain_console()),
                image_layout.Layout(tmp_path / "signature", console=plain_console()), bare,
                record["digest"],
                signing.signing_key(key, None), [TAG], [],
                console=plain_console())  # not signed there yet
    assert verify(f"{bare}:{TAG}", Path(f"{key}.pub")) == 7
    assert f"{bare}@{record['digest']}: no SBOM or statements are attached" in \
        capsys.readouterr().err
