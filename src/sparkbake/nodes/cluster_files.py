"""check-env of several files: the nodes of one deployment checked against each other.

Each file passes its own preflight (preflight.check_env); a cluster's files can still
disagree with each other in ways no single file shows: two nodes with one rank, ranks that
leave a node out, a MASTER_ADDR other than the head's, one node's own address copied to
another, engine settings that differ from the head's, an IMAGE that is not the tag's. Each
finding is one line with the file and line, and what to do.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbake.config.versions import Tag
from sparkbake.console.display import Console
from sparkbake.errors import ConfigError
from sparkbake.nodes import envfile, preflight

__all__ = ["Finding", "check", "check_files"]

# what differs between the nodes of one deployment by design; every other variable that
# reaches a node's command must be the head's (the entrypoint builds the same engine on all)
PER_NODE = frozenset({"NODE_RANK", "RANK", "VLLM_HOST_IP"})
INTEGER = re.compile(r"[+-]?[0-9]+")  # the preflight's integers


@dataclass(frozen=True)
class Finding:
    where: str  # file:line
    message: str
    rule: str
    remedy: str

    def lines(self) -> str:
        return f"{self.where}: error: {self.message} [{self.rule}]\n  -> {self.remedy}"


def rank(env: dict[str, str]) -> str:
    """The node's rank as a number reads it (NODE_RANK=01 and NODE_RANK=1 are both rank 1, as
    vllm takes them), written in decimal; a value that is no integer as it stands (the file's
    own check reports it)."""
    given = (env.get("NODE_RANK") or env.get("RANK") or "0").strip()
    return str(int(given)) if INTEGER.fullmatch(given) else given


def rank_name(file: envfile.EnvFile) -> str:
    return "NODE_RANK" if "NODE_RANK" in file.lines else "RANK"


def check(tag: Tag, files: list[envfile.EnvFile], image: str | None = None) -> list[Finding]:
    """What the files of one deployment get wrong together, in the files' order; image: the
    one the nodes will run (default: the tag's)."""
    image = image or tag.image_ref
    envs = [preflight.entrypoint().effective_env(preflight.node_env(tag, f)) for f in files]
    heads = [i for i, env in enumerate(envs) if rank(env) == "0"]
    head = heads[0] if heads else 0
    found = _ranks(files, envs, head, heads)
    for i, (file, env) in enumerate(zip(files, envs, strict=True)):
        if env.get("IMAGE") and env["IMAGE"] != image:
            found.append(Finding(file.where("IMAGE"), f"IMAGE={env['IMAGE']} is not the "
                                 f"image of tag {tag.name} ({image})", "image-not-the-tags",
                                 f"set IMAGE={image}"))
        if i == head:
            continue
        found += _against_head(file, env, files[head], envs[head])
    found += _addresses(files, envs)
    return found


def _ranks(files: list[envfile.EnvFile], envs: list[dict[str, str]], head: int,
           heads: list[int]) -> list[Finding]:
    found: list[Finding] = []
    seen: dict[str, int] = {}
    for i, (file, env) in enumerate(zip(files, envs, strict=True)):
        if rank(env) in seen:
            found.append(Finding(file.where(rank_name(file)), f"{_rank_text(file)} is rank "
                                 f"{rank(env)}, as is {_rank_text(files[seen[rank(env)]], True)}",
                                 "rank-repeated", "give each node its own rank, 0 to NNODES-1"))
        seen.setdefault(rank(env), i)
    if not heads:
        found.append(Finding(str(files[0].path), "no file has rank 0: the deployment has no "
                             "head", "no-head", "give the head's file NODE_RANK=0"))
    nodes = envs[head].get("NNODES") or "1"
    if nodes.isdigit():
        missing = sorted(set(range(int(nodes))) - {int(r) for r in seen if r.isdigit()})
        if missing:
            found.append(Finding(files[head].where("NNODES"), f"NNODES={nodes}, but no file "
                                 f"has rank {', '.join(map(str, missing))}", "rank-missing",
                                 "check one file per node, all of them together"))
    return found


def _rank_text(file: envfile.EnvFile, where: bool = False) -> str:
    """`NODE_RANK=01` as the file writes it, after its file:line with where."""
    name = rank_name(file)
    text = f"{name}={file.values[name]}" if name in file.values else "NODE_RANK unset"
    return f"{file.where(name)} ({text})" if where else text


def _against_head(file: envfile.EnvFile, env: dict[str, str], head_file: envfile.EnvFile,
                  head: dict[str, str]) -> list[Finding]:
    """A worker's settings that differ from the head's: MASTER_ADDR, and each variable whose
    value changes the worker's command (the entrypoint's own: head-only options do not)."""
    found: list[Finding] = []
    if env.get("MASTER_ADDR") != head.get("MASTER_ADDR"):
        found.append(Finding(file.where("MASTER_ADDR"),
                             f"MASTER_ADDR={env.get('MASTER_ADDR', '')} here, "
                             f"{head.get('MASTER_ADDR', '')} on the head "
                             f"({head_file.where('MASTER_ADDR')})", "master-addr-differs",
                             "every node names the head's address"))
    command = _command(env)
    for name in sorted((set(env) | set(head)) - PER_NODE - {"MASTER_ADDR"}):
        if env.get(name) == head.get(name):
            continue
        if _command({**env, name: head.get(name, "")}) != command:
            found.append(Finding(file.where(name), f"{name}={env.get(name, '')} here, "
                                 f"{head.get(name, '')} on the head "
                                 f"({head_file.where(name)}): the engines differ",
                                 "engine-args-differ", f"set the head's {name} on every node"))
    return found


def _command(env: dict[str, str]) -> list[str] | None:
    try:
        return list(preflight.entrypoint().serve_command(env))
    except (ValueError, SystemExit):
        return None  # a file's own check reports it


def _addresses(files: list[envfile.EnvFile], envs: list[dict[str, str]]) -> list[Finding]:
    found: list[Finding] = []
    seen: dict[str, envfile.EnvFile] = {}
    for file, env in zip(files, envs, strict=True):
        address = env.get("VLLM_HOST_IP")
        if not address:
            continue
        if address in seen:
            found.append(Finding(file.where("VLLM_HOST_IP"), f"VLLM_HOST_IP={address} is also "
                                 f"{seen[address].where('VLLM_HOST_IP')}'s: a file copied "
                                 "from another node", "host-address-repeated",
                                 "set this node's own fabric address"))
        seen.setdefault(address, file)
    return found


def check_files(tag: Tag, paths: list[Path], host_root: Path, show: bool,
                runtime_lock: Path | None = None, *, console: Console,
                image: str | None = None, json_out: bool = False,
                measured: Callable[[str, str], Any] | None = None,
                ask_image: Callable[[list[dict[str, Any]], Path], list[str]] | None = None,
                one_deployment: bool = False) -> int:
    """check-env of each file, then of them together; ConfigError (exit 2) naming the files
    with errors when there are any. json_out: each file's answer as JSON (one document each,
    then the findings between them as one more); one_deployment: the files are all of one
    deployment's (up's), so a single file is checked as one too (its NNODES against it)."""
    failed = []
    for path in paths:
        try:
            preflight.check_env(tag, path, host_root, show, runtime_lock, console=console,
                                json_out=json_out, measured=measured, ask_image=ask_image)
        except ConfigError as exc:
            if not json_out:
                print(f"{exc.message}", flush=True)
            failed.append(str(path))
    together = check(tag, [envfile.read(path) for path in paths], image) \
        if len(paths) > 1 or one_deployment else []
    if json_out:
        print(json.dumps({"together": [dataclasses.asdict(f) for f in together]}))
    else:
        for finding in together:
            print(finding.lines())
    if failed or together:
        parts = ([f"{len(failed)} of {len(paths)} file(s) with preflight errors"] if failed
                 else []) + ([f"{len(together)} error(s) between the files"] if together else [])
        raise ConfigError(f"check-env for {tag.name}: {'; '.join(parts)}",
                          "fix them: each node's entrypoint, or the cluster, fails with them")
    if len(paths) > 1:
        console.detail(f"check-env: the {len(paths)} files agree for {tag.name}")
    return 0
