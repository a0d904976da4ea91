"""The image's SBOM: a CycloneDX JSON document of what is in it, made from its own files.

From the layers (imagefiles): every distribution in /opt/venv (name, version, licence from
its metadata, and the wheel's sha256 where the image's manifest lists the wheel), the base's
packages from dpkg's status, and from /opt/sparkbake/manifest.json the upstream as built
(pin, series and patch hashes), the third-party sources and the CUDA toolchain. The same
image gives the same bytes: the serial number is derived from the image digest and the one
time is the image's source date.
"""

from __future__ import annotations

import email.parser
import uuid
import warnings
from datetime import UTC, datetime
from typing import Any

from cyclonedx.contrib.license.factories import LicenseFactory
from cyclonedx.model import (
    ExternalReference,
    ExternalReferenceType,
    HashAlgorithm,
    HashType,
    Property,
    XsUri,
)
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.utils import canonicalize_name

from sparkbake.attest.imagefiles import ImageFiles
from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.oci import image_layout

__all__ = ["document", "python_distributions"]

SERIAL_NAMESPACE = uuid.UUID("5d6f1d5e-6a39-4d0e-9a1b-7f3d2c1e0b57")  # sparkbake's SBOMs


def document(files: ImageFiles, image: image_layout.Descriptor) -> bytes:
    """The CycloneDX 1.6 JSON of the image whose files these are."""
    recorded = files.manifest  # {} for an image sparkbake did not bake: what its layers say
    subject = _image(recorded, image)
    parts = [*python_distributions(files, recorded), *_debian(files), *_built(recorded)]
    bom = Bom(serial_number=uuid.uuid5(SERIAL_NAMESPACE, image.digest), components=parts)
    bom.metadata.timestamp = datetime.fromtimestamp(int(recorded.get("source_date_epoch", 0)), UTC)
    bom.metadata.component = subject
    bom.register_dependency(subject, parts)
    with warnings.catch_warnings():  # the library warns of what a container SBOM leaves out
        warnings.simplefilter("ignore")
        text = JsonV1Dot6(bom).output_as_string(indent=1)
    return text.encode() + b"\n"


def _image(recorded: BakedManifest, image: image_layout.Descriptor) -> Component:
    name, _, tag = str(recorded.get("image", "image:unknown")).rpartition(":")
    purl = PackageURL("oci", name=name.rsplit("/", 1)[-1], version=image.digest,
                      qualifiers={"repository_url": name, "tag": tag})
    return Component(name=name, version=tag, type=ComponentType.CONTAINER, bom_ref="image",
                     purl=purl, hashes=[_sha256(image.digest)],
                     properties=_properties({"sparkbake:inputs": recorded.get("inputs"),
                                             "sparkbake:platform": recorded.get("platform")}))


def python_distributions(files: ImageFiles, recorded: BakedManifest) -> list[Component]:
    """One component per distribution in /opt/venv, by its METADATA."""
    wheels = {_normal(str(w["name"])): str(w["sha256"]) for w in recorded.get("wheels", [])}
    found = []
    for data in files.dist_metadata():
        meta = email.parser.BytesHeaderParser().parsebytes(data)
        name, version = str(meta["Name"]), str(meta["Version"])
        wheel = wheels.get(_normal(name))
        found.append(Component(
            name=name, version=version, bom_ref=f"pypi:{_normal(name)}@{version}",
            purl=PackageURL("pypi", name=_normal(name), version=version),
            licenses=_licence(meta), hashes=[_sha256(wheel)] if wheel else []))
    return found


def _licence(meta: Any) -> list[Any]:
    """License-Expression, else License (its first line: some hold the whole text), else the
    classifiers' names."""
    expression = meta["License-Expression"] or (meta["License"] or "").strip().split("\n")[0]
    names = [expression] if expression and expression.upper() != "UNKNOWN" else [
        str(c).rsplit(" :: ", 1)[-1] for c in meta.get_all("Classifier") or []
        if str(c).startswith("License ::")]
    factory = LicenseFactory()
    return [factory.make_from_string(name[:200]) for name in names if name]


def _debian(files: ImageFiles) -> list[Component]:
    """The installed packages of dpkg's status."""
    found = []
    for stanza in files.dpkg_status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines()
                      if ": " in line and not line.startswith(" "))
        if "Package" not in fields or "installed" not in fields.get("Status", "").split():
            continue
        name, version, arch = fields["Package"], fields.get("Version", ""), fields.get(
            "Architecture", "")
        found.append(Component(
            name=name, version=version, bom_ref=f"deb:{name}@{version}:{arch}",
            purl=PackageURL("deb", files.os_id, name, version, {"arch": arch} if arch else None)))
    return found


def _built(recorded: BakedManifest) -> list[Component]:
    """What the image's manifest says went in: the upstream, the base, third-party sources,
    the CUDA toolchain."""
    parts = [_upstream(recorded), _base(recorded)]
    parts += [_thirdparty(t) for t in recorded.get("thirdparty", [])]
    if recorded.get("nvcc"):
        parts.append(Component(
            name="cuda-toolchain", version=str(recorded["nvcc"]), bom_ref="cuda-toolchain",
            type=ComponentType.FRAMEWORK, properties=_properties({
                "sparkbake:cuda_arch": recorded.get("cuda_arch"),
                "sparkbake:sm_arch": recorded.get("sm_arch"),
                "sparkbake:cuda_home": (recorded.get("jit") or {}).get("cuda_home")})))
    return parts


def _upstream(recorded: BakedManifest) -> Component:
    pin = dict(recorded.get("upstream", {}))
    kind = pin.get("kind", "dir")
    version = pin.get("version") or pin.get("commit") or pin.get("tree", "")
    patches = {f"sparkbake:series:{s['name']}": s["sha256"] for s in recorded.get("series", [])}
    for series in recorded.get("series", []):
        for patch in series["patches"]:
            where = patch.get("url") or patch.get("file")
            patches[f"sparkbake:patch:{series['name']}/{where}"] = patch["sha256"]
    refs = [ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(pin["url"]))] \
        if kind == "git" else []
    return Component(
        name=str(pin.get("name") or pin.get("key", "upstream")), version=version,
        bom_ref="upstream", type=ComponentType.APPLICATION, external_references=refs,
        purl=PackageURL("pypi", name=pin["name"], version=version) if kind == "pypi" else None,
        hashes=[_sha256(pin["sha256"])] if pin.get("sha256") else [],
        properties=_properties({"sparkbake:upstream": kind,
                                "sparkbake:patched_tree": recorded.get("patched_tree"),
                                **patches}))


def _base(recorded: BakedManifest) -> Component:
    base = recorded.get("base", {})
    return Component(name=str(base.get("image", "base")), version=str(base.get("digest", "")),
                     bom_ref="base", type=ComponentType.CONTAINER,
                     properties=_properties({"sparkbake:base": base.get("name")}))


def _thirdparty(source: dict[str, Any]) -> Component:
    return Component(
        name=source["name"], version=source["pin"], bom_ref=f"source:{source['name']}",
        external_references=[ExternalReference(type=ExternalReferenceType.VCS,
                                               url=XsUri(source["url"]))],
        properties=_properties({"sparkbake:tree": source.get("tree"),
                                "sparkbake:ref": source.get("ref")}))


def _properties(values: dict[str, str | None]) -> list[Property]:
    return [Property(name=k, value=str(v)) for k, v in sorted(values.items()) if v]


def _sha256(digest: str) -> HashType:
    return HashType(alg=HashAlgorithm.SHA_256, content=digest.removeprefix("sha256:"))


def _normal(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return str(canonicalize_name(name))
