"""check-env: a node's .env checked on the host with the image's own entrypoint and rules.

images/entrypoint.py, images/preflight.py, images/model_checks.py and images/preflight.json
are what the image runs before exec; they are loaded here from the package resources, so the
host applies exactly the image's rules and builds exactly its command. The tag's env
(versions.yaml) lies under the file's values, as the image's ENV defaults do; the tag's
series decide the rules about them; the model is read where MODEL_HOST_PATH says.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from sparkbake import resources
from sparkbake.config.versions import Tag
from sparkbake.console.display import Console
from sparkbake.errors import ConfigError
from sparkbake.nodes import envfile

__all__ = ["as_json", "check_env", "entrypoint", "evaluate", "hf_snapshot", "host_model_dir",
           "image_facts", "locked_distributions", "memory_figures", "memory_line",
           "model_checks_skipped", "node_env", "report"]

LOCKED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", re.MULTILINE)
MODEL_MOUNT = "/model"  # where a node's container sees MODEL_HOST_PATH


def entrypoint() -> ModuleType:
    """images/entrypoint.py as a module; its `checks` attribute is images/preflight.py."""
    return resources.module("entrypoint")


def node_env(tag: Tag, env_file: envfile.EnvFile) -> dict[str, str]:
    """What the container's environment will be: the tag's ENV defaults, then the file."""
    return {**dict(tag.env), **env_file.values}


def image_facts(tag: Tag, runtime_lock: Path | None = None) -> Any:
    """What the host knows of the tag's image: the vLLM version of its upstream pin, the
    backends' modules its runtime lock installs (unknown without one), its capabilities and
    the CUDA arch of its kernels."""
    checks = entrypoint().checks
    locked = locked_distributions(runtime_lock)
    return checks.Image(
        vllm=tag.vllm_version,
        modules=None if locked is None else checks.provided_modules(checks.load_rules(), locked),
        capabilities=tag.capabilities.as_dict() if tag.capabilities else None,
        cuda_arch=tag.cuda_arch)


def locked_distributions(runtime_lock: Path | None) -> frozenset[str] | None:
    """The distribution names a runtime lock pins (`name==version`); None without one."""
    if runtime_lock is None or not runtime_lock.is_file():
        return None
    return frozenset(match.group(1) for match in
                     LOCKED.finditer(runtime_lock.read_text(encoding="utf-8")))


def host_model_dir(env: dict[str, str]) -> Path | None:
    """The folder MODEL names, as this host sees it: MODEL_HOST_PATH (when it is a folder
    here) is mounted at MODEL_MOUNT, so MODEL=/model/snapshots/REV is its snapshots/REV, and
    MODEL=/model the folder itself (the image's rule refuses a cache folder there). For a
    MODEL outside the mount, the mount's model: MODEL_HOST_PATH, or the snapshot a Hugging
    Face cache folder's refs/main names (or its only one). None: the model checks do not
    apply."""
    folder = Path(env.get("MODEL_HOST_PATH") or "")
    if not env.get("MODEL_HOST_PATH") or not folder.is_dir():
        return None
    inside = _inside_mount(env.get("MODEL") or "")
    if inside is not None:
        return folder / inside
    return hf_snapshot(folder) or (None if _cache_folder(folder) else folder)


def _inside_mount(model: str) -> str | None:
    """MODEL's path under MODEL_MOUNT ("" for the mount itself); None when it is elsewhere."""
    path = posixpath.normpath(model) if model.startswith("/") else ""
    if path == MODEL_MOUNT:
        return ""
    return path[len(MODEL_MOUNT) + 1:] if path.startswith(f"{MODEL_MOUNT}/") else None


def _cache_folder(folder: Path) -> bool:
    """A Hugging Face cache entry (models--ORG--NAME): snapshots/, and no model of its own."""
    return not (folder / "config.json").exists() and (folder / "snapshots").is_dir()


def hf_snapshot(folder: Path) -> Path | None:
    """The snapshot folder of a Hugging Face cache entry; None when folder is not one."""
    if not _cache_folder(folder):
        return None
    ref = folder / "refs" / "main"
    if ref.is_file():
        named = folder / "snapshots" / ref.read_text(encoding="utf-8").strip()
        return named if named.is_dir() else None
    snapshots = [p for p in (folder / "snapshots").iterdir() if p.is_dir()]
    return snapshots[0] if len(snapshots) == 1 else None


def model_checks_skipped(env: dict[str, str]) -> str | None:
    """Why the model checks do not run for this file; None when they do."""
    given = env.get("MODEL_HOST_PATH")
    if not given or not Path(given).is_dir():
        return f"MODEL_HOST_PATH={given} is not a folder on this host" if given else \
            "MODEL_HOST_PATH is not set"
    model = host_model_dir(env)
    if model is None:
        return f"no config.json in {given} (a Hugging Face cache folder whose refs/main names " \
            "no snapshot here)"
    return None if (model / "config.json").is_file() else f"no config.json in {model}"


def tag_memory_only() -> None:
    """check-env's answer for the GPU's memory: none, so the tag's declared device memory
    counts; the machine it runs on need not be a node, and its GPU is not the node's."""


def evaluate(tag: Tag, env_file: envfile.EnvFile, host_root: Path,
             runtime_lock: Path | None = None) -> list[Any]:
    """The preflight findings for this node's file on this tag, in the rules' order."""
    return list(_checks(tag, env_file, host_root, runtime_lock)[0])


def _checks(tag: Tag, env_file: envfile.EnvFile, host_root: Path,
            runtime_lock: Path | None = None,
            measured: Callable[[str, str], Any] | None = None
            ) -> tuple[list[Any], list[dict[str, Any]]]:
    """The findings and the memory figures of each rank kind of the file's layout."""
    image = entrypoint()
    env = image.effective_env(node_env(tag, env_file))
    args = dict(series=tag.series, host_root=host_root, image=image_facts(tag, runtime_lock),
                model_dir=host_model_dir(env), gpu_memory=tag_memory_only, measured=measured)
    findings = image.checks.check(env, known=[name for name, _ in tag.env], **args)
    rules = image.checks.load_rules()
    return findings, image.checks.memory(image.checks.context(env, rules, **args))


def memory_figures(tag: Tag, path: Path) -> list[dict[str, Any]]:
    """The memory figures of each rank kind of a node's file (images/memory_budget.py)."""
    return _checks(tag, envfile.read(path), Path("/"))[1]


def report(env_file: envfile.EnvFile, findings: list[Any]) -> list[str]:
    """Each finding as `file:line: level: message [rule]` and its reason."""
    lines = [f"{env_file.path}:{later}: warning: {name} is set again (first on line "
             f"{earlier}) [repeated-variable]\n  -> the last value wins, as in a shell"
             for name, earlier, later in env_file.repeated]
    return lines + [finding.lines(f"{env_file.where(finding.at)}: ") for finding in findings]


def as_json(env_file: envfile.EnvFile, tag: Tag, findings: list[Any],
            memory: list[dict[str, Any]]) -> dict[str, Any]:
    """check-env's answer for one file as data (--json)."""
    return {"file": str(env_file.path), "tag": tag.name,
            "passes": not any(f.level == "error" for f in findings),
            "findings": [{"rule": f.rule, "level": f.level, "message": f.message,
                          "reason": f.reason, "where": env_file.where(f.at)} for f in findings],
            "memory": memory}


def check_env(tag: Tag, path: Path, host_root: Path, show: bool,
              runtime_lock: Path | None = None, *, console: Console, json_out: bool = False,
              measured: Callable[[str, str], Any] | None = None,
              ask_image: Callable[[list[dict[str, Any]], Path], list[str]] | None = None
              ) -> int:
    """Print the findings, and each rank kind's memory figures when the file passes; raise
    ConfigError (exit 2) when one is an error. runtime_lock: the tag's, which says what the
    image has installed (the backends' packages); json_out: one JSON document instead;
    measured: the non-KV share `up` measured for this layout (model_checks.Node);
    ask_image: what asks the tag's image's planner (--ask-image), its lines to print."""
    env_file = envfile.read(path)
    findings, memory = _checks(tag, env_file, host_root, runtime_lock, measured)
    errors = [f for f in findings if f.level == "error"]
    asked = _ask_image(ask_image, memory, node_env(tag, env_file)) if not errors else []
    if json_out:
        print(json.dumps({**as_json(env_file, tag, findings, memory), "image_planner": asked},
                         indent=2))
    else:
        _print_text(tag, env_file, findings, [] if errors else memory, console)
        for line in asked:
            print(f"{env_file.path}: memory: {line}")
    if errors:
        raise ConfigError(f"{path}: {len(errors)} preflight error(s) for {tag.name}",
                          "fix them: the image's entrypoint refuses to start vllm with them")
    if show:
        print(shlex.join(entrypoint().serve_command(node_env(tag, env_file))))
    warnings = len(findings) + len(env_file.repeated)
    console.detail(f"check-env: {path} passes for {tag.name} ({warnings} warning(s))")
    return 0


def _ask_image(ask_image: Callable[[list[dict[str, Any]], Path], list[str]] | None,
               memory: list[dict[str, Any]], env: dict[str, str]) -> list[str]:
    """The image's planner's lines for a file with memory figures (--ask-image)."""
    if ask_image is None:
        return []
    model = host_model_dir(entrypoint().effective_env(env))
    if not memory or model is None or memory[0]["model_type"] != "deepseek_v4":
        raise ConfigError("check-env --ask-image: the image's planner is asked for a DeepSeek-V4 "
                          "model on this host, and this file's is not one (or is not here)",
                          "set MODEL_HOST_PATH to the DeepSeek-V4 model's folder, or leave out "
                          "--ask-image")
    return ask_image(memory, model)


def memory_line(numbers: dict[str, Any]) -> str:
    """One rank kind's memory figures in one line (images/memory_budget.py)."""
    line: str = entrypoint().checks.model_checks.memory_budget.line(numbers)
    return line


def _print_text(tag: Tag, env_file: envfile.EnvFile, findings: list[Any],
                memory: list[dict[str, Any]], console: Console) -> None:
    for line in report(env_file, findings):
        print(line)
    for numbers in memory:
        print(f"{env_file.path}: memory: {memory_line(numbers)}")
    skipped = model_checks_skipped(entrypoint().effective_env(node_env(tag, env_file)))
    if skipped:
        console.detail(f"check-env: the model checks were skipped: {skipped}; set MODEL_HOST_PATH "
             "to the model's folder on this host (or its Hugging Face cache folder)")
