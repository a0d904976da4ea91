"""The commands of a deployment's nodes: node-files (one .env per node from a list of
addresses), up (nodes/cluster.py), and down, status and logs of what up started, found again
from its record. Each takes the command's arguments, the run and the tag (command_table.py)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from sparkbake.config.versions import Tag
from sparkbake.console.tools import step
from sparkbake.errors import ConfigError, EngineError, SmokeError, UsageError
from sparkbake.lock import pins
from sparkbake.nodes import (
    cluster,
    cluster_files,
    cluster_recovery,
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
    return node_list.engines_given(args.nodes_file, args.hosts, files)


def up(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """check-env of the files together, then the nodes brought up (cluster.up), or with
    --print, the commands that would bring them up by hand."""
    files: list[Path] = args.env_files
    nodes = _engines(args, files)
    image = args.image or tag.image_ref
    environ = dict(run.settings.environ)
    if args.show:
        with contextlib.redirect_stdout(sys.stderr):  # stdout: the commands alone
            _check_together(run, tag, files, image)
        return cluster.print_commands(tag, files, nodes, image, environ, args.shm_size)
    with cluster_recovery.one_up(run.config, tag.name):
        try:
            if args.require_signature is not None:  # before anything runs on a node
                from sparkbake.nodes import image_check

                image_check.require_signed(tag, image, args.require_signature,
                                           nodes or [cluster.local_engine(environ)],
                                           settings=run.settings, console=run.console)
            with step(run.console, f"check-env of {len(files)} file(s) for {image}"):
                _check_together(run, tag, files, image)
            code = cluster.up(run.config, tag, files, nodes, image, args.timeout, environ,
                              args.shm_size, console=run.console)
            if args.bench:  # the acceptance measured on the cluster just up
                from sparkbake.nodes import bench, bench_run

                bench_run.measure(run.config, tag.name, bench.Load(), console=run.console)
            return code
        except KeyboardInterrupt:
            urls = [node.url for node in nodes] or [cluster.local_engine(environ).url]
            raise cluster_recovery.interrupted(tag.name, urls) from None


def _check_together(run: Run, tag: Tag, files: list[Path], image: str) -> None:
    """check-env of the files as one deployment's, a single file's too (its NNODES)."""
    cluster_files.check_files(tag, files, HOST_ROOT, False,
                              pins.runtime_lock_path(run.config, tag), console=run.console,
                              image=image, one_deployment=True)


def down(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """Remove the tag's containers, found by up's label on its nodes' engines (the record's
    and --hosts'; with neither, the local engine's), the head first; 0 when none is left.
    An engine that does not answer is named and the record kept for it (exit 6). --node:
    only that rank's, and the record stays for the others."""
    record = cluster.state_path(run.config, tag.name)
    found = cluster.load(run.config, tag.name) if record.is_file() else None
    nodes = _ranked(found, args.node) if found else []
    reached = cluster_recovery.reach(_searched(run, nodes, args.hosts))
    boxes = cluster_recovery.labelled(reached, tag.name, args.node)
    if found is None and not boxes and not reached.missed:
        raise ConfigError(f"no cluster of {tag.name} was brought up from here ({record} is "
                          f"missing), and no container of it is on {', '.join(reached.clients)}",
                          f"name its nodes' engines: sparkbake down {tag.name} --hosts URL,URL")
    for url, box in boxes:
        with step(run.console, f"remove {box.name} on {url}"):
            box.remove(force=True)
    _not_reached(run, reached, nodes, f"rerun `sparkbake down {tag.name}` once they answer"
                 + ("; the record is kept for them" if found else ""))
    if args.node is not None:
        run.console.result(f"{tag.name}: rank {args.node} down; the other nodes keep theirs "
                           f"(`sparkbake down {tag.name}` takes them down)")
        return 0
    left = cluster_recovery.labelled(reached, tag.name)
    if left:
        raise EngineError(f"{tag.name}: containers left after down: "
                          f"{cluster_recovery.listed(left)}", "remove them with docker rm -f")
    record.unlink(missing_ok=True)
    done = f"down on {len(found.nodes)} node(s)" if found else \
        f"{len(boxes)} container(s) found by label removed"
    run.console.result(f"{tag.name}: {done}, no container left")
    return 0


