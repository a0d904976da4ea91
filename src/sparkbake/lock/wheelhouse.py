"""The runtime wheelhouse: every wheel of a runtime lock, downloaded once with its hash
checked, so that the bake installs offline (wheels/runtime/<lock hash>/). Before it is reused,
each wheel is checked again against the lock's hashes (`trust`: by its stamp while it is as
it was checked); a wheelhouse with a damaged wheel is removed, with a warning, and
downloaded again. A new lock's wheelhouse takes the wheels it shares with the others by
content (their sha256, a hash the new lock allows) as hard links, and downloads the rest:
moving one package of a lock downloads that package, not the whole lock again."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

from sparkbake import trust
from sparkbake.config.platforms import Platform
from sparkbake.config.versions import Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import run, step
from sparkbake.core.folders import Folders
from sparkbake.errors import BakeError
from sparkbake.files import atomic_dir, atomic_write
from sparkbake.hashing import file_sha256
from sparkbake.lock import pins

__all__ = ["ensure", "platform_tags"]

DONE = ".sparkbake-complete"  # its lock's path, then the image's Python and platform
STAMPS = ".verified"
STILL_WANTED = ".requirements.txt"  # while pip runs: the lock but the projects taken whole
HASHES = ".sha256.json"  # {wheel: [its sha256, its stamp then]}: what other locks may take
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
MANYLINUX_MAX = 39  # glibc 2.39 (Ubuntu 24.04); the lock's hashes decide the file anyway


def platform_tags(platform: Platform) -> list[str]:
    """The wheel platform tags pip may take for a Linux platform, newest first."""
    arch = platform.machine
    return [*(f"manylinux_2_{minor}_{arch}" for minor in range(MANYLINUX_MAX, 16, -1)),
            f"manylinux2014_{arch}", f"linux_{arch}"]


def _allowed(lock: Path) -> frozenset[str]:
    return frozenset(HASH.findall(lock.read_text()))


def _intact(folder: Path, lock: Path, *, console: Console) -> bool:
    """Is every wheel of the wheelhouse one the lock allows? A damaged one takes the whole
    wheelhouse with it (removed, with a warning)."""
    allowed = _allowed(lock)
    bad = [wheel.name for wheel in sorted(folder.glob("*.whl"))
           if not trust.verified(wheel, allowed, folder / STAMPS / wheel.name)]
    if bad:
        console.notice(trust.removed(folder, f"{', '.join(bad)}: no hash of {lock.name}"))
        shutil.rmtree(folder)
    return not bad


def ensure(lock: Path, tag: Tag, layout: Folders, *, console: Console) -> Path:
    """wheels/runtime/<lock hash>: the lock's wheels for the tag's runtime Python and platform."""
    folder = layout.runtime_wheelhouses / file_sha256(lock)[:16]
    python = tag.runtime.python or ""
    target = f"python {python} {tag.platform}"
    if (folder / DONE).is_file() and _intact(folder, lock, console=console):
        console.detail(f"wheelhouse: {lock.name} cached at wheels/runtime/{folder.name}")
        if _made_for(folder) is None:
            # made before targets were written down; a lock is one base's and one platform's,
            # so this wheelhouse was made for this target (a file replaced, not a link written)
            with contextlib.suppress(OSError):
                atomic_write(folder / DONE, f"{lock}\n{target}\n")
        return folder
    flags = [f"--platform={p}" for p in platform_tags(tag.platform)]
    with step(console, f"wheelhouse for {lock.name}"), atomic_dir(folder) as tmp:
        taken = _take_known(layout.runtime_wheelhouses, _allowed(lock), tmp, target,
                            console=console)
        wanted = lock
        if taken:
            console.detail(f"wheelhouse: {len(taken)} wheel(s) of {lock.name} taken from other "
                 "wheelhouses")
            wanted = tmp / STILL_WANTED
            wanted.write_text(_still_wanted(lock, taken))
        # pip download: the host's pip configuration (index, CA, proxies) applies as is
        run(console, [sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes",
             "--no-deps", "--only-binary=:all:", f"--python-version={python}",
             "--implementation=cp", *flags, "--dest", tmp, "-r", wanted], error=BakeError,
            what=f"downloading the wheels of {lock} (a hash mismatch means a download differs "
                 "from the lock)")
        (tmp / STILL_WANTED).unlink(missing_ok=True)
        (tmp / DONE).write_text(f"{lock}\n{target}\n")
    return folder


def _take_known(houses: Path, allowed: frozenset[str], dest: Path, target: str, *,
                console: Console) -> set[str]:
    """Hard-link into dest each wheel whose sha256 is one allowed lists, of the complete
    wheelhouses made for the same target (Python and platform: pip chose those wheels as it
    would choose now, so the wheelhouse is the one a clean download makes), and say it is
    checked; their names. One that cannot be linked is left to pip to download."""
    taken: set[str] = set()
    for other in sorted(folder for folder in houses.iterdir() if _made_for(folder) == target):
        for name, sha256 in _hashes(other, console=console).items():
            if sha256 in allowed and name not in taken:
                with contextlib.suppress(OSError):
                    os.link(other / name, dest / name)
                    trust.remember(dest / name, dest / STAMPS / name)
                    taken.add(name)
    return taken


def _made_for(folder: Path) -> str | None:
    """The target a complete wheelhouse was made for; None for one without it (made before
    it was written down: it is not taken from)."""
    try:
        lines = (folder / DONE).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return lines[1] if len(lines) > 1 else None


def _still_wanted(lock: Path, taken: set[str]) -> str:
    """The lock's requirements, continued lines joined, but those of a project that has one
    line in it and a wheel taken of the version it pins: what pip must still download."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version

    have = set()
    for name in taken:
        project, version, _, _ = parse_wheel_filename(name)
        have.add((str(project), str(version)))
    lines = pins.lines_of(lock)
    pinned: dict[str, list[tuple[str, str]]] = {}
    for line, wanted in lines:
        if wanted is not None:
            requirement = Requirement(wanted)
            pin = next((str(Version(s.version)) for s in requirement.specifier
                        if s.operator == "=="), "")
            pinned.setdefault(str(canonicalize_name(requirement.name)), []).append((line, pin))
    covered = {line for project, found in pinned.items() if len(found) == 1
               for line, pin in found if (project, pin) in have}
    return "".join(f"{line}\n" for line, _ in lines if line not in covered)


def _hashes(folder: Path, *, console: Console) -> dict[str, str]:
    """Each wheel's sha256 in folder: from its record while the wheel has the stamp it had
    when it was hashed, else hashed now (and the record written again, where it can be)."""
    kept = trust.record_or_drop(folder / HASHES, what="a wheelhouse's hashes",
                                console=console) or {}
    found: dict[str, str] = {}
    record: dict[str, list[str]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        stamp = trust.Stamp.of(wheel).text().strip()
        match kept.get(wheel.name):
            case [str(sha256), str(then)] if then == stamp:
                found[wheel.name] = sha256
            case _:
                found[wheel.name] = file_sha256(wheel)
        record[wheel.name] = [found[wheel.name], stamp]
    if record != kept:
        with contextlib.suppress(OSError):
            atomic_write(folder / HASHES, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return found
