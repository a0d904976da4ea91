"""The frozen dataclasses versions.yaml is read into (by versions.py, which re-exports them)."""

from __future__ import annotations

import re
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from sparkbake.config.platforms import Platform
from sparkbake.config.yamlsource import did_you_mean
from sparkbake.errors import ConfigError

__all__ = ["CAPABILITY_KEYS", "CUDA_ARCH", "DEFAULT_SMOKE_SUITE", "Base", "Capabilities",
           "CompileCache", "Config",
           "DebootstrapBase", "DirUpstream", "GitUpstream", "ImageBase", "KernelSeed", "Listed",
           "PypiUpstream", "Tag", "Upstream", "UpstreamCommon"]

CUDA_ARCH = re.compile(r"(\d+)\.(\d)([af]?)")
DEFAULT_SMOKE_SUITE = "common"  # smoke/<suite>/ or images/smoke/<suite>/: sample .env files


@dataclass(frozen=True)
class ImageBase:
    """A base image from a registry, pinned by digest."""

    name: str
    image: str
    python: str | None = None  # its python3 version, for the builder lock

    @property
    def digest(self) -> str:
        return "sha256:" + self.image.rsplit("@sha256:", 1)[1]


@dataclass(frozen=True)
class DebootstrapBase:
    """A Debian base image made locally with debootstrap and `docker import`."""

    name: str
    suite: str
    mirror: str | None
    variant: str
    packages: tuple[str, ...]
    python: str | None = None  # its python3 version, for the builder lock


Base = ImageBase | DebootstrapBase


@dataclass(frozen=True)
class UpstreamCommon:
    """What every kind of upstream declares besides where its tree comes from: its key
    first, then keywords only, so a kind's own fields follow the key positionally."""

    key: str
    _: KW_ONLY
    # declared; else a git pin's commit time, a folder's time, an sdist's DEFAULT_SOURCE_DATE
    source_date_epoch: int | None = None
    build_requirements: str | None = None  # in the tree: what its build imports (torch, ...)
    runtime_requirements: str | None = None  # in the tree: what its wheels need installed
    # CMake files of the tree whose downloads this build never reaches -> why (cmake_sources)
    cmake_skip: tuple[tuple[str, str], ...] = ()
    # cached kernels: `assemble` the wheel on this host from the cached one and the series'
    # Python files (any upstream), or run the `builder` with VLLM_USE_PRECOMPILED (vLLM's)
    kernel_reuse: str = "assemble"
    # what the build targets: vLLM's VLLM_TARGET_DEVICE (`cuda`, or `cpu`: no CUDA kernels)
    device: str = "cuda"
    # requirements that replace the requirement files' own for a package, in every lock of
    # the upstream (a version its files ask for that the package index does not carry)
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class PypiUpstream(UpstreamCommon):
    name: str
    version: str
    sha256: str


@dataclass(frozen=True)
class GitUpstream(UpstreamCommon):
    url: str  # as written: part of the pin, so a checkout's location does not change keys
    commit: str
    source: str  # what git fetches from: the url, or a local path resolved to the config


@dataclass(frozen=True)
class DirUpstream(UpstreamCommon):
    path: Path


Upstream = PypiUpstream | GitUpstream | DirUpstream


@dataclass(frozen=True)
class KernelSeed:
    """A published wheel whose compiled extensions stand for the pristine upstream's kernels:
    the kernel cache entry is taken from it instead of compiling (`kernels:` of a tag)."""

    wheel: str  # its file name on the package index
    sha256: str
    # its libraries built only for other devices (the runtime picks them by capability):
    # exempt from the arch check, which still covers every other library
    other_arch: tuple[str, ...] = ()

    @property
    def project(self) -> str:
        """The wheel's distribution, as the package index names its page."""
        from packaging.utils import parse_wheel_filename
        return str(parse_wheel_filename(self.wheel)[0])


@dataclass(frozen=True)
class CompileCache:
    """The builder's compile cache (sccache; README: Caches): a folder on this host, or a
    Redis server that builders on other hosts share (`cache: {redis: URL}`)."""

    redis: str | None = None


# what a tag's image can run (`capabilities:`); each key's default is the cautious one
CAPABILITY_KEYS = ("dcp_sizes", "images_under_dcp", "prefix_cache_under_dcp", "speculative",
                   "ckv_gather", "vision_mhc", "model", "device_memory_gib")


