"""Runs inside the sparkbake builder: build the tree's wheels, then list each kernel's SASS.

/src is the patched tree (read-only), /out receives the wheels and build-report.json.
With SPARKBAKE_SCCACHE set, an sccache server (SCCACHE_* from sparkbake) serves the
compiles and its statistics go into the report. `--relay HOST:PORT` instead forwards
RELAY_PORT to HOST:PORT: the one way out of a builder's network to a Redis cache.
Standard library only: this file is copied into the builder image.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SOURCE = Path("/src")
OUTPUT = Path("/out")
WORK = Path("/build/src")  # a fixed path, so build paths are the same on every run
SOURCES_CMAKE = Path("/build/sparkbake-sources.cmake")
CUBIN = re.compile(r"\.(sm_\d+[af]?)\.cubin")
RELAY_PORT = 6379
# debug info that is the same whether a compile farm server compiled the preprocessed source
# or this builder the file: no column info, no macro expansion locations (gcc gives the line
# table other entries where it tracks them), and the file preprocessed apart from its compile,
# as sccache does for a server (gcc 14 lists a unit's directories in another order otherwise)
DEBUG_INFO_FLAGS = "-gno-column-info -ftrack-macro-expansion=0 -no-integrated-cpp"


def main() -> int:
    if sys.argv[1:2] == ["--relay"]:
        asyncio.run(relay(sys.argv[2]))
        return 0
    shutil.rmtree(WORK, ignore_errors=True)
    shutil.copytree(SOURCE, WORK, symlinks=True)
    normalize_modes(WORK)
    write_sources_cmake(json.loads(os.environ.get("SPARKBAKE_FETCHCONTENT", "{}")))
    reproducible_debug_info()
    backend = start_sccache(os.environ.get("SPARKBAKE_SCCACHE", ""))
    cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
           "--no-index", "-w", str(OUTPUT), str(WORK)]
    print("+ " + " ".join(cmd), flush=True)
    status = subprocess.run(cmd, check=False).returncode
    cache = {"backend": backend, "stats": stop_sccache() if backend != "off" else None}
    if status != 0:
        return status
    wheels = [describe(wheel) for wheel in sorted(OUTPUT.glob("*.whl"))]
    report = {"wheels": wheels, "nvcc": nvcc_version(), "sccache": cache}
    (OUTPUT / "build-report.json").write_text(json.dumps(report, indent=2))
    return 0


def write_sources_cmake(sources: dict[str, str], path: Path = SOURCES_CMAKE) -> None:
    """The sources lock's folders (FetchContent name -> folder) as CMake cache entries, for
    every CMake the build runs: the cmake wrapper pre-loads them (-C), and a cmake run by
    another path reads them as the toolchain file the environment names, unless it is
    given its own."""
    if not sources:
        return
    lines = ['set(FETCHCONTENT_FULLY_DISCONNECTED ON CACHE BOOL '
             '"sparkbake: third-party sources come from the sources lock")']
    lines += [f'set(FETCHCONTENT_SOURCE_DIR_{name.upper()} "{folder}" CACHE PATH '
              f'"sparkbake: {name} from the sources lock")'
              for name, folder in sorted(sources.items())]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    print(f"sources lock for CMake, {path}:\n{text}", end="", flush=True)
    os.environ["SPARKBAKE_SOURCES_CMAKE"] = str(path)
    os.environ.setdefault("CMAKE_TOOLCHAIN_FILE", str(path))


def reproducible_debug_info() -> None:
    """DEBUG_INFO_FLAGS in every C and C++ compile of the build (CMake reads CFLAGS and
    CXXFLAGS when it first configures a tree, setuptools reads CFLAGS): a compile farm
    server compiles the preprocessed source, and a remote object must be a local one's
    bytes, farm or not. nvcc's host compiles get them from the nvcc wrapper."""
    for name in ("CFLAGS", "CXXFLAGS"):
        os.environ[name] = " ".join(filter(None, [os.environ.get(name), DEBUG_INFO_FLAGS]))


