"""The shapes of the OCI JSON documents sparkbake reads and writes: descriptors, image
manifests and indexes, image configs (the image spec's names, as they are spelled on the
wire). Keys the spec makes optional are NotRequired; a config read from a base image may
lack any part, so its parts are all optional."""

from __future__ import annotations

from typing import NotRequired, TypedDict

__all__ = ["ConfigDoc", "ContainerConfig", "DescriptorDoc", "HealthcheckDoc", "HistoryDoc",
           "IndexDoc", "ManifestDoc", "RootFsDoc"]


class DescriptorDoc(TypedDict):
    mediaType: str
    digest: str  # sha256:<hex>
    size: int
    annotations: NotRequired[dict[str, str]]
    artifactType: NotRequired[str]  # an index's entry for an artifact (a referrer)


class ManifestDoc(TypedDict):
    schemaVersion: int
    mediaType: str
    config: DescriptorDoc
    layers: list[DescriptorDoc]
    artifactType: NotRequired[str]
    subject: NotRequired[DescriptorDoc]
    annotations: NotRequired[dict[str, str]]


class IndexDoc(TypedDict):
    schemaVersion: int
    mediaType: str
    manifests: list[DescriptorDoc]


class HealthcheckDoc(TypedDict, total=False):
    Test: list[str]
    Interval: int  # nanoseconds, as the durations below
    Timeout: int
    StartPeriod: int
    StartInterval: int
    Retries: int


class ContainerConfig(TypedDict, total=False):
    """An image config's `config`: how its containers run."""

    User: str
    ExposedPorts: dict[str, dict[str, str]]  # "port/proto": {} (the spec's empty object)
    Env: list[str]
    Entrypoint: list[str]
    Cmd: list[str]
    Volumes: dict[str, dict[str, str]]  # path: {}
    WorkingDir: str
    Labels: dict[str, str]
    StopSignal: str
    Healthcheck: HealthcheckDoc
    Shell: list[str]
    # build state a base's config may carry too (image_config keeps none of it)
    Hostname: str
    Domainname: str
    Image: str
    ArgsEscaped: bool
    OnBuild: list[str] | None


class RootFsDoc(TypedDict, total=False):
    type: str  # "layers"
    diff_ids: list[str]


class HistoryDoc(TypedDict, total=False):
    created: str
    created_by: str
    comment: str
    empty_layer: bool


class ConfigDoc(TypedDict, total=False):
    architecture: str
    variant: str
    os: str
    created: str
    config: ContainerConfig
    rootfs: RootFsDoc
    history: list[HistoryDoc]
