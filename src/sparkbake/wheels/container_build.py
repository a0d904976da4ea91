"""wheels: build the patched tree's wheels in a builder container and check their kernels."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbake import records, resources, trust
from sparkbake.bases import BaseImage
from sparkbake.config.settings import CompileCacheSettings, Settings
from sparkbake.config.versions import Tag
from sparkbake.console import display
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.core.stages import Stage
from sparkbake.errors import BuildError
from sparkbake.fetch import thirdparty
from sparkbake.files import atomic_dir, link_or_copy, read_json, scratch_dir
from sparkbake.hashing import data_hash, file_sha256
from sparkbake.oci.docker_engine import (
    Client,
    build_image,
    image_exists,
    run_container,
    tag_same_key,
)
from sparkbake.patch.apply import PatchedTree
from sparkbake.wheelfile import stamping
from sparkbake.wheelfile.contents import spelled_name
from sparkbake.wheels import entrycheck
from sparkbake.wheels.report import (
    REPORT,
    CompileCacheUse,
    Jobs,
    Kernel,
    KernelsUsed,
    ThirdPartySource,
    Wheel,
    WheelsReport,
    read_report,
    write_report,
)

if TYPE_CHECKING:
    from sparkbake.wheels import compile_cache, overlay

__all__ = ["REPORT", "BuildRequest", "Jobs", "WheelSet", "build", "builder_image",
           "builder_ref", "check_sass", "compile_jobs", "loadable", "loadable_by"]

BUILD_REPORT = "build-report.json"  # what the builder writes (images/build_wheels.py)
OOM_EXIT = 137
FOR_KERNELS = ".for-kernel-cache"  # in a fresh wheels folder until the kernel cache takes it


@dataclass(frozen=True)
class WheelSet:
    """Wheels of one build: wheels/<key>/*.whl and their report (sha256, SASS per kernel)."""

    folder: Path
    key: str
    report: WheelsReport  # wheels.json

    @property
    def files(self) -> list[str]:
        return [wheel.file for wheel in self.report.wheels]


def is_built(folder: Path) -> bool:
    """Is the wheels stage's entry complete (its report is written last) and intact (each
    wheel the sha256 the report records: entrycheck)? The stage skips it, and `plan` says
    cached, on this one test."""
    return entrycheck.damage(folder) == ""


def reusable_kernels(entry: Path) -> str | None:
    """The kernel cache entry's wheel, if there is one and it is intact: a build of the same
    kernel inputs reuses it instead of compiling (`plan`'s kernels stage is cached on this
    test)."""
    if entrycheck.kernels_damage(entry) != "":
        return None
    wheel: str = read_json(entry / "kernels.json")["wheel"]
    return wheel


def builder_ref(base: BaseImage, lock: Path, settings: Settings) -> str:
    """The engine's name of the builder image for a base and its lock (gc keeps these). The
    key takes the lock's requirements, not its comments (which name the base): pip installs
    the same either way."""
    names = ("builder.Dockerfile.j2", *resources.BUILDER_FILES)
    requirements = [line for line in lock.read_text().splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
    key = data_hash({"base": base.digest, "files": [resources.digest(n) for n in names],
                     "lock": requirements, "index": settings.index_url,
                     "ca": bool(settings.ca_bundle)})
    return f"sparkbake-builder/{base.name}:{key[:12]}"


def builder_image(client: Client, base: BaseImage, lock: Path, settings: Settings,
                  build_dir: Path, *, console: Console) -> str:
    """The builder image for a base and its lock, rendered from images/builder.Dockerfile.j2."""
    ref = builder_ref(base, lock, settings)
    if image_exists(client, ref):
        return ref
    same = tag_same_key(client, ref)
    if same is not None:
        console.detail(f"builder image {ref}: the image of {same}, the same base and lock")
        return ref
    with step(console,
              f"builder image {ref}"), scratch_dir(build_dir / "contexts", "builder.") as context:
        (context / "Dockerfile").write_text(resources.render(
            "builder.Dockerfile.j2", base_image=base.ref, ca_bundle=bool(settings.ca_bundle),
            index_url=settings.index_url))
        for name in resources.BUILDER_FILES:
            shutil.copy(resources.path(name), context / name)
        shutil.copy(lock, context / "builder.lock")
        if settings.ca_bundle:
            shutil.copy(settings.ca_bundle, context / "ca-bundle.crt")
        build_image(client, console, context, ref, error=BuildError)
    return ref


def compile_jobs(info: dict[str, Any], settings: Settings) -> Jobs:
    """Jobs from the memory the engine reports (a Spark's memory is shared with the GPU, and
    too many nvcc jobs exhaust it), not from the core count alone."""
    if settings.max_jobs:
        return Jobs(settings.max_jobs, 1, "SPARKBAKE_MAX_JOBS")
    memory = int(info.get("MemTotal", 0))
    if settings.builder_memory:
        memory = min(memory or _bytes(settings.builder_memory), _bytes(settings.builder_memory))
    gib = memory / 2**30
    cpus = int(info.get("NCPU", 1)) or 1
    jobs = max(1, min(cpus, int(gib // settings.gib_per_job)))
    return Jobs(jobs, 1, f"{gib:.0f} GiB / {settings.gib_per_job:g} GiB per job, {cpus} CPUs")


def _bytes(size: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    number, unit = size[:-1], size[-1].lower()
    if unit not in units or not number.replace(".", "", 1).isdigit():
        raise BuildError(f"SPARKBAKE_BUILDER_MEMORY={size!r} is not a size like 96g",
                         "write a number with k, m, g or t")
    return int(float(number) * units[unit])


@dataclass(frozen=True)
class BuildRequest:
    """Everything one wheels build needs; `kernels` is the kernel cache entry of its key."""

    tag: Tag
    builder: str
    patched: PatchedTree
    folder: Path  # wheels/<wheels key>
    kernels: Path  # wheels/kernels/<kernel key>
    log: Path
    jobs: Jobs
    memory: str | None
    compile_cache: CompileCacheSettings  # the host's word on it (SPARKBAKE_COMPILE_CACHE)
    source_date: int  # SOURCE_DATE_EPOCH of the tag
    third_party: tuple[thirdparty.Fetched, ...] = ()  # CMake's downloads, fetched and verified
    local_version: str = ""  # the local version part the wheels get (stamping)
    pristine: Path | None = None  # the unpatched tree: the kernel cache's wheel is made of it
    build_dir: Path | None = None  # the project's build/: its compile farm, if one is up


def build(client: Client, request: BuildRequest, *, console: Console) -> WheelSet:
    """Build wheels into request.folder unless cached; reuse compiled kernels of the same
    kernel key; check every kernel's SASS."""
    tag, folder = request.tag, request.folder
    if is_built(folder):
        return cached(tag, folder, console=console)
    from sparkbake.oci import emulation  # here, past the cached check: a no-op needs neither
    from sparkbake.wheels import compile_cache, farm_client

    reuse = reusable_kernels(request.kernels)
    how = f"reusing kernels {request.kernels.name[:12]}" if reuse else "compiling kernels"
    backend = compile_cache.reachable(compile_cache.choose(tag.cache, request.compile_cache),
                                      console=console)
    farm = farm_client.in_use(request.build_dir, backend.kind, tag.platform.machine,
                              console=console) if request.build_dir and reuse is None else None
    request = dataclasses.replace(request, jobs=farm_client.with_farm_slots(request.jobs, farm))
    console.detail(f"wheels: MAX_JOBS={request.jobs.max_jobs} ({request.jobs.reason}); {how}; "
         f"compile cache: {backend.describe()}")
    with step(console, f"wheels for {tag.name} ({tag.sm_arch})"), atomic_dir(folder) as out, \
            compile_cache.container_args(client, backend, request.builder,
                                         console=console) as cache, \
            emulation.cpu_sysfs(client, tag.platform) as cpu, \
            farm_client.container_args(farm, request.build_dir or out) as farm_args:
        args = _container_args(request, out, reuse)
        args["volumes"] |= cache.pop("volumes") | cpu | farm_args.pop("volumes", {})
        args["environment"] |= cache.pop("environment") | farm_args.pop("environment", {})
        args |= farm_args
        result = run_container(client, request.builder, [], network="network_mode" in cache,
                               console=console, **args, **cache)
        if result.exit_code != 0:
            oom = result.oom_killed or result.exit_code == OOM_EXIT
            raise _build_failure(request, OOM_EXIT if oom else result.exit_code, result.output)
        built = json.loads((out / BUILD_REPORT).read_text())
        (out / BUILD_REPORT).unlink()
        farm_client.say_where_compiled(farm, result.output, built, console=console)
        kernels = _built_kernels(built)
        pristine = _pristine_copy(kernels, out, request) if reuse is None else None
        wheels = _wheels(tag, out, _stamp(kernels, out, request))
        report = WheelsReport(
            cuda_arch=tag.cuda_arch, sm_arch=tag.sm_arch, nvcc=str(built["nvcc"]),
            wheels=wheels, local_version=request.local_version,
            kernels=KernelsUsed(request.kernels.name, reused=reuse is not None),
            jobs=request.jobs, compile_cache=_cache_report(backend, built, console=console),
            thirdparty=tuple(ThirdPartySource(f.locked.name, f.locked.url, f.locked.ref,
                                              f.locked.pin, f.locked.tree)
                             for f in request.third_party))
        check_sass(tag, report, console=console)
        write_report(out, report)
    if reuse is None:
        _store_kernels(request.kernels, folder, report, pristine)
    return WheelSet(folder, folder.name, report)


def cached(tag: Tag, folder: Path, *, console: Console) -> WheelSet:
    """The wheels stage's cache entry, said to be cached."""
    console.cached(Stage.WHEELS, f"wheels: {tag.name} cached at wheels/{folder.name[:12]}")
    return WheelSet(folder, folder.name, read_report(folder))


def _container_args(request: BuildRequest, out: Path, reuse: str | None) -> dict[str, Any]:
    volumes = {str(request.patched.path): {"bind": "/src", "mode": "ro"},
               str(out): {"bind": "/out", "mode": "rw"}}
    device = request.tag.upstream.device
    # vLLM's own switch for a CPU build; a CUDA build is told its arch instead
    target = {"VLLM_TARGET_DEVICE": "cpu"} if device == "cpu" else \
        {"TORCH_CUDA_ARCH_LIST": request.tag.cuda_arch}
    environment = {**target, "SPARKBAKE_DEVICE": device,
                   "SPARKBAKE_TAG": request.tag.name,
                   "MAX_JOBS": str(request.jobs.max_jobs),
                   "NVCC_THREADS": str(request.jobs.nvcc_threads),
                   # reproducible wheels: zip times, hash order (nvcc's intermediate names:
                   # compile_cache, see README: Reproducibility)
                   "SOURCE_DATE_EPOCH": str(request.source_date), "PYTHONHASHSEED": "0"}
    sources, cmake = thirdparty.builder_args(request.third_party)
    volumes |= sources
    environment |= cmake
    if reuse:
        # vLLM's own switch: take the compiled extensions from a wheel instead of compiling
        volumes[str(request.kernels)] = {"bind": "/kernels", "mode": "ro"}
        environment |= {"VLLM_USE_PRECOMPILED": "1",
                        "VLLM_PRECOMPILED_WHEEL_LOCATION": f"/kernels/{reuse}"}
    limits = {}
    if request.memory:
        limits = {"mem_limit": request.memory, "memswap_limit": request.memory}
    return {"volumes": volumes, "environment": environment, **limits}


def _built_kernels(built: dict[str, Any]) -> dict[str, tuple[Kernel, ...]]:
    """The builder's wheels (their file names, in its order) and the kernels of each."""
    return {str(wheel["file"]): tuple(records.from_json(Kernel, k) for k in wheel["kernels"])
            for wheel in built["wheels"]}


def _stamp(built: dict[str, tuple[Kernel, ...]], out: Path,
           request: BuildRequest) -> dict[str, tuple[Kernel, ...]]:
    """The upstream's wheels given the local version, on this host: one way for any build
    backend (README: Versions)."""
    return {stamping.stamp(out / file, request.local_version, request.source_date,
                           request.tag.upstream.overrides).name: kernels
            for file, kernels in built.items()}


def _cache_report(backend: compile_cache.Backend, built: dict[str, Any], *,
                  console: Console) -> CompileCacheUse:
    """The compile cache used and sccache's counts, printed and kept in wheels.json."""
    from sparkbake.wheels import compile_cache

    used = built.get("sccache") or {}
    stats = compile_cache.summary(used.get("stats"))
    backend_text = used.get("backend") or backend.describe()
    if stats:
        rate = "-" if stats["hit_rate"] is None else f"{stats['hit_rate']:.0%}"
        console.detail(f"compile cache ({backend_text}): {stats['hits']} hits, {stats['misses']} "
                       "misses "
             f"({rate}), {stats['compile_requests']} compile requests, {stats['errors']} errors")
    else:
        console.detail(f"compile cache ({backend_text}): no statistics")
    return CompileCacheUse(backend.kind, backend_text, stats)


def _pristine_copy(built: dict[str, tuple[Kernel, ...]], out: Path,
                   request: BuildRequest) -> overlay.Overlaid | None:
    """The first wheel with kernels as the pristine tree would give it (the series' changes
    to its packages taken back, no local version): what the kernel cache keeps, so that a
    later build of the same kernels is that wheel with its own series (kernelseed)."""
    with_kernels = [file for file, kernels in built.items() if kernels]
    if not with_kernels or request.pristine is None:
        return None
    from sparkbake.wheels import overlay

    (out / FOR_KERNELS).mkdir()
    return overlay.overlay(out / with_kernels[0], request.patched.path, request.pristine,
                           out / FOR_KERNELS, request.source_date)


def _store_kernels(entry: Path, folder: Path, report: WheelsReport,
                   pristine: overlay.Overlaid | None) -> None:
    """Keep the first wheel that carries kernels, for builds whose kernel inputs are the same:
    its pristine copy where there is one (`pristine`: a build may assemble its wheel from it
    on this host), else the wheel (only the builder can reuse it, VLLM_USE_PRECOMPILED).
    Linked where it can be, recorded by the sha256 already taken."""
    with_kernels = [w for w in report.wheels if w.kernels]
    if with_kernels and reusable_kernels(entry) is None:
        first = with_kernels[0]
        wheel, sha256 = ((folder / FOR_KERNELS / pristine.wheel.name, pristine.sha256)
                         if pristine else (folder / first.file, first.sha256))
        with atomic_dir(entry) as tmp:
            link_or_copy(wheel, tmp / wheel.name)
            trust.remember(tmp / wheel.name, tmp / entrycheck.STAMPS / wheel.name)
            (tmp / "kernels.json").write_text(json.dumps(
                {"wheel": wheel.name, "sha256": sha256, "pristine": pristine is not None,
                 "kernels": [records.to_json(kernel) for kernel in first.kernels]}, indent=2))
    shutil.rmtree(folder / FOR_KERNELS, ignore_errors=True)


def _build_failure(request: BuildRequest, exit_code: int, output: str) -> BuildError:
    name = request.tag.name
    if exit_code == OOM_EXIT:
        return BuildError(
            f"the builder for {name} was killed (exit 137: out of memory) running "
            f"MAX_JOBS={request.jobs.max_jobs}; log: {display.shown(request.log)}",
            f"lower the job count: SPARKBAKE_MAX_JOBS={max(1, request.jobs.max_jobs // 2)} "
            "(or raise SPARKBAKE_GIB_PER_JOB)",
        )
    from sparkbake.fetch import download_attempts
    from sparkbake.wheels.compile_errors import failure_summary

    download = download_attempts.explain(output, request.third_party)
    if download is not None:
        what, remedy = download
        return BuildError(f"building wheels for {name} failed (exit {exit_code}): {what}\n"
                          f"  full log: {display.shown(request.log)}", remedy)
    heading, lines = failure_summary(output)  # the cause, not pip's last words
    quoted = "".join(f"\n    {line}" for line in lines)
    return BuildError(f"building wheels for {name} failed (exit {exit_code}); {heading}:"
                      f"{quoted}\n  full log: {display.shown(request.log)}",
                      "fix the error above (see the log)")


def _wheels(tag: Tag, out: Path, built: dict[str, tuple[Kernel, ...]]) -> tuple[Wheel, ...]:
    """The built wheels with their sha256 and distribution names; at least one."""
    wheels = []
    for file, kernels in built.items():
        path = out / file
        wheels.append(Wheel(file, file_sha256(path), spelled_name(file), kernels))
        trust.remember(path, out / entrycheck.STAMPS / path.name)  # hashed once, here
    if not wheels:
        raise BuildError(f"the build of {tag.name} produced no wheel", "check the build log")
    return tuple(wheels)


SASS = re.compile(r"sm_(\d+)(\d)([af]?)")


def loadable(sass: str, target: str) -> bool:
    """Can a device of the target arch (e.g. sm_121a) load this cubin? Same major; a plain or
    family (`f`) cubin of the same or a lower minor; an arch-specific (`a`) one of the same."""
    have, want = SASS.fullmatch(sass), SASS.fullmatch(target)
    if not have or not want or have[1] != want[1]:
        return False
    if have[3] == "a":
        return have[2] == want[2]
    return int(have[2]) <= int(want[2])


def loadable_by(target: str) -> list[str]:
    """Every SASS name a device of the target arch loads, e.g. sm_90a -> sm_90, sm_90a."""
    major = SASS.fullmatch(target)
    if major is None:
        return [target]
    names = (f"sm_{major[1]}{minor}{suffix}" for minor in range(10) for suffix in ("", "a", "f"))
    return sorted(n for n in names if loadable(n, target))


def check_sass(tag: Tag, report: WheelsReport, *, console: Console) -> None:
    """Every CUDA shared library must carry SASS that a device of the tag's arch loads,
    but those a kernel seed declares as built for other devices (a CPU build: none)."""
    if tag.upstream.device == "cpu":
        return  # a CPU build's libraries carry no device code
    exempt = set(tag.kernels.other_arch if tag.kernels else ())
    found = {kernel.path for wheel in report.wheels for kernel in wheel.kernels}
    if exempt - found:
        raise BuildError(f"kernels.other_arch of {tag.name} names libraries no wheel has: "
                         f"{', '.join(sorted(exempt - found))}", "remove them from versions.yaml")
    for wheel in report.wheels:
        for kernel in wheel.kernels:
            if kernel.path in exempt:
                continue
            usable = [sass for sass in kernel.sass if loadable(sass, tag.sm_arch)]
            if not usable:
                has = ", ".join(kernel.sass) or "none"
                raise BuildError(
                    f"{wheel.file}: {kernel.path} has no SASS a {tag.sm_arch} device "
                    f"loads (has: {has})",
                    f"build it for cuda_arch {tag.cuda_arch} (TORCH_CUDA_ARCH_LIST)",
                )
            if tag.sm_arch not in usable:
                console.detail(f"kernels: {kernel.path}: no {tag.sm_arch} SASS; taking "
                     f"{', '.join(usable)}, which a {tag.sm_arch} device loads (same major "
                     "version, a lower or equal minor, not arch-specific)")