def _searched(run: Run, nodes: list[cluster.ClusterNode], hosts: str | None) -> list[str]:
    """The engines down looks on: the nodes', --hosts', or else the local one."""
    urls = [node.engine.url for node in nodes] + \
        [node.url for node in (engines.parse_hosts(hosts) if hosts else [])]
    return urls or [cluster.local_engine(dict(run.settings.environ)).url]


def _not_reached(run: Run, reached: cluster_recovery.Reached,
                 nodes: list[cluster.ClusterNode], remedy: str) -> None:
    """One line for each engine that did not answer (naming its nodes), then exit 6."""
    if not reached.missed:
        return
    for url, why in reached.missed.items():
        named = [node.describe() for node in nodes if node.engine.url == url] or [url]
        run.console.notice(f"{', '.join(named)}: not reached: {why}")
    raise SmokeError(f"{len(reached.missed)} engine(s) did not answer: "
                     f"{', '.join(reached.missed)}", remedy)


def status(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """Each node's container and state (on stdout), and whether the head answers; 0 when
    all run and the head is healthy, else 6 (a node whose engine does not answer too)."""
    found = cluster.load(run.config, tag.name)
    reached = cluster_recovery.reach(node.engine.url for node in found.nodes)
    running = 0
    for node in found.nodes:
        state = _state(reached, found, node)
        running += state == "running"
        print(f"rank {node.rank}  {node.describe()}  {node.container(tag.name)}: {state}")
    healthy = _healthy(found.api)
    print(f"{tag.name}: {running}/{len(found.nodes)} node(s) running; head "
          f"{found.api}/health: {'200' if healthy else 'no answer'}", flush=True)
    return 0 if healthy and running == len(found.nodes) else SmokeError.exit_code


def _state(reached: cluster_recovery.Reached, found: cluster.Cluster,
           node: cluster.ClusterNode) -> str:
    if node.engine.url in reached.missed:
        return f"not reached ({reached.missed[node.engine.url]})"
    box = cluster.box_of(reached.clients[node.engine.url], found, node)
    if box is None:
        return "absent"
    return f"exited ({box.attrs['State'].get('ExitCode')})" if box.status == "exited" \
        else box.status


def _healthy(api: str) -> bool:
    import requests

    try:
        return serve_client.Server(api, timeout=5).get("/health").status_code == 200
    except requests.RequestException:
        return False


def logs(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """The last lines of each node's log (or one rank's), each under a line naming its node,
    on stdout; a node whose engine does not answer is named (exit 6)."""
    found = cluster.load(run.config, tag.name)
    wanted = _ranked(found, args.rank)
    reached = cluster_recovery.reach(node.engine.url for node in wanted)
    for node in wanted:
        print(f"== rank {node.rank}, {node.describe()}: {node.container(tag.name)}")
        client = reached.clients.get(node.engine.url)
        box = cluster.box_of(client, found, node) if client else None
        print(box.logs(tail=args.tail).decode(errors="replace").rstrip() if box else
              "(no container)" if client else "(its engine does not answer)", flush=True)
    _not_reached(run, reached, wanted, "the other nodes' logs are above; bring those engines "
                 "back to read theirs")
    return 0


def _ranked(found: cluster.Cluster, rank: int | None) -> list[cluster.ClusterNode]:
    """The cluster's nodes, or the one of that rank (a rank it lacks: exit 2)."""
    wanted = [node for node in found.nodes if rank is None or node.rank == rank]
    if not wanted:
        raise ConfigError(f"{found.tag} has no rank {rank}", f"ranks: 0 to {len(found.nodes) - 1}")
    return wanted
