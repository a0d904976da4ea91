"""The image's own record of what went into it (/opt/sparkbake/manifest.json, written by the
bake, read by attest and publish), and the wheel entries it shares with wheels.json.

It is read back from images baked by any sparkbake version, and from images it did not bake
({}): each part may be absent, so the readers ask for each with .get."""

from __future__ import annotations

from typing import NotRequired, TypedDict

__all__ = ["Asked", "BakedManifest", "BaseRecord", "JitRecord", "KernelJson", "PatchRecord",
           "SeriesRecord", "ThirdPartyJson", "WheelJson"]


class KernelJson(TypedDict):
    path: str
    sha256: str
    sass: list[str]


class WheelJson(TypedDict):
    file: str
    sha256: str
    name: NotRequired[str]  # absent in the reports of early versions
    kernels: NotRequired[list[KernelJson]]


class ThirdPartyJson(TypedDict):
    """One of CMake's third-party sources as the sources lock pins it."""

    name: str
    url: str
    ref: str
    pin: str
    tree: str


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


class Asked(TypedDict):
    """A distribution the tag asks for by name (lock.requirements.Asked)."""

    name: str
    requirement: str
    why: str


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
    wheels: list[WheelJson]
    nvcc: str
    thirdparty: list[ThirdPartyJson]
    asked: list[Asked]
    jit: JitRecord
