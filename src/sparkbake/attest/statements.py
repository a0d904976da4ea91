"""The in-toto statements publish attaches to an image: SLSA provenance v1 (what the build
took in and how it was defined) and the smoke verdict as a test result.

Both are plain data made from the plan, the image's own manifest and the smoke record; the
provenance's resolved dependencies come from the plan alone, so `verify-release --against`
makes them again from a checkout and compares them entry by entry.
"""

from __future__ import annotations

import json

from sparkbake.attest.intoto import (
    BuildDefinition,
    Provenance,
    ResourceDescriptor,
    RunDetails,
    TestResult,
)
from sparkbake.config.model import Base
from sparkbake.config.versions import Config
from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.core.smoke_record import SmokeReport
from sparkbake.core.stages import Stage
from sparkbake.fetch import sourcelock
from sparkbake.hashing import file_sha256
from sparkbake.lock import pins
from sparkbake.oci import image_layout
from sparkbake.planning import Plan, base_identity, upstream_pin

__all__ = ["PROVENANCE", "STATEMENT", "TEST_RESULT", "provenance", "resolved", "statement",
           "subject", "test_result"]

STATEMENT = "https://in-toto.io/Statement/v1"
PROVENANCE = "https://slsa.dev/provenance/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
BUILD_TYPE = "urn:sparkbake:build:v1"  # the buildDefinition below: docs/reference/image.md
BUILDER = "urn:sparkbake:builder"
BUILT_PREFIXES = ("built:", "source:")  # what the bake resolved, not the plan: not compared


def subject(repository: str, digest: str) -> list[ResourceDescriptor]:
    return [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}]


def statement(repository: str, digest: str, predicate_type: str,
              predicate: Provenance | TestResult) -> bytes:
    return json.dumps({"_type": STATEMENT, "subject": subject(repository, digest),
                       "predicateType": predicate_type, "predicate": predicate},
                      sort_keys=True, indent=1).encode()


def provenance(config: Config, plan: Plan, repository: str, digest: str,
               recorded: BakedManifest, sbom: image_layout.Descriptor) -> bytes:
    """The SLSA provenance v1 statement of the image digest."""
    build: BuildDefinition = {"buildType": BUILD_TYPE,
             "externalParameters": {"tag": plan.tag.name,
                                    "versions.yaml": {"sha256": file_sha256(config.path)}},
             "internalParameters": {"sparkbake": _version(), "inputs": plan.inputs,
                                    "keys": {str(stage): plan.key(stage) for stage in _KEYED},
                                    "platform": str(plan.tag.platform),
                                    "cuda_arch": plan.tag.cuda_arch},
             "resolvedDependencies": [*resolved(config, plan), *_built(recorded)]}
    run: RunDetails = {"builder": {"id": BUILDER, "version": {"sparkbake": _version()},
                       "builderDependencies": [_base("builder", plan.tag.builder)]},
           "metadata": {"invocationId": plan.inputs},
           "byproducts": [{"name": "sbom", "mediaType": sbom.media_type,
                           "digest": {"sha256": sbom.digest.removeprefix("sha256:")}}]}
    return statement(repository, digest, PROVENANCE, {"buildDefinition": build,
                                                      "runDetails": run})


_KEYED = (Stage.FETCH, Stage.PATCH, Stage.KERNELS, Stage.WHEELS, Stage.BAKE)


def resolved(config: Config, plan: Plan) -> list[ResourceDescriptor]:
    """The inputs the plan pins, as resource descriptors named by what they are."""
    found = [_upstream(plan), _base("runtime", plan.tag.runtime)]
    for series in plan.series:
        found.append({"name": f"series:{series.name}", "digest": {"sha256": series.sha256}})
        for name, sha in series.patches:
            found.append({"name": f"patch:{series.name}/{name}", "digest": {"sha256": sha}})
    locks = {"lock:builder": pins.lock_path(config, plan.tag),
             "lock:runtime": pins.runtime_lock_path(config, plan.tag),
             "lock:sources": sourcelock.lock_path(config, plan.tag)}
    found += [{"name": name, "uri": path.relative_to(config.root).as_posix(),
               "digest": {"sha256": file_sha256(path)}}
              for name, path in locks.items() if path is not None and path.is_file()]
    return found


def _upstream(plan: Plan) -> ResourceDescriptor:
    pin = upstream_pin(plan.tag.upstream)
    if pin["kind"] == "pypi":
        return {"name": "upstream", "uri": f"pkg:pypi/{pin['name']}@{pin['version']}",
                "digest": {"sha256": pin["sha256"]}}
    if pin["kind"] == "git":
        return {"name": "upstream", "uri": f"git+{pin['url']}",
                "digest": {"gitCommit": pin["commit"]}}
    return {"name": "upstream", "uri": f"dir:{pin['path']}", "digest": {"sha256": pin["tree"]}}


def _base(role: str, base: Base) -> ResourceDescriptor:
    identity = base_identity(base)
    ref = identity.get("image")
    if ref is None:  # made here by debootstrap: named by what makes it
        return {"name": f"base:{role}", "annotations": identity["debootstrap"]}
    _, _, digest = str(ref).partition("@sha256:")
    found: ResourceDescriptor = {"name": f"base:{role}", "uri": f"docker://{ref}"}
    if digest:
        found["digest"] = {"sha256": digest}
    return found


def _built(recorded: BakedManifest) -> list[ResourceDescriptor]:
    """What the bake resolved: the runtime base's image ID, CMake's third-party sources."""
    base = recorded.get("base", {})
    found: list[ResourceDescriptor] = [{"name": "built:runtime-base", "uri": f"docker://{base.get('image')}",
              "digest": {"sha256": str(base.get("digest", "")).removeprefix("sha256:")}}] \
        if base else []
    return found + [{"name": f"source:{s['name']}", "uri": f"git+{s['url']}",
                     "digest": {"gitCommit": s["pin"], "sha256": s["tree"]}}
                    for s in recorded.get("thirdparty", [])]


def test_result(repository: str, digest: str, record: SmokeReport) -> bytes:
    """The smoke verdict as in-toto's test-result predicate: a skipped check is a warned one,
    named with its reason."""
    by: dict[str, list[str]] = {"passed": [], "skipped": [], "failed": []}
    for check in record.checks:
        label = check.name if check.status != "skipped" else f"{check.name}: {check.detail}"
        by.setdefault(check.status, []).append(label)
    predicate: TestResult = {"result": "PASSED" if record.passed else "FAILED",
                 "passedTests": by["passed"], "warnedTests": by["skipped"],
                 "failedTests": by["failed"],
                 "configuration": [{"name": "smoke", "annotations": {
                     "suite": record.suite, "gpu": record.gpu, "model": record.model,
                     "image_id": record.image_id, "time": record.time}}]}
    return statement(repository, digest, TEST_RESULT, predicate)


def _version() -> str:
    import importlib.metadata  # here: it imports the email package, slow, for attestations alone

    try:
        return importlib.metadata.version("sparkbake")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
