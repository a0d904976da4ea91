"""lock: the builder's Python packages resolved with hashes, per base Python and platform.

The lock is committed; the builder installs from it with `pip --require-hashes`, so a
download whose hash differs is refused. Its input is images/builder-requirements.txt (the
CUDA toolchain from PyPI), or, for an upstream that declares `build_requirements` (vLLM:
torch and its build backend), that file of the patched tree with
images/builder-requirements-torch.txt: a toolchain of the CUDA release torch is built with
(an upstream built for the CPU too: the CUDA build of torch, the one on the package index,
asks CMake's find_package(Torch) for CUDA's compiler and headers). An upstream's
`overrides` replace what its files ask for a package, in both of its locks.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from sparkbake import resources
from sparkbake.config.platforms import PLATFORMS
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import run
from sparkbake.errors import ConfigError, EngineError
from sparkbake.files import atomic_write
from sparkbake.hashing import data_hash, file_sha256

__all__ = ["compile_requirements", "lines_of", "lock_path", "make_missing", "packages",
           "require_lock", "require_made", "require_runtime_lock", "resolve",
           "runtime_lock_path"]

TOOLCHAIN = "builder-requirements.txt"
TORCH_TOOLCHAIN = "builder-requirements-torch.txt"
HASH_OPTION = re.compile(r"--hash=(\S+)")


def lock_path(config: Config, tag: Tag) -> Path:
    """locks/<builder base>.<arch>.txt; locks/<builder base>.<upstream>.<arch>.txt when the
    upstream brings its own build requirements. One base serves tags of several platforms."""
    suffix = f".{tag.upstream.key}" if tag.upstream.build_requirements else ""
    return config.root / "locks" / f"{tag.builder.name}{suffix}.{tag.platform.architecture}.txt"


def inputs(tag: Tag, tree: Path | None) -> list[Path]:
    """The requirement files the lock is resolved from."""
    wanted = tag.upstream.build_requirements
    if wanted is None:
        return [resources.path(TOOLCHAIN)]
    if tree is None:
        raise ValueError("the tree is needed for an upstream's build requirements")
    if not (tree / wanted).is_file():
        raise ConfigError(f"upstream {tag.upstream.key!r}: build_requirements {wanted} is not "
                          "in its tree", "fix build_requirements in versions.yaml")
    return [resources.path(TORCH_TOOLCHAIN), tree / wanted]


def _stamp(tag: Tag, tree: Path | None) -> str:
    """What the lock was made from, written into it: its input files' sha256 (and the
    upstream's overrides)."""
    return " ".join(f"{p.name}={file_sha256(p)[:16]}" for p in inputs(tag, tree)) \
        + _overrides_stamp(tag)


def _overrides_stamp(tag: Tag) -> str:
    overrides = tag.upstream.overrides
    return f" overrides={data_hash(list(overrides))[:16]}" if overrides else ""


def require_made(path: Path, lock: Sequence[str], settings: Settings, missing: str,
                 origin: Callable[[], str | None], other: str) -> Path:
    """path, a lock that `sparkbake lock LOCK...` makes: ConfigError, with that command as
    the remedy, when it is missing (`no MISSING (path)`) or when its first lines lack the
    line origin() says it was made from (`path was made from OTHER`); origin() None: any."""
    remedy = f"{settings.command('lock', *lock)}, and commit it"
    if not path.is_file():
        raise ConfigError(f"no {missing} ({path})", f"create it: {remedy}")
    wanted = origin()
    if wanted is not None and wanted not in path.read_text().splitlines()[:3]:
        raise ConfigError(f"{path} was made from {other}", f"remake it: {remedy}")
    return path


def require_lock(config: Config, tag: Tag, tree: Path | None = None, *, settings: Settings) -> Path:
    wanted = tag.upstream.build_requirements
    return require_made(
        lock_path(config, tag), [tag.name], settings,
        f"builder lock for base {tag.builder.name!r}",
        lambda: f"# from: {_stamp(tag, tree)}" if wanted else None,
        f"other build requirements than {wanted} of this tree")


