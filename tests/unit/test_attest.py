"""The pure parts of signed releases: the SBOM of an image's files, the in-toto statements,
keys and signatures in cosign's format, and their bad inputs (each one line, its exit code)."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError as DsseVerificationError
from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # re-exported

from sparkbake import planning
from sparkbake.__main__ import main
from sparkbake.attest import imagefiles, sbom, signing, statements, stored, verification
from sparkbake.attest.intoto import Provenance, Statement
from sparkbake.config import versions
from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.core.smoke_record import CheckResult, SmokeReport
from sparkbake.errors import UsageError, VerificationError
from sparkbake.oci import image_layout, layers
from tests.conftest import one_patch_project, plain_console

SITE = "opt/venv/lib/python3.11/site-packages"
DPKG = """\
Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9

Package: gone
Status: deinstall ok config-files
Version: 1.0
"""
MANIFEST: BakedManifest = {
    "image": "localhost:5000/demo:production-1.0", "source_date_epoch": 1735689600,
    "inputs": "ab" * 32, "platform": "linux/arm64", "nvcc": "cuda_13.0", "cuda_arch": "12.1a",
    "wheels": [{"file": "demo_pkg-1.0-py3-none-any.whl", "name": "demo_pkg", "sha256": "cd" * 32}],
    "upstream": {"key": "tree", "kind": "dir", "path": "upstream", "tree": "ef" * 32},
    "series": [{"name": "fix", "sha256": "12" * 32,
                "patches": [{"file": "0001-fix.patch", "sha256": "34" * 32}]}],
    "thirdparty": [{"name": "cutlass", "url": "git://h/cutlass.git", "pin": "5" * 40,
                    "tree": "6" * 64, "ref": "v4"}],
    "base": {"name": "debian", "image": "sparkbake-base/debian:1", "digest": "sha256:0"}}


def metadata(name: str, version: str, *lines: str) -> bytes:
    return "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                      *lines, "", ""]).encode()


def image(root: Path, *layer_files: dict[str, bytes]) -> tuple[image_layout.Layout,
                                                               image_layout.Descriptor]:
    """An image of these layers (bottom first) in an OCI layout under root."""
    layout = image_layout.Layout(root / "oci", console=plain_console())
    root.mkdir(parents=True, exist_ok=True)
    blobs = []
    for n, files in enumerate(layer_files):
        made = layers.from_files({p: (d, 0o644) for p, d in files.items()}, root / f"{n}.tgz", 0)
        blobs.append(layout.add_file(made.path, made.digest, layers.MEDIA_TYPE))
    config = layout.add_bytes(b"{}", image_layout.CONFIG_TYPE)
    return layout, layout.add_bytes(image_layout.canonical(image_layout.manifest(config, blobs)),
                                    image_layout.MANIFEST_TYPE)


def demo_sbom(root: Path) -> tuple[dict[str, Any], bytes, image_layout.Descriptor]:
    layout, made = image(
        root,
        {"var/lib/dpkg/status": DPKG.encode(), "etc/os-release": b'ID=debian\n',
         f"{SITE}/old-1.0.dist-info/METADATA": metadata("old", "1.0")},
        {f"{SITE}/demo_pkg-0.1.dist-info/METADATA": metadata(
            "demo_pkg", "0.1", "License-Expression: MIT OR Apache-2.0"),
         f"{SITE}/torch-2.9.dist-info/METADATA": metadata(
             "torch", "2.9", "License: BSD-3-Clause", "Classifier: License :: OSI Approved"),
         f"{SITE}/.wh.old-1.0.dist-info": b"",
         "opt/sparkbake/manifest.json": json.dumps(MANIFEST).encode()})
    data = sbom.document(imagefiles.read(layout, made, console=plain_console()), made)
    return json.loads(data), data, made


def test_the_sbom_lists_what_the_layers_hold_and_the_manifest_says(tmp_path: Path) -> None:
    doc, _, made = demo_sbom(tmp_path)
    parts = {c["bom-ref"]: c for c in doc["components"]}
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    assert doc["metadata"]["component"]["hashes"][0]["content"] == made.digest[7:]
    assert doc["metadata"]["timestamp"].startswith("2025-01-01T00:00:00")
    assert "pypi:old@1.0" not in parts  # its whiteout removed it
    demo = parts["pypi:demo-pkg@0.1"]
    assert demo["purl"] == "pkg:pypi/demo-pkg@0.1"
    assert demo["hashes"] == [{"alg": "SHA-256", "content": "cd" * 32}]
    assert demo["licenses"] == [{"expression": "MIT OR Apache-2.0"}]
    assert parts["pypi:torch@2.9"]["licenses"] == [{"license": {"id": "BSD-3-Clause"}}]
    assert parts["deb:libc6@2.36-9:amd64"]["purl"] == "pkg:deb/debian/libc6@2.36-9?arch=amd64"
    assert not any(ref.startswith("deb:gone") for ref in parts)  # not installed
    props = {p["name"]: p["value"] for p in parts["upstream"]["properties"]}
    assert props["sparkbake:patch:fix/0001-fix.patch"] == "34" * 32
    assert parts["source:cutlass"]["version"] == "5" * 40
    assert parts["cuda-toolchain"]["version"] == "cuda_13.0"


def test_a_layer_read_once_is_not_read_again_and_a_damaged_record_is_read_anew(
        tmp_path: Path) -> None:
    """What a layer gives the SBOM is kept by its digest: the Python-only path's image
    reads its one new layer, not the 10 GB below it."""
    _, first, made = demo_sbom(tmp_path)
    layout = image_layout.Layout(tmp_path / "oci", console=plain_console())
    blobs = [layer.digest for layer in layout.read_manifest(made.digest).layers]
    kept = {digest: layout.blob(digest).read_bytes() for digest in blobs}
    for digest in blobs:
        layout.blob(digest).chmod(0o644)
        layout.blob(digest).write_bytes(b"not a tar")  # records, not blobs, are read now
    assert sbom.document(imagefiles.read(layout, made, console=plain_console()), made) == first
    layout.read_files(blobs[1]).write_text("{")  # damaged: dropped and the blob read again
    layout.read_files(blobs[0]).write_text('{"changes": [["put", "x", "not base64!"]]}')
    for digest, data in kept.items():
        layout.blob(digest).write_bytes(data)
    assert sbom.document(imagefiles.read(layout, made, console=plain_console()), made) == first
    for digest in blobs:
        assert json.loads(layout.read_files(digest).read_text())["layer"] == digest


def test_a_layer_just_written_is_recorded_as_reading_its_blob_records_it(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    files = {f"{SITE}/demo_pkg-0.1.dist-info/METADATA": metadata("demo_pkg", "0.1"),
             f"{SITE}/demo_pkg/__init__.py": b"", "opt/sparkbake/manifest.json": b"{}"}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / f"{SITE}/link.dist-info").mkdir()
    (root / f"{SITE}/link.dist-info/METADATA").symlink_to("../demo_pkg-0.1.dist-info/METADATA")
    paths = sorted([*files, f"{SITE}/link.dist-info/METADATA"])
    layer = layers.from_paths(root, paths, tmp_path / "l.tgz", 0)
    layout = image_layout.Layout(tmp_path / "oci", console=plain_console())
    imagefiles.remember(layout, layer.digest, root, paths)
    remembered = layout.read_files(layer.digest).read_bytes()
    layout.add_file(layer.path, layer.digest, layers.MEDIA_TYPE)
    layout.read_files(layer.digest).unlink()
    imagefiles.read(layout, layout.add_bytes(image_layout.canonical(image_layout.manifest(
        layout.add_bytes(b"{}", image_layout.CONFIG_TYPE),
        [image_layout.Descriptor(layers.MEDIA_TYPE, layer.digest, layer.size)])),
        image_layout.MANIFEST_TYPE), console=plain_console())
    assert layout.read_files(layer.digest).read_bytes() == remembered  # read from the blob
    assert len(json.loads(remembered)["changes"]) == 2  # the link is not a file


def test_the_sbom_is_the_same_bytes_for_the_same_image_and_its_serial_follows_the_digest(
        tmp_path: Path) -> None:
    _, first, made = demo_sbom(tmp_path / "a")
    _, second, again = demo_sbom(tmp_path / "b")
    assert again == made and second == first
    other = image_layout.Descriptor(made.media_type, "sha256:" + "0" * 64, made.size)
    layout = image_layout.Layout(tmp_path / "a" / "oci", console=plain_console())
    serial = json.loads(sbom.document(imagefiles.read(layout, made, console=plain_console()),
                                      other))["serialNumber"]
    assert serial != json.loads(first)["serialNumber"]


def smoke_report(passed: bool = True) -> SmokeReport:
    return SmokeReport("t", "img", "sha256:1", "in", "common", "auto", None, passed,
                       (CheckResult("manifest", "passed"),
                        CheckResult("gpu", "skipped", "no GPU runtime")), "2026-01-01")


def test_the_smoke_statement_is_a_test_result_about_the_digest() -> None:
    doc = json.loads(statements.test_result("h/r", "sha256:" + "a" * 64, smoke_report()))
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["subject"] == [{"name": "h/r", "digest": {"sha256": "a" * 64}}]
    assert doc["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert doc["predicate"]["result"] == "PASSED"
    assert doc["predicate"]["passedTests"] == ["manifest"]
    assert doc["predicate"]["warnedTests"] == ["gpu: no GPU runtime"]
    failed = json.loads(statements.test_result("h/r", "sha256:1", smoke_report(False)))
    assert failed["predicate"]["result"] == "FAILED"


def provenance_of(tmp_path: Path) -> tuple[versions.Config, Statement[Provenance]]:
    path = one_patch_project(tmp_path, "a patch\n", "  t:\n    upstream: tree\n"
                                                   "    series: [demo]\n")
    config = versions.load(path)
    plan = planning.make(config, config.tag("t"))
    sbom_blob = image_layout.Descriptor(stored.MEDIA_TYPE, "sha256:" + "9" * 64, 10)
    data = statements.provenance(config, plan, "h/r", "sha256:" + "a" * 64, MANIFEST, sbom_blob)
    return config, json.loads(data)


def test_the_provenance_names_inputs_definition_and_sbom(tmp_path: Path) -> None:
    _, doc = provenance_of(tmp_path)
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    build = doc["predicate"]["buildDefinition"]
    names = [d["name"] for d in build["resolvedDependencies"]]
    assert names[:2] == ["upstream", "base:runtime"]
    assert "series:demo" in names and "patch:demo/0001-demo.patch" in names
    assert "source:cutlass" in names and "built:runtime-base" in names
    assert build["externalParameters"]["tag"] == "t"
    assert set(build["internalParameters"]["keys"]) == {"fetch", "patch", "kernels", "wheels",
                                                        "bake"}
    run = doc["predicate"]["runDetails"]
    assert run["byproducts"][0]["digest"] == {"sha256": "9" * 64}


def test_against_names_the_input_that_differs(tmp_path: Path) -> None:
    config, doc = provenance_of(tmp_path)
    assert verification.check_against(config, doc) == "t"
    (tmp_path / "patches" / "demo" / "0001-demo.patch").write_text("another patch\n")
    with pytest.raises(VerificationError) as caught:
        verification.check_against(versions.load(config.path), doc)
    assert caught.value.exit_code == 7
    assert caught.value.message.startswith("the provenance's patch:demo/0001-demo.patch is ")


def test_a_generated_key_signs_and_only_its_public_key_verifies(tmp_path: Path) -> None:
    private, public = signing.generate(tmp_path / "k", "pw")
    assert private.stat().st_mode & 0o777 == 0o600
    assert b"ENCRYPTED PRIVATE KEY" in private.read_bytes()
    key = signing.signing_key(private, "pw")
    pub = signing.public_key(public)
    assert pub.verifies(b"data", key.sign(b"data"))
    assert key.sign(b"data") == key.sign(b"data")  # deterministic: a republish is a no-op
    assert not pub.verifies(b"other", key.sign(b"data"))
    other = signing.public_key(signing.generate(tmp_path / "o", None)[1])
    assert not other.verifies(b"data", key.sign(b"data"))


def test_the_signature_is_cosigns_simple_signing_format(tmp_path: Path) -> None:
    """As cosign's SIGNATURE_SPEC.md says: the payload's critical.image.docker-manifest-digest
    and type, its media type, the base64 DER ECDSA P-256/SHA-256 signature in the layer's
    dev.cosignproject.cosign/signature annotation; checked here with cryptography alone."""
    payload = json.loads(signing.simple_signing("h/r", "sha256:" + "a" * 64))
    assert payload == {"critical": {"identity": {"docker-reference": "h/r"},
                                    "image": {"docker-manifest-digest": "sha256:" + "a" * 64},
                                    "type": "cosign container image signature"},
                       "optional": None}
    tagged = json.loads(signing.simple_signing("h/r", "sha256:" + "a" * 64, ["t", "t-0a1b"]))
    assert tagged["optional"] == {"dev.sparkbake.tags": "t,t-0a1b"}  # cosign's annotations
    assert tagged["critical"] == payload["critical"]
    assert signing.SIMPLE_SIGNING == "application/vnd.dev.cosign.simplesigning.v1+json"
    assert signing.COSIGN_SIGNATURE == "dev.cosignproject.cosign/signature"
    assert signing.signature_tag("sha256:" + "a" * 64) == f"sha256-{'a' * 64}.sig"
    private, public = signing.generate(tmp_path / "k", None)
    data = signing.simple_signing("h/r", "sha256:" + "a" * 64)
    signature = base64.b64decode(base64.b64encode(signing.signing_key(private, None).sign(data)))
    loaded = serialization.load_pem_public_key(public.read_bytes())
    assert isinstance(loaded, ec.EllipticCurvePublicKey) and loaded.curve.name == "secp256r1"
    loaded.verify(signature, data, ec.ECDSA(hashes.SHA256()))  # raises if not


def test_a_dsse_envelope_opens_only_with_its_key_and_unaltered(tmp_path: Path) -> None:
    private, public = signing.generate(tmp_path / "k", None)
    statement = b'{"predicateType": "x"}'
    sealed = signing.envelope(statement, signing.signing_key(private, None))
    pub = signing.public_key(public)
    assert dict(signing.open_envelope(sealed, pub, "s")) == {"predicateType": "x"}
    doc = json.loads(sealed)
    doc["payload"] = base64.b64encode(b'{"predicateType": "y"}').decode()
    with pytest.raises(VerificationError, match="is not signed by"):
        signing.open_envelope(json.dumps(doc).encode(), pub, "s")
    with pytest.raises(VerificationError) as caught:
        signing.open_envelope(signing.envelope(statement, None), pub, "s")
    assert caught.value.message == "the s is not signed"


def test_other_implementations_verify_the_signatures_openssl_and_securesystemslib(
        tmp_path: Path) -> None:
    """No cosign here: the simple-signing signature is checked by openssl(1), the DSSE
    envelope by securesystemslib (in-toto's and TUF's DSSE), neither of them our code."""
    private, public = signing.generate(tmp_path / "k", "pw")
    key = signing.signing_key(private, "pw")
    payload = tmp_path / "payload.json"
    payload.write_bytes(signing.simple_signing("h/r", "sha256:" + "b" * 64))
    (tmp_path / "sig.der").write_bytes(key.sign(payload.read_bytes()))
    checked = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(public),
                              "-signature", str(tmp_path / "sig.der"), str(payload)],
                             capture_output=True, text=True, check=False)
    assert (checked.returncode, checked.stdout.strip()) == (0, "Verified OK")
    payload.write_bytes(payload.read_bytes().replace(b"b" * 64, b"c" * 64))
    tampered = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(public),
                               "-signature", str(tmp_path / "sig.der"), str(payload)],
                              capture_output=True, text=True, check=False)
    assert tampered.returncode == 1 and "Verification failure" in tampered.stdout
    # cosign's envelopes name no key (keyid ""): securesystemslib matches keys by keyid
    loaded = SSlibKey.from_crypto(serialization.load_pem_public_key(public.read_bytes()),
                                  scheme="ecdsa-sha2-nistp256")
    verifier = SSlibKey("", loaded.keytype, loaded.scheme, loaded.keyval)
    sealed = signing.envelope(b'{"predicateType": "x"}', key)
    Envelope.from_dict(json.loads(sealed)).verify([verifier], 1)  # raises if not
    altered = json.loads(sealed)
    altered["payload"] = base64.b64encode(b'{"predicateType": "y"}').decode()
    with pytest.raises(DsseVerificationError):
        Envelope.from_dict(altered).verify([verifier], 1)


def test_key_errors_are_one_line_each_with_exit_2(tmp_path: Path) -> None:
    private, _ = signing.generate(tmp_path / "k", "pw")
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: signing.signing_key(tmp_path / "missing", None), "no such file"),
        (lambda: signing.signing_key(private, None), "protected by a passphrase and none"),
        (lambda: signing.signing_key(private, "wrong"), "the passphrase is wrong"),
        (lambda: signing.public_key(private), "is not a PEM public key"),
        (lambda: signing.generate(private, None), "exists; a key is never overwritten")]
    for call, words in cases:
        with pytest.raises(UsageError) as caught:
            call()
        assert caught.value.exit_code == 2 and words in caught.value.message
        assert "\n" not in caught.value.message


def test_the_cli_generates_keys_and_refuses_publish_with_a_missing_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPARKBAKE_SIGNING_PASSPHRASE", "pw")
    assert main(["keys", "generate", str(tmp_path / "cli.key")]) == 0
    assert signing.signing_key(tmp_path / "cli.key", "pw")
    path = one_patch_project(tmp_path / "p", "a patch\n", "  t:\n    upstream: tree\n"
                                                         "    series: [demo]\n")
    monkeypatch.setenv("SPARKBAKE_SIGNING_KEY", str(tmp_path / "nowhere.key"))
    assert main(["--config", str(path), "publish", "t"]) == 2
    assert f"signing key {tmp_path / 'nowhere.key'}: no such file" in capsys.readouterr().err
    assert main(["verify-release", "h:5000/r:t", "--key", str(tmp_path / "none.pub")]) == 2


def test_keys_generate_into_a_missing_folder_is_one_line_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "missing"
    assert main(["keys", "generate", str(folder / "release.key")]) == 2
    assert capsys.readouterr().err == (
        f"sparkbake: error: keys generate: the folder {folder} does not exist\n"
        f"  -> make it first (mkdir -p {folder}), or give a PATH in a folder that exists\n")
    (tmp_path / "file").write_text("")
    assert main(["keys", "generate", str(tmp_path / "file" / "release.key")]) == 2
    assert f"keys generate: the folder {tmp_path / 'file'} is not a folder" in \
        capsys.readouterr().err
    assert not folder.exists()


def test_verify_release_rebuild_without_against_is_one_line_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before the key is read or a registry reached: neither exists here."""
    code = main(["verify-release", "127.0.0.1:9/r:t", "--key", str(tmp_path / "none.pub"),
                 "--rebuild"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == ("sparkbake: error: --rebuild builds the tag the provenance names in a "
                   "versions.yaml: add --against VERSIONS_YAML\n")


@pytest.mark.parametrize(("reference", "said"), [
    ("localhost:5000/Sparkbake:demo",
     "'localhost:5000/Sparkbake:demo': 'localhost:5000/Sparkbake' is not a repository name"),
    ("localhost:5000/a b:demo", "'localhost:5000/a b' is not a repository name"),
    ("localhost:5000/r:-demo", "'-demo' is not an image tag"),
    ("localhost:5000/r@sha256:abc", "'sha256:abc' is not a digest"),
    ("localhost:5000/r", "'localhost:5000/r' names no tag or digest"),
])
def test_a_bad_reference_is_one_line_with_exit_2_before_anything_is_read_or_sent(
        reference: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify-release", reference, "--key", str(tmp_path / "none.pub")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert said in err[0] and len(err) == 2  # the error, and what to do
