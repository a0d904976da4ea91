"""The shapes of the in-toto statements publish attaches and verify-release reads: the
statement, its resource descriptors, and its two predicates, SLSA provenance v1 and the
test result (the spec's names, as they are spelled on the wire)."""

from __future__ import annotations

from typing import Generic, TypedDict, TypeVar

__all__ = ["BuildDefinition", "Builder", "InternalParameters", "Provenance",
           "ResourceDescriptor", "RunDetails", "Statement", "TestResult"]


class ResourceDescriptor(TypedDict, total=False):
    name: str
    uri: str
    mediaType: str
    digest: dict[str, str]  # algorithm: hex
    annotations: dict[str, object]  # any JSON value, as the spec allows


# the externalParameters: the tag, and the sha256 of the versions.yaml it was read from
ExternalParameters = TypedDict("ExternalParameters", {"tag": str,
                                                      "versions.yaml": dict[str, str]})


class InternalParameters(TypedDict):
    sparkbake: str  # its version
    inputs: str
    keys: dict[str, str]  # stage: its key
    platform: str
    cuda_arch: str


class BuildDefinition(TypedDict):
    buildType: str
    externalParameters: ExternalParameters
    internalParameters: InternalParameters
    resolvedDependencies: list[ResourceDescriptor]


class Builder(TypedDict):
    id: str
    version: dict[str, str]
    builderDependencies: list[ResourceDescriptor]


class RunDetails(TypedDict):
    builder: Builder
    metadata: dict[str, str]
    byproducts: list[ResourceDescriptor]


class Provenance(TypedDict):
    buildDefinition: BuildDefinition
    runDetails: RunDetails


class TestResult(TypedDict):
    result: str  # PASSED | FAILED
    passedTests: list[str]
    warnedTests: list[str]
    failedTests: list[str]
    configuration: list[ResourceDescriptor]


P = TypeVar("P")  # the predicate, by predicateType


class Statement(TypedDict, Generic[P]):
    _type: str
    subject: list[ResourceDescriptor]
    predicateType: str
    predicate: P
