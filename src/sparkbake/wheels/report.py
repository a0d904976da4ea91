"""wheels.json: the wheels stage's record of its wheels (file, sha256, the SASS of each
kernel) and of how they were made, beside them in wheels/<key>.

A build in the builder container records its compile jobs, compile cache and CMake's
sources; wheels made on this host from the kernel cache's wheel record the series' files
they carry instead. Each kind is written with the keys in the order it has always had, so
a report read and written again is the same bytes; a report of an earlier sparkbake, which
lacks some keys, reads with those parts absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, Self, TypedDict

from sparkbake.core.baked_manifest import KernelJson, ThirdPartyJson, WheelJson
from sparkbake.files import read_json

__all__ = ["REPORT", "CompileCacheUse", "Jobs", "Kernel", "KernelsUsed", "ThirdPartySource",
           "Wheel", "WheelsReport", "read_report", "write_report"]

REPORT = "wheels.json"

# the report's parts as JSON (keys with spaces: the functional form)
KernelsUsedJson = TypedDict("KernelsUsedJson", {
    "key": str, "reused": bool, "seed": NotRequired[str], "assembled from": NotRequired[str]})


class JobsJson(TypedDict):
    MAX_JOBS: int
    NVCC_THREADS: int
    why: str


class CacheCounts(TypedDict, total=False):
    """The counts that matter of sccache's (compile_cache.summary); {}: it gave none."""

    compile_requests: int
    hits: int
    misses: int
    hit_rate: float | None
    hits_by_kind: dict[str, int]
    misses_by_kind: dict[str, int]
    not_cacheable: int
    errors: int
    version: str | None


class CompileCacheJson(TypedDict):
    backend: str
    used: str
    stats: CacheCounts


WheelsReportJson = TypedDict("WheelsReportJson", {
    "wheels": list[WheelJson],  # the rest is absent in the reports of earlier versions
    "cuda_arch": NotRequired[str], "sm_arch": NotRequired[str], "nvcc": NotRequired[str],
    "local_version": NotRequired[str], "kernels": NotRequired[KernelsUsedJson],
    "series files": NotRequired[list[str]], "jobs": NotRequired[JobsJson],
    "compile_cache": NotRequired[CompileCacheJson],
    "thirdparty": NotRequired[list[ThirdPartyJson]]})


@dataclass(frozen=True)
class Kernel:
    """A shared library of a wheel that carries device code, and the SASS arches it has."""

    path: str  # in the wheel
    sha256: str
    sass: tuple[str, ...]  # e.g. sm_121a

    def to_json(self) -> KernelJson:
        return {"path": self.path, "sha256": self.sha256, "sass": list(self.sass)}

    @classmethod
    def from_json(cls, data: KernelJson) -> Self:
        return cls(str(data["path"]), str(data["sha256"]), tuple(str(s) for s in data["sass"]))


@dataclass(frozen=True)
class Wheel:
    """One wheel of the set: its file in the folder, sha256, distribution and kernels."""

    file: str
    sha256: str
    name: str  # the distribution's name as the file spells it (contents.spelled_name)
    kernels: tuple[Kernel, ...]

    def to_json(self, *, as_built: bool = False) -> WheelJson:
        """as_built: the builder's order (its file and kernels first, sha256 and name added
        on this host); else the order of a wheel made on this host."""
        kernels = [kernel.to_json() for kernel in self.kernels]
        if as_built:
            return {"file": self.file, "kernels": kernels, "sha256": self.sha256,
                    "name": self.name}
        return {"file": self.file, "sha256": self.sha256, "name": self.name,
                "kernels": kernels}

    @classmethod
    def from_json(cls, data: WheelJson) -> Self:
        return cls(str(data["file"]), str(data["sha256"]), str(data.get("name", "")),
                   tuple(Kernel.from_json(k) for k in data.get("kernels") or ()))


@dataclass(frozen=True)
class KernelsUsed:
    """The kernel cache entry of the build and whether its kernels were reused; for wheels
    made on this host, the cache's wheel they were made of (a seed, or a pristine copy)."""

    key: str
    reused: bool
    seed: str = ""  # the published wheel the tag's kernels are taken from
    assembled_from: str = ""  # the pristine copy an earlier build left in the cache

    def to_json(self) -> KernelsUsedJson:
        used: KernelsUsedJson = {"key": self.key, "reused": self.reused}
        if self.seed:
            used["seed"] = self.seed
        if self.assembled_from:
            used["assembled from"] = self.assembled_from
        return used

    @classmethod
    def from_json(cls, data: KernelsUsedJson) -> Self:
        return cls(str(data["key"]), bool(data["reused"]), str(data.get("seed", "")),
                   str(data.get("assembled from", "")))


