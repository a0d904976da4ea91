"""What a release shipped with besides its image, recorded by publish (not baked: the image's
digest must not move with them): the locks the image was made from, and vLLM's verdicts on
the backends the tag's env selects, as images/backend-verdicts.json held them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NotRequired, TypedDict

from sparkbake import resources
from sparkbake.config.versions import Config, Tag
from sparkbake.fetch import sourcelock
from sparkbake.files import read_json
from sparkbake.hashing import file_sha256
from sparkbake.lock import pins

__all__ = ["LockJson", "VerdictsJson", "backend_verdicts", "locks"]


class LockJson(TypedDict):
    path: str  # relative to the repository
    sha256: str
    packages: NotRequired[dict[str, str]]  # the runtime lock's: name -> version


class VerdictsJson(TypedDict):
    vllm: str | None  # the image's vLLM version (its upstream's); None: not known
    cuda_arch: str
    model: str | None  # capabilities.model; None: not declared
    listed: bool  # backend-verdicts.json has verdicts of vllm on cuda_arch for model
    # kind -> the backend the env selects -> "" runs, else why not; None: no verdict
    backends: dict[str, dict[str, str | None]]


def locks(config: Config, tag: Tag) -> dict[str, LockJson]:
    """The tag's lock files that exist (builder, runtime, sources: those the provenance names),
    each by path and sha256; the runtime lock with its packages' versions."""
    paths = {"builder": pins.lock_path(config, tag), "runtime": pins.runtime_lock_path(config, tag),
             "sources": sourcelock.lock_path(config, tag)}
    found: dict[str, LockJson] = {}
    for role, path in paths.items():
        if path is None or not path.is_file():
            continue
        found[role] = {"path": path.relative_to(config.root).as_posix(),
                       "sha256": file_sha256(path)}
        if role == "runtime":
            found[role]["packages"] = _versions(path)
    return found


def _versions(lock: Path) -> dict[str, str]:
    """A requirements lock's packages, name -> version (a package on two lines, by marker:
    both, joined)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    for _, wanted in pins.lines_of(lock):
        if wanted is None:
            continue
        requirement = Requirement(wanted)
        name = str(canonicalize_name(requirement.name))
        version = str(requirement.specifier).removeprefix("==") or str(requirement.url)
        found[name] = f"{found[name]}; {version}" if name in found else version
    return found


def backend_verdicts(tag: Tag, runs: dict[str, Any] | None = None) -> VerdictsJson:
    """vLLM's verdict on each backend the tag's env selects, for its CUDA arch and declared
    model, looked up as the image's preflight does (images/preflight.py Context.verdicts,
    each name spelled by images/backend_naming.py); runs: the verdicts table
    (images/backend-verdicts.json)."""
    runs = read_json(resources.path("backend-verdicts.json")) if runs is None else runs
    vllm = tag.vllm_version
    model = tag.capabilities.model if tag.capabilities else None
    table = runs.get(vllm or "", {}).get(tag.cuda_arch, {}).get(model or "")
    env = dict(tag.env)
    backends: dict[str, dict[str, str | None]] = {}
    for variable, kind in _backend_variables().items():
        if env.get(variable):
            name = resources.module("backend_naming").verdict_name(kind, env[variable])
            backends.setdefault(kind, {})[name] = (table or {}).get(kind, {}).get(name)
    return {"vllm": vllm, "cuda_arch": tag.cuda_arch, "model": model,
            "listed": table is not None, "backends": backends}


def _backend_variables() -> dict[str, str]:
    """Variable -> backend kind, as the preflight rule that holds backends to the verdicts
    reads them (images/preflight.json, check backend-capability)."""
    rules = read_json(resources.path("preflight.json"))["rules"]
    held = next(rule for rule in rules if rule.get("check") == "backend-capability")
    return dict(held["variables"])
