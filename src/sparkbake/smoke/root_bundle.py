"""The device bundle: the tag's image cut down to the files its smoke checker uses, the checker,
what it checks against, and runc as Debian packages, in one xz file small enough to carry to a
machine with a GPU and no container engine (sparkbake.smoke.oci_runtime runs it there).

What the checker uses is measured, not listed: it runs once in a network-less container of the
image under images/smoke_trace.py, which records every file each of its Python processes opens,
maps or starts. The root keeps those files (and the links on their way), the image's own /opt
and /etc whole, and the folders the runtime mounts over. The traced run asks for the GPU
checks without a GPU, so the kernels' libraries are loaded (and recorded) before they skip.
"""

from __future__ import annotations

import io
import json
import posixpath
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparkbake import records, resources
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.core.folders import Folders
from sparkbake.core.smoke_record import CheckResult, parse_checks
from sparkbake.errors import EngineError, SmokeError
from sparkbake.hashing import file_sha256
from sparkbake.nodes import sample_envs
from sparkbake.oci import docker_engine, emulation
from sparkbake.planning import Plan
from sparkbake.run import Run
from sparkbake.smoke import checks
from sparkbake.smoke.device_bundle import BUNDLE_FILE, EXPECTED, PACKAGES, ROOT, Bundle, Package
from sparkbake.smoke.host import Facts

__all__ = ["RUNTIME_PACKAGES", "kept_names", "make", "resolve"]

RUNTIME_PACKAGES = ("runc", "libseccomp2")
TRACER = "/opt/sparkbake-trace/sitecustomize.py"
TRACE_PREFIX = "sparkbake-trace "
WHOLE = ("opt/", "etc/")  # the image's own files, and the small system configuration
MOUNTED = ("proc", "sys", "dev", "tmp")  # the runtime mounts these: kept empty
LIBC_LISTS = {f"var/lib/dpkg/info/libc6{arch}.list" for arch in (":amd64", ":arm64", "")}
NOT_FROM_IMAGE = (checks.CHECKER_DIR.lstrip("/"), posixpath.dirname(TRACER).lstrip("/"))


def resolve(path: str, links: dict[str, str]) -> tuple[set[str], str]:
    """Where a path ends in the image, and every symbolic link on its way there (links:
    {link name: its target}, names relative to the root)."""
    parts, done, found, hops = path.strip("/").split("/"), "", set(), 0
    while parts:
        name = posixpath.join(done, parts.pop(0)) if done else parts.pop(0)
        target = links.get(name)
        if target is None or hops > 40:
            done = name
            continue
        found.add(name)
        hops += 1
        resolved = target.lstrip("/") if target.startswith("/") else \
            posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        parts, done = [p for p in resolved.split("/") if p not in ("", ".", "..")] + parts, ""
    return found, done


def kept_names(members: Iterable[tarfile.TarInfo], used: Iterable[str]) -> set[str]:
    """The names of the image's root the cut root keeps: what the checker used (through its
    links), /opt and /etc, hard links' targets, every folder above a kept name, and every
    symbolic link that ends at a kept name (the loader opens a library by its soname's
    link, while the process's maps show the file)."""
    members = list(members)
    links = {m.name: m.linkname for m in members if m.issym()}
    hard = {m.name: m.linkname for m in members if m.islnk()}
    keep = {m.name for m in members if m.name.startswith(WHOLE) or m.name in MOUNTED}
    for path in used:
        name = path.lstrip("/")
        if name and not name.startswith(MOUNTED + NOT_FROM_IMAGE):
            on_way, end = resolve(name, links)
            keep |= on_way | {end}
    keep |= {hard[name] for name in keep if name in hard}
    ends = {name: resolve(name, links) for name in links}
    while True:
        folders = {posixpath.dirname(name) for name in keep} - {""}
        to_kept = {name for name, (on_way, end) in ends.items() if end in keep}
        more = folders | to_kept | {n for name in to_kept for n in ends[name][0]}
        if more <= keep:
            return keep & {m.name for m in members}
        keep |= more


def c_library(image: tarfile.TarFile, members: Iterable[tarfile.TarInfo]) -> set[str]:
    """The shared objects of the image's C library package (dpkg's file list of libc6): the
    driver libraries the runtime mounts link against all of them (libdl, librt, ...), while
    the checker alone loads only some."""
    for member in members:
        if member.name in LIBC_LISTS:
            source = image.extractfile(member)
            if source is not None:
                lines = source.read().decode().splitlines()
                return {line for line in lines if ".so" in line and "/gconv/" not in line}
    return set()


def trace(client: docker_engine.Client, plan: Plan, image_id: str, expected: dict[str, Any],
          log_path: Path, *, console: Console) -> tuple[set[str], tuple[CheckResult, ...]]:
    """Run the checker under the tracer in a network-less container of the image: the paths
    it used, and its checks."""
    files = {**checks.checker_files(), TRACER: resources.path("smoke_trace.py").read_bytes()}
    checker = [checks.PYTHON_IN_IMAGE, "-B", f"{checks.CHECKER_DIR}/{checks.CHECKER_FILES[0]}",
               json.dumps(expected)]
    with emulation.cpu_sysfs(client, plan.tag.platform) as volumes:
        result = docker_engine.run_container(
            client, image_id, ["-B", TRACER, "--", *checker], entrypoint=[checks.PYTHON_IN_IMAGE],
            copy_in=files, volumes=volumes, network=False, log_path=log_path, console=None)
    lines = [line for line in result.output.splitlines() if line.startswith(TRACE_PREFIX)]
    found = parse_checks(result.output)
    if not lines or found is None:
        raise SmokeError(f"the traced smoke checker in image {image_id[:19]} gave no result "
                         f"(exit {result.exit_code})", f"see {log_path}")
    return set(json.loads(lines[-1][len(TRACE_PREFIX):])), tuple(found)