@dataclass(frozen=True)
class Capabilities:
    """What a tag's image can run, declared in versions.yaml and enforced by the image's
    preflight (README: Preflight); `because` says, per key, why it cannot do more."""

    dcp_sizes: tuple[int, ...] = (1,)  # DeepSeek-V4 decode-context-parallel sizes
    images_under_dcp: bool = False  # image requests at DCP > 1
    prefix_cache_under_dcp: bool = False  # VLLM_DSV4_DCP_PREFIX_CACHE=1 at DCP > 1
    speculative: tuple[str, ...] = ()  # speculative methods (`dspark`)
    ckv_gather: bool = False  # VLLM_DSV4_CKV_GATHER / _ALLOW_IMAGES on a path that reads them
    vision_mhc: bool = False  # VISION_MHC read by something in the image
    model: str | None = None  # the model family served, as vLLM names it (vllm/models/NAME)
    device_memory_gib: float | None = None  # the GPU's total as vLLM reads it (GB10: 121.7)
    because: tuple[tuple[str, str], ...] = ()  # capability key -> why not more

    def as_dict(self) -> dict[str, object]:
        """The JSON form the image's manifest carries and its preflight reads."""
        optional = {key: value for key, value in (("model", self.model),
                                                  ("device_memory_gib", self.device_memory_gib))
                    if value is not None}
        return {"dcp_sizes": list(self.dcp_sizes), "images_under_dcp": self.images_under_dcp,
                "prefix_cache_under_dcp": self.prefix_cache_under_dcp,
                "speculative": list(self.speculative), "ckv_gather": self.ckv_gather,
                "vision_mhc": self.vision_mhc, **optional, "because": dict(self.because)}


@dataclass(frozen=True)
class Listed:
    """A list from versions.yaml and where it is written (`versions.yaml:12`)."""

    items: tuple[str, ...] = ()
    at: str = ""


@dataclass(frozen=True)
class Tag:
    """One image tag with every default and `extends` resolved."""

    name: str
    upstream: Upstream
    series: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    repository: str
    platform: Platform
    cuda_arch: str
    builder: Base
    runtime: Base
    smoke: str = DEFAULT_SMOKE_SUITE  # the smoke suite: its sample .env files (README: Smoke)
    cache: CompileCache = CompileCache()  # top-level `cache:`, the same for every tag
    kernels: KernelSeed | None = None
    capabilities: Capabilities | None = None  # None: not declared, and not enforced
    extras: Listed = Listed()  # the upstream's extras the runtime lock adds (b12x)
    pins: Listed = Listed()  # exact versions over the upstream's runtime requirements
    release: str | None = None  # the multi-platform tag this is one platform of (platforms)

    @property
    def sm_arch(self) -> str:
        """`12.1a` -> `sm_121a`: the SASS the kernels must carry."""
        major, minor, suffix = CUDA_ARCH.fullmatch(self.cuda_arch).groups()  # type: ignore[union-attr]
        return f"sm_{major}{minor}{suffix}"

    @property
    def image_ref(self) -> str:
        return f"{self.repository}:{self.name}"

    @property
    def vllm_version(self) -> str | None:
        """The image's vLLM version as the host knows it: its upstream's PyPI pin; None for
        another upstream."""
        upstream = self.upstream
        if isinstance(upstream, PypiUpstream) and upstream.name == "vllm":
            return upstream.version
        return None


@dataclass(frozen=True)
class Config:
    path: Path
    tags: dict[str, Tag] = field(hash=False)
    upstreams: dict[str, Upstream] = field(default_factory=dict, hash=False)
    work: Path | None = None  # where build/ and wheels/ go, if not beside versions.yaml
    # multi-platform tags: NAME -> its platforms' tags (NAME-arm64, ...), in `platforms` order
    releases: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @property
    def wheels_dir(self) -> Path:
        return (self.work or self.root) / "wheels"

    @property
    def build_dir(self) -> Path:
        return (self.work or self.root) / "build"

    def tag(self, name: str) -> Tag:
        """Find a tag by its full name or by a unique suffix (`3.73-vision`)."""
        if name in self.tags:
            return self.tags[name]
        matches = [t for t in self.tags if t.endswith("-" + name)]
        if len(matches) == 1:
            return self.tags[matches[0]]
        if (release := self.release_name(name)) is not None:
            raise ConfigError(f"{self.path}: {name!r} is a multi-platform tag; this command "
                              "takes the tag of one platform",
                              f"name one of: {', '.join(self.releases[release])}")
        if matches:
            raise ConfigError(
                f"{self.path}: tag {name!r} is ambiguous: {', '.join(sorted(matches))}",
                "give the full tag name",
            )
        raise ConfigError(
            f"{self.path}: no tag {name!r}{did_you_mean(name, [*self.tags, *self.releases])}",
            f"known tags: {', '.join(sorted([*self.tags, *self.releases]))}",
        )

    def release_name(self, name: str) -> str | None:
        """The multi-platform tag a name means (full, or a unique suffix), if any."""
        if name in self.releases:
            return name
        matches = [r for r in self.releases if r.endswith("-" + name)]
        return matches[0] if len(matches) == 1 and name not in self.tags else None

    def targets(self, name: str) -> tuple[Tag, ...]:
        """The tags a command on name runs for: a multi-platform tag's platforms, in order,
        else the one tag."""
        release = self.release_name(name)
        if release is not None:
            return tuple(self.tags[t] for t in self.releases[release])
        return (self.tag(name),)
