#!/opt/builder/bin/python3 -I
"""`nvcc` in the sparkbake builder: the real nvcc, with one-step builds made reproducible.

nvcc names its intermediate files `tmpxft_<pid>_...`, and that name lands in the library
(the static initializer's symbol). `-objtemp` renames them after the object file, but only
for `-c` compiles; `nvcc -shared -o lib.so x.cu` (compile and link in one step) keeps the pid.
Here such a step gets `-keep -keep-dir <fresh folder>`: nvcc then names the intermediates
after the sources and the output, and the folder is removed afterwards. Everything else
(`-c`, `-E`, `--dryrun`, ... as sccache calls it) goes to nvcc unchanged: sccache caches `-c`
compiles itself and fails on `-keep`.

With `-g`, a host compile run on a compile farm server compiles the preprocessed source,
whose debug column info and line table (macro expansion locations, gcc 14's directory order)
are not the file's; every nvcc run gives its host compiler `-gno-column-info
-ftrack-macro-expansion=0 -no-integrated-cpp`, farm or not, so a remote object is a local
one's bytes.

sccache runs nvcc's steps in a folder of a random name (`sccache_nvccXXXXXX`), which it passes
as `--keep-dir` to an `nvcc --dryrun` to learn the host compiler's steps; the host compile then
names that folder in its debug info. Here that `--dryrun` gets, in its place, a link of a name
fixed by the working folder and the output (`nvcc-<hash>`, beside it) that points at it: the
steps read and write the same files, and the objects name the fixed folder. The name is no
longer than sccache's: gcc takes a folder's real path where that is shorter, and would name
the random folder again for the files the host compile includes. (Mapping the folder by a
compiler argument instead would put the random name in sccache's key for the host step, which
would then never hit again.) Standard library only: copied into the builder image.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# options after which nvcc does not link, or that name intermediates or options elsewhere
NO_LINK = frozenset({
    "-c", "--compile", "-dc", "--device-c", "-dw", "--device-w", "-dlink", "--device-link",
    "-E", "--preprocess", "-M", "--generate-dependencies", "-MM",
    "--generate-nonsystem-dependencies", "-ptx", "--ptx", "-cubin", "--cubin", "-fatbin",
    "--fatbin", "-cuda", "--cuda", "-optix-ir", "--optix-ir", "-dryrun", "--dryrun",
    "-keep", "--keep", "-keep-dir", "--keep-dir", "-save-temps", "--save-temps",
    "-optf", "--options-file", "-V", "--version", "-h", "--help",
})
SOURCES = (".cu", ".c", ".cc", ".cpp", ".cxx", ".c++", ".C")
INFO = frozenset({"-V", "--version", "-h", "--help"})  # runs that compile nothing
# the host compiler's debug info as build_wheels.py gives every C and C++ compile
HOST_DEBUG_INFO = "-Xcompiler=-gno-column-info,-ftrack-macro-expansion=0,-no-integrated-cpp"
STEP_FOLDER = "sccache_nvcc"  # the prefix of sccache's step folders (src/compiler/nvcc.rs)
FIXED_FOLDER = "nvcc-"


def main(args: list[str]) -> int:
    real = real_nvcc()
    args = fixed_step_folder(reproducible_debug_info(args), Path.cwd())
    sources = one_step_sources(args)
    if sources and len({Path(s).stem for s in sources}) < len(sources):
        print(f"sparkbake nvcc: sources of one name ({' '.join(sources)}) in one step: its "
              "intermediates carry the process id, the library may differ between builds",
              file=sys.stderr, flush=True)
        sources = []
    if not sources:
        os.execv(real, [real, *args])
    with tempfile.TemporaryDirectory(prefix="sparkbake-nvcc.") as keep:
        status = subprocess.run([real, "-keep", "-keep-dir", keep, *args], check=False)
    return status.returncode if status.returncode >= 0 else 128 - status.returncode


def reproducible_debug_info(args: list[str]) -> list[str]:
    """The arguments with the host compiler's debug info made the same on every machine: no
    column info or macro expansion locations, the source preprocessed apart."""
    if not args or any(arg in INFO for arg in args):
        return args
    return [*args, HOST_DEBUG_INFO]


def fixed_step_folder(args: list[str], cwd: Path) -> list[str]:
    """The arguments of sccache's `--dryrun` with its step folder replaced by a link of a fixed
    name that points at it; any other arguments as they are."""
    if "--dryrun" not in args and "-dryrun" not in args:
        return args
    for index, arg in enumerate(args[:-1]):
        step = Path(args[index + 1])
        if arg in ("--keep-dir", "-keep-dir") and step.name.startswith(STEP_FOLDER):
            break
    else:
        return args
    output = args[args.index("-o") + 1] if "-o" in args[:-1] else ""
    digest = base64.b32encode(hashlib.sha256(f"{cwd}\0{output}".encode()).digest())
    length = len(step.name) - len(FIXED_FOLDER)  # 13 characters, 65 bits, for sccache's 18
    link = step.parent / f"{FIXED_FOLDER}{digest.decode().lower()[:length]}"
    staged = step.parent / f".{link.name}.{os.getpid()}"
    try:
        remove_dangling_links(step.parent)
        staged.symlink_to(step)
        os.replace(staged, link)
    except OSError:
        staged.unlink(missing_ok=True)
        return args  # a folder in the way: the random name, as without this wrapper
    return [*args[:index + 1], str(link), *args[index + 2:]]


def remove_dangling_links(folder: Path) -> None:
    """Remove the fixed-name links whose step folder sccache has removed (compiles done)."""
    for entry in folder.glob(f"{FIXED_FOLDER}*"):  # only links: another's files stay
        if entry.is_symlink() and not entry.exists():
            entry.unlink(missing_ok=True)


def one_step_sources(args: list[str]) -> list[str]:
    """The sources of a step that compiles and links; none for any other step."""
    if any(arg.split("=", 1)[0] in NO_LINK for arg in args):
        return []
    return [arg for arg in args if not arg.startswith("-") and arg.endswith(SOURCES)]


def real_nvcc() -> str:
    """The first nvcc on PATH after this one."""
    here = Path(__file__).resolve().parent
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "nvcc"
        if candidate.resolve().parent != here and os.access(candidate, os.X_OK) \
                and candidate.is_file():
            return str(candidate)
    sys.exit("sparkbake nvcc: no nvcc on PATH after " + str(here))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
