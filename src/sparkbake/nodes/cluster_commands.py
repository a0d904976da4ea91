"""The commands of a deployment's nodes: node-files (one .env per node from a list of
addresses), then up, down, status and logs (nodes/cluster.py). Each takes the command's
arguments, the run and the tag (command_table.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sparkbake.config.versions import Tag
from sparkbake.console.tools import step
from sparkbake.lock import pins
from sparkbake.nodes import cluster, cluster_files, engines, node_files, sample_envs
from sparkbake.run import Run

__all__ = ["down", "logs", "status", "up", "write_node_files"]

PROC_SYS = Path("/proc/sys")  # this host's: its sysctls only ever warn

def write_node_files(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """One .env per node (node_files), then check-env of them together."""
    layout = node_files.parse_addresses(args.nodes, args.iface)
    source = args.template or node_files.template_of(tag,
                                                     sample_envs.load(run.config, tag).accept)
    paths = node_files.write(tag, layout, source, args.out, args.force)
    for path in paths:
        run.console.result(f"wrote {path}")
    return cluster_files.check_files(tag, paths, PROC_SYS, False,
                                     pins.runtime_lock_path(run.config, tag), console=run.console)


def up(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """check-env of the files together, then the nodes brought up (cluster.up), or with
    --print, the commands that would bring them up by hand."""
    files: list[Path] = args.env_files
    nodes = engines.parse_hosts(args.hosts) if args.hosts else []
    image = args.image or tag.image_ref
    environ = dict(run.settings.environ)
    if args.show:
        return cluster.print_commands(tag, files, nodes, image, environ, args.shm_size)
    with step(run.console, f"check-env of {len(files)} file(s) for {image}"):
        cluster_files.check_files(tag, files, PROC_SYS, False,
                                  pins.runtime_lock_path(run.config, tag), console=run.console,
                                  image=image)
    return cluster.up(run.config, tag, files, nodes, image, args.timeout, environ,
                      args.shm_size, console=run.console)


def down(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    return cluster.down(run.config, tag.name, console=run.console)


def status(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    return cluster.status(run.config, tag.name, console=run.console)


def logs(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    return cluster.logs(run.config, tag.name, args.rank, args.tail, console=run.console)
