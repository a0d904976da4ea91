"""compile-farm's nodes: the ssh hosts of `--hosts A,B` or of a node list (`--nodes-file`,
the format `node-files --nodes-file` reads), handed to the compile farm's handler
(wheels.farm_commands), which starts a server on each."""

from __future__ import annotations

import argparse

from sparkbake.errors import UsageError
from sparkbake.nodes import node_list
from sparkbake.run import Run
from sparkbake.wheels import farm_commands

__all__ = ["compile_farm", "hosts_of"]


def compile_farm(args: argparse.Namespace, run: Run) -> int:
    return farm_commands.compile_farm(args, run, hosts_of(args))


def hosts_of(args: argparse.Namespace) -> list[str] | None:
    """The nodes' ssh hosts, head first; None for a farm on this machine."""
    given = [name for name in ("local", "hosts", "nodes_file") if getattr(args, name, None)]
    if len(given) > 1:
        raise UsageError(f"compile-farm: {' and '.join('--' + g.replace('_', '-') for g in given)}"
                         " name two farms", "give one of --local, --hosts or --nodes-file")
    if given and args.action != "up":
        raise UsageError(f"compile-farm {args.action} takes no --{given[0].replace('_', '-')}",
                         f"run `sparkbake compile-farm {args.action}`: it acts on the farm up "
                         "started")
    if getattr(args, "hosts", None):
        return _unique([host.strip() for host in args.hosts.split(",") if host.strip()])
    if getattr(args, "nodes_file", None):
        return _unique([_ssh_host(node) for node in node_list.load(args.nodes_file).nodes])
    return None


def _ssh_host(node: node_list.SiteNode) -> str:
    """A node's ssh host: its engine's (ssh://[USER@]HOST), else its address."""
    if node.engine is not None and node.engine.url.startswith("ssh://"):
        return node.engine.url.removeprefix("ssh://").split(":", 1)[0].rstrip("/")
    return node.address


def _unique(hosts: list[str]) -> list[str]:
    if not hosts:
        raise UsageError("compile-farm up --hosts names no node",
                         "give the nodes' ssh hosts: --hosts spark-1,spark-2")
    twice = sorted({host for host in hosts if hosts.count(host) > 1})
    if twice:
        raise UsageError(f"compile-farm up: {', '.join(twice)} named more than once",
                         "name each node once")
    return hosts
