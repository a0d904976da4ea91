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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from sparkbake import records
from sparkbake.files import read_json

__all__ = ["REPORT", "CompileCacheUse", "Jobs", "Kernel", "KernelsUsed", "ThirdPartySource",
           "Wheel", "WheelsReport", "read_report", "write_report"]

REPORT = "wheels.json"


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


@dataclass(frozen=True)
class Kernel:
    """A shared library of a wheel that carries device code, and the SASS arches it has."""

    path: str  # in the wheel
    sha256: str
    sass: tuple[str, ...]  # e.g. sm_121a


@dataclass(frozen=True)
class Wheel:
    """One wheel of the set: its file in the folder, sha256, distribution and kernels."""

    file: str
    sha256: str
    # the distribution's name as the file spells it (contents.spelled_name); absent in the
    # reports of early versions, as kernels
    name: str = ""
    kernels: tuple[Kernel, ...] = ()


@dataclass(frozen=True)
class KernelsUsed:
    """The kernel cache entry of the build and whether its kernels were reused; for wheels
    made on this host, the cache's wheel they were made of (a seed, or a pristine copy)."""

    key: str
    reused: bool
    # the published wheel the tag's kernels are taken from
    seed: str = field(default="", metadata=records.OMIT_EMPTY)
    # the pristine copy an earlier build left in the cache
    assembled_from: str = field(default="", metadata=records.key("assembled from", omit="empty"))


@dataclass(frozen=True)
class Jobs:
    """How many compile jobs the builder runs, and why."""

    max_jobs: int = field(metadata=records.key("MAX_JOBS"))
    nvcc_threads: int = field(metadata=records.key("NVCC_THREADS"))
    reason: str = field(metadata=records.key("why"))


@dataclass(frozen=True)
class CompileCacheUse:
    """The compile cache a build used, and sccache's counts (compile_cache.summary)."""

    backend: str  # what was chosen: off, local or redis
    used: str  # what served the build, fallbacks included
    stats: CacheCounts = field(default_factory=CacheCounts)  # sccache's; {}: it gave none


@dataclass(frozen=True)
class ThirdPartySource:
    """One of CMake's third-party sources as the sources lock pins it."""

    name: str
    url: str
    ref: str
    pin: str
    tree: str


@dataclass(frozen=True)
class WheelsReport:
    """wheels.json: the wheels and what made them. jobs, compile_cache and thirdparty are
    recorded by a build in the builder; series_files (not None) marks wheels made on this
    host. None: not in the report (one of an earlier version, which has only the wheels for
    certain)."""

    cuda_arch: str = field(metadata=records.key(absent=""))
    sm_arch: str = field(metadata=records.key(absent=""))
    # the compiler's version line, or why none ran (a kernel seed's wheel)
    nvcc: str = field(metadata=records.key(absent=""))
    wheels: tuple[Wheel, ...]
    local_version: str = ""  # the local version part the wheels carry (stamping)
    kernels: KernelsUsed | None = field(default=None, metadata=records.OMIT_NONE)
    jobs: Jobs | None = field(default=None, metadata=records.OMIT_NONE)
    compile_cache: CompileCacheUse | None = field(default=None, metadata=records.OMIT_NONE)
    # CMake's sources, as locked
    thirdparty: tuple[ThirdPartySource, ...] | None = field(default=None,
                                                            metadata=records.OMIT_NONE)
    # the series' files in the wheel
    series_files: tuple[str, ...] | None = field(
        default=None, metadata=records.key("series files", omit="none"))


# The keys in the order each kind of build has always written them. The builder writes a
# wheel's file and kernels, this host adds its sha256 and name; the report's own keys are in
# field order.
AS_BUILT: records.Orders = {Wheel: ("file", "kernels", "sha256", "name")}
# wheels made on this host: a wheel's keys in field order, the report's these alone
MADE_HERE: records.Orders = {WheelsReport: ("cuda_arch", "sm_arch", "nvcc", "wheels", "kernels",
                                            "series_files", "local_version")}


def read_report(folder: Path) -> WheelsReport:
    """The report of a wheels entry (read_json names the file when it is damaged)."""
    return records.from_json(WheelsReport, read_json(folder / REPORT))


def write_report(folder: Path, report: WheelsReport) -> None:
    """wheels.json as the stage has always written it: indented, no final newline."""
    orders = AS_BUILT if report.series_files is None else MADE_HERE
    (folder / REPORT).write_text(json.dumps(records.to_json(report, orders), indent=2))
