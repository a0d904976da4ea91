"""The plan: every stage's input hash and whether it is cached, computed without building.

Keys chain: each stage's key hashes its own inputs and the key of the stage before it, so a
change anywhere invalidates exactly the stages after it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkbake import resources
from sparkbake.config.versions import (
    Base,
    Config,
    DebootstrapBase,
    DirUpstream,
    GitUpstream,
    Tag,
    Upstream,
)
from sparkbake.core.stages import PlanState, Stage
from sparkbake.errors import ConfigError
from sparkbake.fetch import remote_patches, sourcelock, upstream_tree
from sparkbake.fetch.remote_patches import RemotePatch
from sparkbake.hashing import data_hash, file_sha256, tree_hash
from sparkbake.lock import pins
from sparkbake.oci import image_layout
from sparkbake.wheelfile import contents, stamping

__all__ = [
    "Plan",
    "SeriesInfo",
    "StagePlan",
    "base_identity",
    "changed_inputs",
    "locked_sources",
    "make",
    "read_series",
    "render_json",
    "render_text",
    "series_folder",
    "touched_paths",
    "touches_kernels",
    "upstream_pin",
]


# What the bake reads besides the wheels (runtime.json names the files it copies in)
BAKE_RESOURCES = ("runtime.json", "make_venv.sh", "runtime-python.Dockerfile.j2")

# What the compiled extensions of a tree depend on (vLLM's layout; the fixture's is a subset).
KERNEL_INPUTS = ("csrc/*", "CMakeLists.txt", "cmake/*", "setup.py", "pyproject.toml",
                 "requirements/cuda*.txt", "requirements/cpu*.txt", "requirements/build*.txt")


@dataclass(frozen=True)
class SeriesInfo:
    """One patch series as found on disk: ordered patch files with their sha256."""

    name: str
    folder: Path
    patches: tuple[tuple[str, str], ...]  # (file name, or URL of a remote patch; sha256)
    remote: tuple[RemotePatch, ...] = ()  # the remote entries, in series order

    @property
    def sha256(self) -> str:
        return data_hash([self.name, list(self.patches)])

    def path(self, name: str) -> Path:
        """The patch file of an entry: in the series folder, or a remote patch's cached copy."""
        found = [r.path for r in self.remote if r.url == name]
        return found[0] if found else self.folder / name

    def record(self, name: str, sha256: str) -> dict[str, str]:
        """How reports and the image manifest list an entry: its file, or its URL."""
        return {"url" if remote_patches.is_remote(name) else "file": name, "sha256": sha256}


@dataclass(frozen=True)
class StagePlan:
    name: Stage
    key: str
    state: PlanState
    detail: str = ""


@dataclass(frozen=True)
class Plan:
    tag: Tag
    series: tuple[SeriesInfo, ...]
    problems: tuple[str, ...]
    fetch_key: str
    patch_key: str
    kernel_key: str  # the compiled inputs only: unchanged when a patch touches only Python
    wheels_key: str
    inputs: str  # the bake key: the hash of everything that goes into the image
    # what each stage's key covers, by name, to say what changed since the last build
    stage_inputs: dict[Stage, dict[str, Any]] = field(default_factory=dict, compare=False,
                                                    hash=False)
    # the local version part the wheels carry (stamping): "" for a tag without patches
    local_version: str = ""
    remedies: tuple[str, ...] = ()  # what to do about each of problems, in its order
    # the patches that may change compiled inputs (`series/name@sha256[:12]`), in order
    kernel_patches: tuple[str, ...] = ()

    def key(self, stage: Stage) -> str:
        return {Stage.FETCH: self.fetch_key, Stage.PATCH: self.patch_key,
                Stage.KERNELS: self.kernel_key, Stage.WHEELS: self.wheels_key,
                Stage.BAKE: self.inputs}[stage]

    @property
    def remote(self) -> tuple[RemotePatch, ...]:
        """The remote patches of every series, in series order."""
        return tuple(patch for series in self.series for patch in series.remote)

    def series_label(self) -> str:
        return ",".join(f"{s.name}@sha256:{s.sha256}" for s in self.series)

    def require_series(self) -> None:
        if self.problems:
            raise ConfigError(self.problems[0], self.remedies[0])


