"""A sparkrun recipe (version 2) for a tag: its published release's image by digest, started
through the image's own entrypoint with a node's values as env.

sparkrun starts a workload as `docker run IMAGE bash -c COMMAND`, which replaces the image's
command but not its ENTRYPOINT's work: our entrypoint then runs `bash -c COMMAND` as given.
So the recipe's command is the entrypoint itself (images/runtime.json): with the recipe's env
it runs the preflight and builds `vllm serve` exactly as on our own nodes, one source for
both. What sparkrun owns is taken from sparkrun: the model's path in the container, the port,
the served name and the tensor-parallel size come from its config (`{config.NAME}`,
`{launch.NAME}`), and the rendezvous flags it appends to the command for a multi-node launch
(`--nnodes`, `--node-rank`, `--master-addr`, `--master-port`, `--headless`) reach the
entrypoint as arguments.

A multi-platform release is one `container:`, its index's digest: each node's engine pulls
its own platform's image from the index. sparkrun's `containers:` binds an image to a host
name, which a release cannot know (sparkrun/core/images.py), so it is not used.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbake import resources
from sparkbake.config.versions import Config, Tag
from sparkbake.errors import ConfigError, UsageError
from sparkbake.nodes import envfile, preflight, sample_envs
from sparkbake.publish import releases
from sparkbake.publish.record import Release
from sparkbake.run import Run

__all__ = ["RUNTIME", "Source", "entrypoint_argv", "has_chat_template", "published",
           "readiness", "recipe_for", "release_name", "source_env"]

RUNTIME = "vllm-distributed"  # vLLM's own multi-node start (mp executor), as our nodes run it
# the values the recipe's env takes from sparkrun's config and launch, by variable
FROM_SPARKRUN = {
    "MODEL": "{launch.model_path}",
    "API_PORT": "{config.port}",
    "SERVED_MODEL_NAME": "{config.served_model_name}",
    "TP_SIZE": "{config.tensor_parallel}",
}
# ... and those that stand in for the file's own where it sets them (sparkrun's flags for
# them, appended across nodes, then say the same)
FROM_LAUNCH = {"NNODES": "{launch.num_nodes}", "NODE_RANK": "{launch.node_rank}"}
# a node file's values that are not the container's: the host's paths and image (up mounts
# and starts them), the node's address and the cluster's rendezvous (sparkrun appends them
# as flags), the fabric (sparkrun detects it per cluster), and smoke's own
NOT_IN_RECIPE = frozenset({
    "IMAGE", "MODEL_HOST_PATH", "CACHE_HOST_PATH", "RANK",
    "MASTER_ADDR", "MASTER_PORT", "VLLM_HOST_IP", "FABRIC_IFACE", "FABRIC_TOPOLOGY", "IB_HCA",
    "IB_GID_INDEX", "SMOKE_DUMMY_LAYERS",
})
DEFAULT_PORT = 8000  # vLLM's
# sparkrun 0.4.2 probes a token by chat, responses or Anthropic messages, each through the
# model's chat template (sparkrun/scripts/startup_probe.py); it has no completions style
READINESS = {"inference": True, "inference_style": "openai-chat-stream-v1"}
HEALTH_ONLY = {"inference": False}  # ready when /health answers: a model no chat can reach


@dataclass(frozen=True)
class Source:
    """The node values a recipe is made from: a node .env file's, where it was read."""

    path: Path | None
    values: dict[str, str]


def recipe_for(run: Run, tag: Tag, release: Release | None = None, *,
               model: str | None = None, env_file: Path | None = None,
               local: bool = False) -> dict[str, Any]:
    """The sparkrun recipe of `tag`: the image of `release` (default: the tag's release
    record in build/releases; with `local`, the engine's image of the tag, marked so in
    metadata), the serve env of `env_file` (default: the tag's smoke suite's head .env, else
    its serve.env), the model `model` (default: the file's MODEL_HOST_PATH: a folder on every
    node). UsageError: no release record (and not local), or no model; ConfigError: values
    the entrypoint cannot make a command of."""
    if release is None and not local:
        release = published(run, release_name(run.config, tag))
    source = source_env(run.config, tag, env_file)
    served = _model(model, source, tag, run, local)
    env, defaults = _env(source)
    recipe: dict[str, Any] = {
        "recipe_version": "2",
        "description": f"sparkbake {tag.name}" + (" (local image)" if release is None else ""),
        "model": served,
        "runtime": RUNTIME,
        "container": tag.image_ref if release is None else release.pinned,
        "min_nodes": _nodes(source),
        "max_nodes": _nodes(source),
        "defaults": defaults,
        "command": shlex.join(entrypoint_argv()),
        "env": env,
        "readiness": readiness(served, run),
        "metadata": {"sparkbake": _metadata(tag, release, source, env, defaults)},
    }
    return recipe


def readiness(model: str, run: Run) -> dict[str, Any]:
    """Ready at the first token of a streamed chat request, as sparkrun probes it; a model
    folder here whose tokenizer has no chat template cannot answer a chat, so it is ready at
    /health, and the run says so. A model not here (a repository, a folder on the nodes) is
    taken to have one: a served chat model does."""
    folder = Path(model)
    if not folder.is_dir() or has_chat_template(folder):
        return dict(READINESS)
    run.console.notice(f"recipe: {model} has no chat template, and sparkrun probes a token "
                       "only by chat: the recipe's readiness is /health (inference: false); "
                       "give the model a chat template to be ready at the first token")
    return dict(HEALTH_ONLY)


