"""The commands of a deployment's nodes: node-files (one .env per node from a list of
addresses), up (nodes/cluster.py), and down, status and logs of what up started, found again
from its record. Each takes the command's arguments, the run and the tag (command_table.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sparkbake.config.versions import Tag
from sparkbake.console.tools import step
from sparkbake.errors import ConfigError, EngineError, SmokeError, UsageError
from sparkbake.lock import pins
from sparkbake.nodes import (
    cluster,
    cluster_files,
    engines,
    node_files,
    node_list,
    sample_envs,
    serve_client,
)
from sparkbake.run import Run

__all__ = ["down", "logs", "status", "up", "write_node_files"]

HOST_ROOT = Path("/")  # this host's: its sysctls only ever warn

def write_node_files(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """One .env per node (node_files) from the node list or the addresses, then check-env of
    them together; files that fail it are taken back."""
    layout = _layout(args)
    source = args.template or node_files.template_of(tag,
                                                     sample_envs.load(run.config, tag).accept)

    def check(paths: list[Path]) -> int:
        return cluster_files.check_files(tag, paths, HOST_ROOT, False,
                                         pins.runtime_lock_path(run.config, tag),
                                         console=run.console)
    code = node_files.write_checked(tag, layout, source, args.out, args.force, check)
    for rank in range(len(layout.nodes)):
        run.console.result(f"wrote {args.out / node_files.file_name(rank)}")
    return code


def _layout(args: argparse.Namespace) -> node_list.Layout:
    """--nodes-file, or --nodes with --iface: one of them."""
    if (args.nodes_file is None) == (args.nodes is None):
        raise UsageError("give the node list (--nodes-file NODES.yaml) or the addresses "
                         "(--nodes A,B,...)", "one of them: see sparkbake node-files --help")
    if args.nodes_file is None:
        return node_files.parse_addresses(args.nodes, args.iface)
    if args.iface is not None:
        raise UsageError("--iface goes with --nodes; a node list gives each node's iface",
                         "set iface: in the list's defaults or its nodes")
    return node_list.load(args.nodes_file)


def _engines(args: argparse.Namespace, files: list[Path]) -> list[engines.Node]:
    """Each file's engine: --hosts in the files' order, or by rank from --nodes-file."""
    if args.nodes_file is None:
        return engines.parse_hosts(args.hosts) if args.hosts else []
    if args.hosts:
        raise UsageError("give --hosts or --nodes-file, not both",
                         "the node list names each node's engine")
    return node_list.engines_for(node_list.load(args.nodes_file), files)


def up(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """check-env of the files together, then the nodes brought up (cluster.up), or with
    --print, the commands that would bring them up by hand."""
    files: list[Path] = args.env_files
    nodes = _engines(args, files)
    image = args.image or tag.image_ref
    environ = dict(run.settings.environ)
    if args.show:
        return cluster.print_commands(tag, files, nodes, image, environ, args.shm_size)
    with step(run.console, f"check-env of {len(files)} file(s) for {image}"):
        cluster_files.check_files(tag, files, HOST_ROOT, False,
                                  pins.runtime_lock_path(run.config, tag), console=run.console,
                                  image=image)
    return cluster.up(run.config, tag, files, nodes, image, args.timeout, environ,
                      args.shm_size, console=run.console)


def down(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """Remove the cluster's containers, the head first; 0 when none is left. --node: only
    that rank's, and the record stays for the others."""
    found = cluster.load(run.config, tag.name)
    nodes = _ranked(found, args.node)
    clients = cluster.clients_of(nodes)
    for node in nodes:
        box = cluster.box_of(clients[node.engine.url], found, node)
        if box is not None:
            with step(run.console, f"remove {box.name} ({node.describe()})"):
                box.remove(force=True)
    if args.node is not None:
        run.console.result(f"{tag.name}: rank {args.node} down; the other nodes keep theirs "
                           f"(`sparkbake down {tag.name}` takes them down)")
        return 0
    left = [f"{box.name} on {url}" for url, client in clients.items()
            for box in cluster.containers_of(client, tag.name)]
    if left:
        raise EngineError(f"{tag.name}: containers left after down: {', '.join(left)}",
                          "remove them with docker rm -f")
    cluster.state_path(run.config, tag.name).unlink()
    run.console.result(f"{tag.name}: down on {len(found.nodes)} node(s), no container left")
    return 0


def status(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """Each node's container and state, and whether the head answers; 0 when all run and
    the head is healthy, else 6."""
    found = cluster.load(run.config, tag.name)
    clients = cluster.clients_of(found.nodes)
    running = 0
    for node in found.nodes:
        box = cluster.box_of(clients[node.engine.url], found, node)
        state = "absent" if box is None else box.status if box.status != "exited" else \
            f"exited ({box.attrs['State'].get('ExitCode')})"
        running += state == "running"
        run.console.result(f"rank {node.rank}  {node.describe()}  "
                           f"{node.container(tag.name)}: {state}")
    healthy = _healthy(found.api)
    run.console.result(f"{tag.name}: {running}/{len(found.nodes)} node(s) running; head "
                       f"{found.api}/health: {'200' if healthy else 'no answer'}")
    return 0 if healthy and running == len(found.nodes) else SmokeError.exit_code


def _healthy(api: str) -> bool:
    import requests

    try:
        return serve_client.Server(api, timeout=5).get("/health").status_code == 200
    except requests.RequestException:
        return False


def logs(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """The last lines of each node's log (or one rank's), each under a line naming its node."""
    found = cluster.load(run.config, tag.name)
    wanted = _ranked(found, args.rank)
    clients = cluster.clients_of(wanted)
    for node in wanted:
        box = cluster.box_of(clients[node.engine.url], found, node)
        run.console.result(f"== rank {node.rank}, {node.describe()}: {node.container(tag.name)}")
        run.console.result(box.logs(tail=args.tail).decode(errors="replace").rstrip() if box
                           else "(no container)")
    return 0


def _ranked(found: cluster.Cluster, rank: int | None) -> list[cluster.ClusterNode]:
    """The cluster's nodes, or the one of that rank (a rank it lacks: exit 2)."""
    wanted = [node for node in found.nodes if rank is None or node.rank == rank]
    if not wanted:
        raise ConfigError(f"{found.tag} has no rank {rank}", f"ranks: 0 to {len(found.nodes) - 1}")
    return wanted