def runtime_lock_path(config: Config, tag: Tag) -> Path | None:
    """locks/runtime/<runtime base>.<upstream>.<arch>.txt, for an upstream with runtime
    requirements."""
    if tag.upstream.runtime_requirements is None:
        return None
    name = f"{tag.runtime.name}.{tag.upstream.key}.{tag.platform.architecture}.txt"
    return config.root / "locks" / "runtime" / name


def lines_of(lock: Path) -> list[tuple[str, str | None]]:
    """A lock's lines, each continued line joined, with the requirement each states (None
    for a comment, a blank or an option line)."""
    lines: list[tuple[str, str | None]] = []
    for line in lock.read_text().replace("\\\n", " ").splitlines():
        wanted = line.split("--hash=", 1)[0].split(" #", 1)[0].strip()  # a comment after it
        lines.append((line, wanted if wanted and not wanted.startswith(("#", "-")) else None))
    return lines


def packages(lock: Path) -> dict[str, str]:
    """A lock's packages by canonical name, each as one line: its requirement
    (`name==version`) and its hashes, sorted."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    for line, wanted in lines_of(lock):
        if wanted is None:
            continue
        try:
            name = str(canonicalize_name(Requirement(wanted).name))
        except InvalidRequirement as exc:
            raise ConfigError(f"{lock}: {wanted!r} is not a requirement ({exc})",
                              "make the lock again with `sparkbake lock`") from None
        # a package on two lines (by marker) is one entry with both
        entry = " ".join([wanted, *sorted(HASH_OPTION.findall(line))])
        found[name] = f"{found[name]}; {entry}" if name in found else entry
    return found


def require_runtime_lock(config: Config, tag: Tag, tree: Path, *,
                         settings: Settings) -> Path | None:
    """The runtime lock the bake installs from, if the upstream has runtime requirements."""
    path = runtime_lock_path(config, tag)
    wanted = tag.upstream.runtime_requirements
    if path is None or wanted is None:
        return None
    return require_made(
        path, [tag.name], settings, f"runtime lock for base {tag.runtime.name!r}",
        lambda: _runtime_origin(tag, tree, wanted)[0],
        f"another {wanted} than this tree's, or for other extras or pins than tag {tag.name}'s")


def _runtime_origin(tag: Tag, tree: Path, wanted: str) -> tuple[str, str]:
    """The runtime lock's `# from:` line (the upstream's requirement file, and the tag's
    extras and pins where it has them), and the extras' and pins' requirement text."""
    from sparkbake.lock import requirements

    digest = _sha(tree / wanted)  # first: a missing file is named as such
    added = requirements.input_text(tag, tree, wanted, tag.platform.machine)
    return (f"# from: {wanted}={digest}{requirements.stamp(tag, added)}"
            f"{_overrides_stamp(tag)}", added)


def _sha(path: Path) -> str:
    if not path.is_file():
        raise ConfigError(f"{path.name} is not in the upstream's tree ({path})",
                          "fix build_requirements / runtime_requirements in versions.yaml")
    return file_sha256(path)[:16]


def make_missing(config: Config, tag: Tag, settings: Settings, tree: Path, *,
                 console: Console) -> list[Path]:
    """On a developer's machine, the tag's locks that do not exist yet, made with a notice
    (an existing lock is left as it is: a stale one stays an error of require_*)."""
    wanted = [path for path in (None if tag.kernels else lock_path(config, tag),
                                runtime_lock_path(config, tag))
              if path is not None and not path.is_file()]
    if not wanted or settings.locked:  # CI and --locked never make a lock
        return []
    names = ", ".join(str(p.relative_to(config.root)) for p in wanted)
    console.notice(f"lock: {names} missing: making it now; commit it (CI and --locked refuse a "
                   "missing lock)")
    return resolve(config, tag, settings, tree, missing_only=True, console=console)


def resolve(config: Config, tag: Tag, settings: Settings,
            tree: Path | None = None, missing_only: bool = False, *,
            console: Console) -> list[Path]:
    """Resolve the builder requirements for the tag's builder base (but for a kernel seed),
    and the upstream's runtime requirements for its runtime base where it declares them;
    write the locks (missing_only: those that do not exist) and return them."""
    written = []
    target = lock_path(config, tag)
    if tag.kernels is None and not (missing_only and target.is_file()):
        origin = f"# from: {_stamp(tag, tree)}\n" if tag.upstream.build_requirements else ""
        _compile(tag, tag.builder.name, tag.builder.python, inputs(tag, tree), target,
                 settings, f"# builder lock of base {tag.builder.name} (python "
                 f"{tag.builder.python}, {tag.platform}).\n{origin}# Made by `sparkbake lock "
                 f"TAG` from images/{TOOLCHAIN} (or images/{TORCH_TOOLCHAIN} and the "
                 "upstream's build requirements); edit those and rerun.\n",
                 console=console)
        written.append(target)
    runtime = runtime_lock_path(config, tag)
    wanted = tag.upstream.runtime_requirements
    if missing_only and runtime is not None and runtime.is_file():
        runtime = None
    if runtime is not None and wanted is not None and tree is not None:
        origin, added = _runtime_origin(tag, tree, wanted)
        with tempfile.TemporaryDirectory() as scratch:
            asked = Path(scratch) / "asked.txt"  # the extras' requirements and the pins
            asked.write_text(added)
            _compile(tag, tag.runtime.name, tag.runtime.python,
                     [tree / wanted, *([asked] if added else [])], runtime, settings,
                     f"# runtime lock of base {tag.runtime.name} (python {tag.runtime.python}, "
                     f"{tag.platform}) for upstream {tag.upstream.key}.\n{origin}\n"
                     "# Made by `sparkbake lock TAG` from the upstream's runtime requirements, "
                     "the tag's extras and pins; the bake installs from these wheels only.\n"
                     + "".join(f"# asked: {line}\n" for line in added.splitlines()),
                     console=console)
        written.append(runtime)
    return written


def _compile(tag: Tag, base: str, python: str | None, sources: list[Path], target: Path,
             settings: Settings, header: str, *, console: Console) -> None:
    """uv pip compile sources for python on the tag's platform, with hashes, into target."""
    if python is None:
        raise ConfigError(f"base {base!r} does not say its Python version",
                          'add python: "3.12" (its python3 version) to the base in versions.yaml')
    if tag.platform not in PLATFORMS:
        raise ConfigError(f"tag {tag.name}: no lock platform for {tag.platform}",
                          f"use one of {', '.join(map(str, PLATFORMS))}")
    overrides = tag.upstream.overrides
    header += "".join(f"# override: {line}\n" for line in overrides)
    compile_requirements(sources, python, tag.platform.machine, target, header, settings,
                         overrides=overrides, console=console)