def runtime_packages(folder: Path) -> list[Path]:
    """runc and the library it links, as Debian packages from this host's apt sources
    (cached in folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    remedy = "this host needs apt with a Debian release's sources (runc is in bookworm's main)"
    if not all(cached_package(folder, name) for name in RUNTIME_PACKAGES):
        try:
            done = subprocess.run(["apt-get", "download", *RUNTIME_PACKAGES], cwd=folder,
                                  capture_output=True, text=True, check=False)
        except FileNotFoundError:
            raise EngineError("apt-get is not on PATH: the device bundle carries runc as "
                              "Debian packages", remedy) from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise EngineError(f"apt-get download {' '.join(RUNTIME_PACKAGES)} failed: {last}",
                              remedy)
    found = [cached_package(folder, name) for name in RUNTIME_PACKAGES]
    missing = [name for name, path in zip(RUNTIME_PACKAGES, found, strict=True) if path is None]
    if missing:
        raise EngineError(f"apt-get download left no {', '.join(missing)} package in {folder}",
                          remedy)
    return [path for path in found if path is not None]


def cached_package(folder: Path, name: str) -> Path | None:
    return next(iter(sorted(folder.glob(f"{name}_*.deb"))), None)


def write_bundle(out: Path, image_tar: Path, keep: set[str], bundle: Bundle,
                 expected: dict[str, Any], debs: list[Path]) -> None:
    partial = out.with_name(f".{out.name}.partial")
    with tarfile.open(partial, "w:xz", preset=9) as bundle_tar:
        add_bytes(bundle_tar, BUNDLE_FILE, json.dumps(records.to_json(bundle), indent=2))
        add_bytes(bundle_tar, f"{ROOT}{EXPECTED}", json.dumps(expected, indent=2))
        for deb in debs:
            bundle_tar.add(deb, f"{PACKAGES}/{deb.name}")
        for name, data in checks.checker_files().items():
            add_bytes(bundle_tar, f"{ROOT}{name}", data.decode())
        with tarfile.open(image_tar) as image:
            for member in image:
                if member.name not in keep:
                    continue
                source = image.extractfile(member) if member.isreg() else None
                if member.islnk():
                    member.linkname = f"{ROOT}/{member.linkname}"
                member.name = f"{ROOT}/{member.name}"
                bundle_tar.addfile(member, source)
    partial.replace(out)


def add_bytes(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def make(client: docker_engine.Client, run: Run, plan: Plan, facts: Facts, out: Path) -> Bundle:
    """Write the tag's device bundle to out; return its description."""
    config, console = run.config, run.console
    image_id, attrs = checks.require_image(client, plan, settings=run.settings)
    suite = sample_envs.load(config, plan.tag)
    # on the device: the GPU checks must pass; here (traced): asked, so the kernels load
    expected = checks.expected_in_image(config, plan, facts, suite, attrs,
                                        checks.Options(gpu="require"), None)
    log_path = Folders.of(config).smoke_record(plan.tag.name).with_name(
        f"{plan.tag.name}-device-trace.log")
    with step(console, f"device bundle of {plan.tag.image_ref} ({image_id[:19]})"):
        traced = {**expected, "gpu": {"mode": "auto", "unavailable": None}}
        used, checks_here = trace(client, plan, image_id, traced, log_path, console=console)
        debs = runtime_packages(Folders.of(config).device_packages)
        with tempfile.TemporaryDirectory(prefix="sparkbake-root-") as temp:
            image_tar = Path(temp) / "root.tar"
            docker_engine.export_filesystem(client, image_id, image_tar)
            with tarfile.open(image_tar) as image:
                members = image.getmembers()
                libc = c_library(image, members)
            keep = kept_names(members, used | libc)
            files = [m for m in members if m.isfile()]
            bundle = Bundle(
                schema=1, tag=plan.tag.name, image=plan.tag.image_ref, image_id=image_id,
                inputs=plan.inputs, suite=suite.name, cuda_arch=plan.tag.cuda_arch,
                env=tuple(str(e) for e in (attrs.get("Config") or {}).get("Env") or []),
                checker=(checks.PYTHON_IN_IMAGE, "-B",
                         f"{checks.CHECKER_DIR}/{checks.CHECKER_FILES[0]}", EXPECTED),
                packages=tuple(Package(d.name.split("_")[0], d.name, file_sha256(d))
                               for d in debs),
                root_files=sum(1 for m in files if m.name in keep), image_files=len(files),
                root_bytes=sum(m.size for m in files if m.name in keep),
                image_bytes=sum(m.size for m in files), checks_here=checks_here)
            out.parent.mkdir(parents=True, exist_ok=True)
            write_bundle(out, image_tar, keep, bundle, expected, debs)
    return bundle
