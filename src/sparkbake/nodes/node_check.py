"""check-nodes: each node of a deployment checked through its Docker engine, one line per
node and finding (node_findings.py, from what node_probe.py copies out of the node); with
--apply, the memory floor written on the node where its engine lets a privileged container
do it, else the command to run there. Exit 0 when every node passes, 6 when one fails a
check, 8 when one's engine does not answer."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from sparkbake.config.versions import Tag
from sparkbake.console.display import Console
from sparkbake.errors import EngineError, SmokeError
from sparkbake.nodes import cluster, engines, node_findings, node_list, node_probe, preflight
from sparkbake.nodes.node_findings import Finding
from sparkbake.oci.docker_engine import Client
from sparkbake.run import Run

__all__ = ["check_nodes", "check_one"]


def check_nodes(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """Every node of the files (--hosts: each file's engine, in the files' order; or
    --nodes-file: each rank's, as up takes them)."""
    hosts = node_list.engines_given(args.nodes_file, args.hosts, args.env_files)
    nodes = cluster.plan_nodes(args.env_files, hosts,
                               cluster.local_engine(dict(run.settings.environ)))
    image = args.image or tag.image_ref
    failed, unreached = [], []
    for node in nodes:
        try:
            client = engines.connect(node.engine)
        except EngineError as exc:
            print(f"{node.role}: engine: error: {exc.message}", flush=True)
            unreached.append(node.role)
            continue
        found = check_one(tag, node, client, image, apply=args.apply, console=run.console)
        if any(f.level == "error" for f in found):
            failed.append(node.role)
    return _verdict(tag, nodes, failed, unreached)


def check_one(tag: Tag, node: cluster.ClusterNode, client: Client, image: str, *,
              apply: bool, console: Console) -> list[Finding]:
    """One node's findings, printed; with apply, the floor fixed first where it fails."""
    with tempfile.TemporaryDirectory(prefix="sparkbake-node-") as scratch:
        root = node_probe.probe(client, image, node.env, Path(scratch))
        found = node_findings.findings(root, node.env, node_probe.runtimes(client),
                                       tag.upstream.device == "cuda")
    if apply:
        found = [_applied(f, client, image, node, console) for f in found]
    for finding in found:
        line = f"{node.role} ({node.engine.url}): {finding.check}: {finding.level}: " \
               f"{finding.message}"
        print(line + (f"\n  -> run there: {finding.fix}" if finding.fix and
                      finding.level != "ok" else ""), flush=True)
    return found


def _applied(finding: Finding, client: Client, image: str,
             node: cluster.ClusterNode, console: Console) -> Finding:
    """The floor's findings fixed on the node (both at once: the sysctls and their file)."""
    if finding.level == "ok" or finding.check not in ("memory floor", "floor persisted"):
        return finding
    rule = _floor_rule()
    why = node_probe.apply_floor(client, image, node_findings.floor_commands(rule),
                                 node_findings.floor_conf(rule), node_findings.FLOOR_FILE)
    if why is None:
        console.detail(f"{node.role}: the memory floor written ({node_findings.FLOOR_FILE})")
        return Finding(finding.check, "ok", f"applied: {finding.message}")
    return Finding(finding.check, finding.level, f"{finding.message} (not applied: {why})",
                   finding.fix)


def _floor_rule() -> dict[str, Any]:
    rules = preflight.entrypoint().checks.load_rules()["rules"]
    rule: dict[str, Any] = next(r for r in rules if r["id"] == node_findings.FLOOR_RULE)
    return rule


def _verdict(tag: Tag, nodes: list[cluster.ClusterNode], failed: list[str],
             unreached: list[str]) -> int:
    if unreached:
        raise EngineError(f"check-nodes {tag.name}: no engine answers on "
                          f"{', '.join(unreached)}" + (f"; {', '.join(failed)} failed a check"
                                                      if failed else ""),
                          "start the node's engine, or name it with --hosts URL,URL")
    if failed:
        raise SmokeError(f"check-nodes {tag.name}: {', '.join(failed)} failed a check",
                         "run there what each error's `run there:` line says, or rerun with "
                         "--apply for the memory floor")
    print(f"check-nodes {tag.name}: {len(nodes)} node(s) pass", flush=True)
    return 0
