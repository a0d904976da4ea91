"""Which files of an image the smoke checker uses, so a root file system cut down to them runs
the same checks where no engine exists (the device smoke). Standard library only; copied into
a container of the image, never baked.

As a script: smoke_trace.py -- COMMAND... runs COMMAND with this file's folder on PYTHONPATH,
so every Python process it starts imports this file as sitecustomize and records what it
used. COMMAND's output passes through; then one line, TRACE_PREFIX and a JSON list of the
paths, ends the output. Exit status: COMMAND's.

As sitecustomize: records the paths the process opens (the audit hook's "open" event), the
programs it starts, its modules' files and, at exit, the files mapped into it (/proc/self/maps:
the interpreter, the C library, every library loaded with dlopen), appended as one JSON line
to $SPARKBAKE_TRACE_LOG.
"""

from __future__ import annotations

import atexit
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

TRACE_PREFIX = "sparkbake-trace "
LOG_VARIABLE = "SPARKBAKE_TRACE_LOG"
STARTS = {"subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn"}


def absolute(path: object) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path:
        return None
    return path if path.startswith("/") else os.path.join(os.getcwd(), path)


def record_event(seen: set[str], event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and args:
        found = absolute(args[0])
    elif event in STARTS and args:
        program = args[0] if args[0] is not None else (args[1] or [None])[0]
        found = absolute(program) if "/" in str(program) else None
    else:
        return
    if found is not None:
        seen.add(found)


def mapped_files() -> set[str]:
    """The files mapped into this process: its executable and shared libraries."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return set()
    return {fields[5] for line in lines if len(fields := line.split()) >= 6
            and fields[5].startswith("/")}


def interpreter(executable: str) -> str | None:
    """The program loader a 64-bit little-endian ELF executable names (its PT_INTERP):
    the kernel opens it by that name, which no map shows."""
    try:
        with open(executable, "rb") as program:
            data = program.read(65536)
    except OSError:
        return None
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        return None
    table, size, count = (struct.unpack_from("<Q", data, 0x20)[0],
                          *struct.unpack_from("<HH", data, 0x36))
    for entry in range(table, table + size * count, size):
        kind, = struct.unpack_from("<I", data, entry)
        if kind == 3:  # PT_INTERP
            offset, length = struct.unpack_from("<Q", data, entry + 8)[0], \
                struct.unpack_from("<Q", data, entry + 32)[0]
            return data[offset:offset + length].rstrip(b"\0").decode()
    return None


def module_files() -> set[str]:
    return {str(Path(f).absolute()) for module in list(sys.modules.values())
            if isinstance(f := getattr(module, "__file__", None), str)}


def install(log: str) -> None:
    seen: set[str] = {sys.executable}
    sys.addaudithook(lambda event, args: record_event(seen, event, args))

    def write() -> None:
        loader = interpreter(os.path.realpath(sys.executable))
        used = sorted(seen | mapped_files() | module_files() | ({loader} if loader else set()))
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps(used) + "\n")

    atexit.register(write)


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        print("usage: smoke_trace.py -- COMMAND...", file=sys.stderr)
        return 2
    log = Path("/tmp/sparkbake-trace.jsonl")
    log.unlink(missing_ok=True)
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(argv[1:], env={**os.environ, "PYTHONPATH": path, LOG_VARIABLE: str(log)},
                          check=False)
    used: set[str] = set()
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            used.update(json.loads(line))
    sys.stdout.flush()
    print(TRACE_PREFIX + json.dumps(sorted(used)), flush=True)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
elif os.environ.get(LOG_VARIABLE):
    install(os.environ[LOG_VARIABLE])