def _uv() -> str:
    """uv from the `uv` package beside sparkbake (an unactivated venv or pipx has it off PATH),
    else from PATH."""
    try:
        import uv as uv_package

        return str(uv_package.find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
    if found is None:
        raise EngineError("uv is not installed", "pip install uv")
    return found


def compile_requirements(sources: list[Path], python: str, machine: str, target: Path,
                         header: str, settings: Settings,
                         indexes: Sequence[str] = (), overrides: Sequence[str] = (), *,
                         console: Console) -> None:
    """uv pip compile sources for python on Linux/machine, with hashes, into target (header
    first); indexes: more uv index options than the configured index; overrides:
    requirements that replace every other requirement of their package."""
    uv = _uv()
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "lock.txt"
        override_options: list[str | Path] = []
        if overrides:
            override_file = Path(scratch) / "overrides.txt"
            override_file.write_text("".join(f"{line}\n" for line in overrides))
            override_options = ["--override", override_file]
        run(console, [uv, "pip", "compile", *sources, *override_options,
             "--generate-hashes", "--no-header", "--no-annotate", "--no-python-downloads",
             "--python-version", python, "--python-platform", f"{machine}-unknown-linux-gnu",
             "--index-url", settings.index_url, *indexes, "-o", output],
            error=EngineError, what=f"resolving the lock {target.name}", capture=True,
            env={"SSL_CERT_FILE": settings.ca_bundle} if settings.ca_bundle else None)
        atomic_write(target, header + output.read_text())
    console.detail(f"lock: {target}")