def start_sccache(backend: str) -> str:
    """Start the sccache server of the build; returns the backend it serves from. Redis that
    fails falls back to the local folder, a server that fails to nvcc alone. Without sccache
    nvcc gets -objtemp (intermediates named after the object, not its pid); sccache names
    them so itself and reads -objtemp in NVCC_APPEND_FLAGS as `-o bjtemp`."""
    attempts = [backend] if backend != "redis" else ["redis", "local"]
    for attempt in filter(None, attempts):
        if attempt == "local":
            os.environ.pop("SCCACHE_REDIS_ENDPOINT", None)
        print(f"+ sccache --start-server  ({attempt})", flush=True)
        started = subprocess.run(["sccache", "--start-server"], check=False,
                                 capture_output=True, text=True)
        if started.returncode == 0:
            return attempt if attempt == backend else f"{attempt} (fallback: {backend} failed)"
        print(f"warning: sccache ({attempt}) did not start: {started.stderr.strip()}",
              flush=True)
    os.environ.update({"VLLM_DISABLE_SCCACHE": "1", "NVCC_APPEND_FLAGS": "-objtemp"})
    return "off" if not backend else f"off (fallback: {backend} failed)"


def stop_sccache() -> object:
    """sccache's statistics of this build, as its JSON; the server stopped."""
    shown = subprocess.run(["sccache", "--show-stats", "--stats-format=json"],
                           capture_output=True, text=True, check=False)
    subprocess.run(["sccache", "--stop-server"], capture_output=True, check=False)
    try:
        stats: object = json.loads(shown.stdout)
    except ValueError:
        return None
    if isinstance(stats, dict):
        stats.pop("cache_location", None)  # may carry the Redis password
    print(f"sccache statistics: {json.dumps(stats)}", flush=True)
    return stats


async def relay(target: str) -> None:
    """Forward every connection on RELAY_PORT to target (host:port)."""
    host, port = target.rsplit(":", 1)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host.strip("[]"),
                                                                             int(port))
        except OSError as exc:
            print(f"relay: cannot reach {target}: {exc}", flush=True)
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(handle, "0.0.0.0", RELAY_PORT)
    print(f"relay: :{RELAY_PORT} -> {target}", flush=True)
    async with server:
        await server.serve_forever()


def normalize_modes(root: Path) -> None:
    """Modes as git records them (0644, or 0755 when executable): the host's umask, which
    made the tree, must not reach the wheels (zip entries carry file modes)."""
    for path in root.rglob("*"):
        if not path.is_symlink():
            executable = path.is_dir() or path.stat().st_mode & 0o111
            path.chmod(0o755 if executable else 0o644)


def describe(wheel: Path) -> dict[str, object]:
    """The wheel's shared libraries that carry device code, each with its SASS arches; for a
    CPU build (SPARKBAKE_DEVICE=cpu) every shared library, with none: they are its kernels."""
    cpu = os.environ.get("SPARKBAKE_DEVICE") == "cpu"
    kernels = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as scratch:
        for member in archive.namelist():
            if not re.search(r"\.so(\.\d+)*$", member):
                continue
            sass = [] if cpu else list_sass(Path(archive.extract(member, scratch)))
            if sass is not None:
                digest = hashlib.sha256(archive.read(member)).hexdigest()
                kernels.append({"path": member, "sha256": digest, "sass": sass})
    return {"file": wheel.name, "kernels": kernels}


def list_sass(library: Path) -> list[str] | None:
    """SASS arches in library per cuobjdump; None when it holds no device code."""
    listing = subprocess.run(["cuobjdump", "--list-elf", str(library)],
                             capture_output=True, text=True, check=False)
    if listing.returncode != 0:
        if "does not contain device code" in listing.stderr + listing.stdout:
            return None
        print(f"cuobjdump failed on {library.name}: {listing.stderr.strip()}", flush=True)
        sys.exit(3)
    return sorted(set(CUBIN.findall(listing.stdout)))


def nvcc_version() -> str:
    found = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=False)
    return found.stdout.strip().splitlines()[-1] if found.returncode == 0 else "none"


if __name__ == "__main__":
    sys.exit(main())