def upstream_pin(upstream: Upstream) -> dict[str, str]:
    """What identifies an upstream tree; a local dir is identified by its content."""
    date = upstream.source_date_epoch
    declared = {} if date is None else {"source_date_epoch": str(date)}
    if isinstance(upstream, DirUpstream):
        if not upstream.path.is_dir():
            raise ConfigError(f"upstream {upstream.key!r}: {upstream.path} is not a folder",
                              "fix 'dir:' in versions.yaml")
        # its date is the folder's (from git or its files) unless declared: an input too
        dated = declared or {"date": str(upstream_tree.dir_date(upstream.path))}
        return {"kind": "dir", "path": upstream.path.name, "tree": tree_hash(upstream.path),
                **dated}
    if isinstance(upstream, GitUpstream):
        return {"kind": "git", "url": upstream.url, "commit": upstream.commit, **declared}
    return {"kind": "pypi", "name": upstream.name, "version": upstream.version,
            "sha256": upstream.sha256, **declared}


def base_identity(base: Base) -> dict[str, Any]:
    """What makes a base image; its name and declared `python` only describe it."""
    if isinstance(base, DebootstrapBase):
        return {"debootstrap": {k: v for k, v in asdict(base).items()
                                if k not in ("name", "python")}}
    return {"image": base.image}


def series_folder(patches_dir: Path, name: str, upstream: str | None = None) -> Path:
    """The folder of a series for an upstream: its variant patches/<name>/<upstream>/
    where that folder exists, else patches/<name>/ (the series for every other upstream)."""
    base = patches_dir / name
    if upstream is not None and (base / upstream).is_dir():
        return base / upstream
    return base


def read_series(patches_dir: Path, name: str, build_dir: Path | None = None,
                upstream: str | None = None) -> SeriesInfo:
    """Read the series file of `name` (its variant for upstream, if any): quilt order, `#`
    comments and blank lines ignored; a remote patch (`URL sha256=<hex>`) is identified by
    its pin, cached under build_dir."""
    folder = series_folder(patches_dir, name, upstream)
    listing = folder / "series"
    if not listing.is_file():
        raise ConfigError(f"series {name!r}: {listing} does not exist",
                          f"create {listing} listing the patches in order")
    patches: list[tuple[str, str]] = []
    remote: list[RemotePatch] = []
    for number, raw in enumerate(listing.read_text().splitlines(), start=1):
        entry, *options = raw.split("#", 1)[0].split()  or [""]
        if not entry:
            continue
        if remote_patches.is_remote(entry):
            remote.append(remote_patches.parse(f"{listing}:{number}", entry, options,
                                               build_dir or patches_dir.parent / "build"))
            patches.append((entry, remote[-1].sha256))
            continue
        if options not in ([], ["-p1"]):
            raise ConfigError(f"{listing}:{number}: options {' '.join(options)!r} are not "
                              "supported", "make the patch -p1 (git format-patch) and drop them")
        patch = folder / entry
        if not patch.is_file():
            raise ConfigError(f"{listing}:{number}: patch {entry!r} does not exist",
                              f"add {patch}, or remove line {number} from the series file")
        patches.append((entry, file_sha256(patch)))
    return SeriesInfo(name=name, folder=folder, patches=tuple(patches), remote=tuple(remote))


def remote_of(config: Config, tag: Tag) -> tuple[RemotePatch, ...]:
    """The remote patches of the tag's series, read from their listings alone (a series
    that cannot be read has none here: make names its problem)."""
    found: list[RemotePatch] = []
    for name in tag.series:
        with contextlib.suppress(ConfigError):
            found.extend(read_series(config.patches_dir, name, config.build_dir,
                                     tag.upstream.key).remote)
    return tuple(found)


