"""The image's own record of what went into it (/opt/sparkbake/manifest.json, written by the
bake, read by attest and publish).

It is read back from images baked by any sparkbake version, and from images it did not bake
({}): each part may be absent, so the readers ask for each with .get, and a release record
keeps it as read. Its wheels, CMake's sources and the distributions asked for are the JSON of
records declared where they are made (wheels.report, lock.requirements)."""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["BakedManifest", "BaseRecord", "JitRecord", "PatchRecord", "SeriesRecord"]


class PatchRecord(TypedDict, total=False):
    file: str  # a patch in the series' folder, or
    url: str  # a remote patch
    sha256: str


class SeriesRecord(TypedDict):
    name: str
    sha256: str
    patches: list[PatchRecord]


class BaseRecord(TypedDict, total=False):
    name: str
    image: str
    digest: str


class JitRecord(TypedDict, total=False):
    """The CUDA toolchain the image compiles kernels with at run time."""

    cuda_home: str
    cache: str
    env: dict[str, str]
    path: str


class BakedManifest(TypedDict, total=False):
    schema: int
    tag: str
    image: str
    inputs: str
    upstream: dict[str, str]  # its key and its pin (planning.upstream_pin)
    source_date_epoch: int
    series: list[SeriesRecord]
    patched_tree: str
    cuda_arch: str
    sm_arch: str
    platform: str
    env: dict[str, str]
    capabilities: dict[str, object]  # what the entrypoint's preflight enforces (as_dict)
    base: BaseRecord
    wheels: list[dict[str, Any]]  # wheels.report.Wheel's
    nvcc: str
    thirdparty: list[dict[str, Any]]  # wheels.report.ThirdPartySource's
    asked: list[dict[str, str]]  # lock.requirements.Asked's
    jit: JitRecord