@dataclass(frozen=True)
class Jobs:
    """How many compile jobs the builder runs, and why."""

    max_jobs: int
    nvcc_threads: int
    reason: str

    def to_json(self) -> JobsJson:
        return {"MAX_JOBS": self.max_jobs, "NVCC_THREADS": self.nvcc_threads,
                "why": self.reason}

    @classmethod
    def from_json(cls, data: JobsJson) -> Self:
        return cls(int(data["MAX_JOBS"]), int(data["NVCC_THREADS"]), str(data["why"]))


@dataclass(frozen=True)
class CompileCacheUse:
    """The compile cache a build used, and sccache's counts (compile_cache.summary)."""

    backend: str  # what was chosen: off, local or redis
    used: str  # what served the build, fallbacks included
    stats: CacheCounts  # sccache's counts; {} when it gave none

    def to_json(self) -> CompileCacheJson:
        return {"backend": self.backend, "used": self.used, "stats": self.stats}

    @classmethod
    def from_json(cls, data: CompileCacheJson) -> Self:
        return cls(str(data["backend"]), str(data["used"]), CacheCounts(**data.get("stats") or {}))


@dataclass(frozen=True)
class ThirdPartySource:
    """One of CMake's third-party sources as the sources lock pins it."""

    name: str
    url: str
    ref: str
    pin: str
    tree: str

    def to_json(self) -> ThirdPartyJson:
        return {"name": self.name, "url": self.url, "ref": self.ref, "pin": self.pin,
                "tree": self.tree}

    @classmethod
    def from_json(cls, data: ThirdPartyJson) -> Self:
        return cls(str(data["name"]), str(data["url"]), str(data["ref"]), str(data["pin"]),
                   str(data["tree"]))


@dataclass(frozen=True)
class WheelsReport:
    """wheels.json: the wheels and what made them. jobs, compile_cache and thirdparty are
    recorded by a build in the builder; series_files (not None) marks wheels made on this
    host. None: not in the report (one of an earlier version)."""

    cuda_arch: str
    sm_arch: str
    nvcc: str  # the compiler's version line, or why none ran (a kernel seed's wheel)
    wheels: tuple[Wheel, ...]
    local_version: str = ""  # the local version part the wheels carry (stamping)
    kernels: KernelsUsed | None = None
    jobs: Jobs | None = None
    compile_cache: CompileCacheUse | None = None
    thirdparty: tuple[ThirdPartySource, ...] | None = None  # CMake's sources, as locked
    series_files: tuple[str, ...] | None = None  # the series' files in the wheel

    def to_json(self) -> WheelsReportJson:
        """The keys in the order each kind of build has always written them."""
        as_built = self.series_files is None
        doc: WheelsReportJson = {
            "cuda_arch": self.cuda_arch, "sm_arch": self.sm_arch, "nvcc": self.nvcc,
            "wheels": [wheel.to_json(as_built=as_built) for wheel in self.wheels]}
        if self.series_files is not None:
            if self.kernels:
                doc["kernels"] = self.kernels.to_json()
            doc["series files"] = list(self.series_files)
            doc["local_version"] = self.local_version
            return doc
        doc["local_version"] = self.local_version
        if self.kernels:
            doc["kernels"] = self.kernels.to_json()
        if self.jobs:
            doc["jobs"] = self.jobs.to_json()
        if self.compile_cache:
            doc["compile_cache"] = self.compile_cache.to_json()
        if self.thirdparty is not None:
            doc["thirdparty"] = [source.to_json() for source in self.thirdparty]
        return doc

    @classmethod
    def from_json(cls, data: WheelsReportJson) -> Self:
        """Only the wheels are required (their files and sha256 are what the entry's check
        reads); the rest is absent in the reports of earlier versions."""
        kernels, jobs, cache = data.get("kernels"), data.get("jobs"), data.get("compile_cache")
        thirdparty, series_files = data.get("thirdparty"), data.get("series files")
        return cls(
            cuda_arch=str(data.get("cuda_arch", "")), sm_arch=str(data.get("sm_arch", "")),
            nvcc=str(data.get("nvcc", "")),
            wheels=tuple(Wheel.from_json(wheel) for wheel in data["wheels"]),
            local_version=str(data.get("local_version", "")),
            kernels=KernelsUsed.from_json(kernels) if kernels is not None else None,
            jobs=Jobs.from_json(jobs) if jobs is not None else None,
            compile_cache=CompileCacheUse.from_json(cache) if cache is not None else None,
            thirdparty=(tuple(ThirdPartySource.from_json(source) for source in thirdparty)
                        if thirdparty is not None else None),
            series_files=tuple(series_files) if series_files is not None else None)


def read_report(folder: Path) -> WheelsReport:
    """The report of a wheels entry (read_json names the file when it is damaged)."""
    return WheelsReport.from_json(read_json(folder / REPORT))


def write_report(folder: Path, report: WheelsReport) -> None:
    """wheels.json as the stage has always written it: indented, no final newline."""
    (folder / REPORT).write_text(json.dumps(report.to_json(), indent=2))