def make(config: Config, tag: Tag) -> Plan:
    """Compute every key of the tag's pipeline from its inputs alone."""
    series: list[SeriesInfo] = []
    problems: list[str] = []
    remedies: list[str] = []
    for name in tag.series:
        try:
            series.append(read_series(config.patches_dir, name, config.build_dir,
                                      tag.upstream.key))
        except ConfigError as exc:
            problems.append(exc.message)
            remedies.append(exc.remedy)
    pin = upstream_pin(tag.upstream)  # a dir's hashes its files and asks git: once
    fetch_key = data_hash({"upstream": pin})
    patch_key = data_hash({Stage.FETCH: fetch_key, "series": [(s.name, s.patches) for s in series],
                           "missing": problems})
    local = stamping.local_part(patch_key, any(s.patches for s in series))
    toolchain = {
        "builder": base_identity(tag.builder), "cuda_arch": tag.cuda_arch,
        "platform": str(tag.platform), "template": resources.digest("builder.Dockerfile.j2"),
        "build_scripts": {name: resources.digest(name) for name in resources.BUILDER_FILES},
        "lock": _digest_or_none(pins.lock_path(config, tag)),
    }
    if tag.upstream.device != "cuda":  # only then: the keys of CUDA tags stay as they were
        toolchain["device"] = tag.upstream.device
    if tag.kernels:  # the seed's kernels go into the wheels
        toolchain["kernel seed"] = asdict(tag.kernels)
    elif third_party := locked_sources(config, tag):  # what CMake compiles besides the tree
        toolchain["third-party sources"] = third_party
    kernel_patches = [f"{s.name}/{name}@{sha[:12]}" for s in series for name, sha in s.patches
                      if _may_touch_kernels(s.path(name))]
    stage_inputs: dict[Stage, dict[str, Any]] = {
        Stage.FETCH: {"upstream": pin},
        Stage.PATCH: {"patches": [f"{s.name}/{name}@{sha[:12]}" for s in series
                              for name, sha in s.patches], "missing": problems},
        Stage.KERNELS: {"kernel patches": kernel_patches, **toolchain},
        # the version scheme, not its value: the patch key is in the wheels key already
        Stage.WHEELS: {**toolchain, "local version": stamping.SCHEME if local else "none",
                   "kernel reuse": tag.upstream.kernel_reuse,
                   "wheel format": contents.FORMAT,  # how this host writes a wheel
                   # in the wheels' METADATA (stamping); only where an upstream has some
                   **({"requirement overrides": list(tag.upstream.overrides)}
                      if tag.upstream.overrides else {})},
        Stage.BAKE: {"runtime": base_identity(tag.runtime), "platform": str(tag.platform),
                 "env": tag.env, "tag": tag.name,
                 "runtime lock": _digest_or_none(pins.runtime_lock_path(config, tag)),
                 # by name, so that `plan` says which of them changed
                 Stage.BAKE: [image_layout.FORMAT, *(f"{name}@{resources.digest(name)}"
                                                     for name in _bake_resources())],
                 "entrypoint": resources.digest("entrypoint.py"),
                 # what the image's preflight enforces (versions.yaml capabilities)
                 **({"capabilities": tag.capabilities.as_dict()} if tag.capabilities else {})},
    }
    if tag.kernels:  # a published wheel's kernels stand for the upstream's: nothing compiles
        stage_inputs[Stage.KERNELS] = {"kernel patches": kernel_patches,
                                   "seed": f"{tag.kernels.wheel}@{tag.kernels.sha256[:12]}",
                                   "platform": str(tag.platform)}
    kernel_key = data_hash({Stage.FETCH: fetch_key, "seed": stage_inputs[Stage.KERNELS]["seed"],
                            "platform": str(tag.platform)}
                           if tag.kernels else
                           {Stage.FETCH: fetch_key, "patches": kernel_patches, **toolchain})
    wheels_key = data_hash({Stage.PATCH: patch_key, **stage_inputs[Stage.WHEELS]})
    inputs = data_hash({Stage.WHEELS: wheels_key, **stage_inputs[Stage.BAKE]})
    return Plan(tag=tag, series=tuple(series), problems=tuple(problems), fetch_key=fetch_key,
                patch_key=patch_key, kernel_key=kernel_key, wheels_key=wheels_key,
                inputs=inputs, stage_inputs=stage_inputs, local_version=local,
                remedies=tuple(remedies), kernel_patches=tuple(kernel_patches))