def has_chat_template(folder: Path) -> bool:
    """Whether the tokenizer in folder has a chat template where transformers looks for one:
    tokenizer_config.json's chat_template, or a chat_template file of its own."""
    if any((folder / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))


def published(run: Run, name: str) -> Release:
    """The release record of `name`; UsageError, with both remedies, when there is none."""
    try:
        return releases.read_record(run.folders.releases, name, settings=run.settings)
    except UsageError:
        path = run.folders.release_record(name)
        local = "the local image" if name not in run.config.releases else \
            f"one platform's local image ({', '.join(run.config.releases[name])})"
        raise UsageError(f"{name} is not published: no release record {path}",
                         f"publish it (`{run.settings.command('publish', name)}`), or make "
                         f"the recipe of {local} with --local") from None


def release_name(config: Config, tag: Tag) -> str:
    """The release a tag's image is published in: its multi-platform tag's, else its own."""
    for name, platforms in config.releases.items():
        if tag.name in platforms:
            return name
    return tag.name


def entrypoint_argv() -> list[str]:
    """The image's ENTRYPOINT, as the bake sets it (images/runtime.json)."""
    described: dict[str, Any] = json.loads(resources.path("runtime.json").read_text())
    return [str(word) for word in described["entrypoint"]]


def source_env(config: Config, tag: Tag, env_file: Path | None) -> Source:
    """The node values to serve with: env_file's, else the suite's head or serve.env."""
    path = env_file if env_file is not None else _suite_env(config, tag)
    if path is None:
        return Source(None, {})
    return Source(path, envfile.read(path).values)


def _suite_env(config: Config, tag: Tag) -> Path | None:
    folder = sample_envs.find(config, tag)
    for path in (folder / "accept" / "head.env", folder / "serve.env"):
        if path.is_file():
            return path
    return None


def _model(model: str | None, source: Source, tag: Tag, run: Run, local: bool) -> str:
    found = model or source.values.get("MODEL_HOST_PATH")
    if not found:
        where = f"{source.path} sets no MODEL_HOST_PATH" if source.path else "no node .env"
        again = run.settings.command("recipe", tag.name, *(["--local"] if local else []),
                                     "--model", "ORG/NAME")
        raise UsageError(f"no model for {tag.name}'s recipe: {where}",
                         "give --model: a Hugging Face repository or the model's folder on "
                         f"every node (`{again}`)")
    return found


def _nodes(source: Source) -> int:
    text = source.values.get("NNODES") or "1"
    return int(text) if text.isdigit() and int(text) > 0 else 1


def _env(source: Source) -> tuple[dict[str, str], dict[str, Any]]:
    """The container's env and the sparkrun config it reads from (defaults)."""
    values = source.values
    tp = values.get("TP_SIZE") or "1"
    defaults: dict[str, Any] = {
        "port": int(values["API_PORT"]) if values.get("API_PORT", "").isdigit()
        else DEFAULT_PORT,
        "tensor_parallel": int(tp) if tp.isdigit() else 1,
    }
    if values.get("SERVED_MODEL_NAME"):
        defaults["served_model_name"] = values["SERVED_MODEL_NAME"]
    env = {name: FROM_LAUNCH.get(name, value) for name, value in values.items()
           if name not in NOT_IN_RECIPE and name not in FROM_SPARKRUN}
    env.update({name: template for name, template in FROM_SPARKRUN.items()
                if name != "SERVED_MODEL_NAME" or "served_model_name" in defaults})
    return env, defaults


def _metadata(tag: Tag, release: Release | None, source: Source, env: dict[str, str],
              defaults: dict[str, Any]) -> dict[str, Any]:
    """What the recipe was made from, and the head's command as the image builds it."""
    made: dict[str, Any] = {"tag": tag.name, "serve_command": _serve_command(tag, source, env,
                                                                              defaults)}
    if source.path is not None:
        made["env_file"] = source.path.name
    if release is None:
        made["local"] = True
        return made
    made.update(release=release.tag, digest=release.digest, published=release.published)
    if release.platforms:
        made["platforms"] = {p.tag: p.digest for p in release.platforms}
    return made


def _serve_command(tag: Tag, source: Source, env: dict[str, str],
                   defaults: dict[str, Any]) -> str:
    """The head's `vllm serve` from the recipe's env over the tag's (the image's ENV), with
    sparkrun's config put in and its launch values left as placeholders."""
    rendered = {name: re.sub(r"\{config\.(\w+)\}", lambda m: str(defaults.get(m[1], "")), value)
                for name, value in env.items()}
    try:
        command = preflight.entrypoint().serve_command({**dict(tag.env), **rendered})
    except (ValueError, SystemExit) as exc:
        where = source.path or "the recipe's env"
        raise ConfigError(f"{where}: the image's entrypoint makes no command of these values "
                          f"for {tag.name}: {exc}",
                          "give every variable a value of its type (see `sparkbake check-env`)"
                          ) from None
    return shlex.join(command)