def locked_sources(config: Config, tag: Tag) -> list[str]:
    """The tag's sources lock as `name@commit:tree` items (README: Builder lock)."""
    locked = sourcelock.read(sourcelock.lock_path(config, tag))
    return [f"{s.name}@{s.pin[:16]}:{s.tree[:16]}" for s in locked.sources] if locked else []


def changed_inputs(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Names of what differs between two stages' inputs; list items (patches) by name."""
    changes: list[str] = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list):
            changes += _list_changes(name, old, new)
        else:
            changes.append(name)
    return changes


def _list_changes(name: str, old: list[Any], new: list[Any]) -> list[str]:
    """`name@sha` items: edited, added (+) or removed (-), by name."""
    before = {str(item).split("@")[0]: item for item in old}
    after = {str(item).split("@")[0]: item for item in new}
    edited = [f"{name}: {key} edited" for key in after if key in before
              and before[key] != after[key]]
    added = [f"{name}: +{key}" for key in after if key not in before]
    removed = [f"{name}: -{key}" for key in before if key not in after]
    return edited + added + removed


def _bake_resources() -> list[str]:
    files: list[str] = json.loads(resources.path("runtime.json").read_text())["files"]
    return [*BAKE_RESOURCES, *files]


def _digest_or_none(path: Path | None) -> str:
    return file_sha256(path) if path is not None and path.is_file() else "none"


def touched_paths(patch: Path) -> set[str]:
    """Every path a patch file changes, from its `diff --git` and `---`/`+++` lines."""
    paths: set[str] = set()
    for line in patch.read_text(errors="replace").splitlines():
        if line.startswith("diff --git "):
            paths.update(p[2:] for p in line.split()[2:4] if p[:2] in ("a/", "b/"))
        elif line.startswith(("--- a/", "+++ b/")):
            paths.add(line[6:].split("\t")[0])
    return paths


def _may_touch_kernels(patch: Path) -> bool:
    """A remote patch not fetched yet counts as touching kernels: its content is unknown."""
    return not patch.is_file() or touches_kernels(patch)


def touches_kernels(patch: Path) -> bool:
    """Does the patch change a compiled input (CUDA/C++ sources or the build config)?"""
    return any(fnmatch.fnmatch(path, pattern)
               for path in touched_paths(patch) for pattern in KERNEL_INPUTS)


def render_text(stages: list[StagePlan]) -> str:
    width = max(len(s.name) for s in stages)
    return "\n".join(
        f"{s.name:<{width}}  {s.key[:16]}  {s.state:<8} {s.detail}".rstrip() for s in stages
    )


def render_json(plan: Plan, stages: list[StagePlan]) -> str:
    return json.dumps({
        "tag": plan.tag.name,
        "image": plan.tag.image_ref,
        "inputs": plan.inputs,
        "series": [{"name": s.name, "sha256": s.sha256} for s in plan.series],
        "local_version": plan.local_version,
        "problems": list(plan.problems),
        "sources": plan.stage_inputs[Stage.WHEELS].get("third-party sources", []),
        "stages": [asdict(s) for s in stages],
    }, indent=2)
