"""The commands of a deployment's nodes: node-files (one .env per node from a list of
addresses), then up, down, status and logs (nodes/cluster.py)."""

from __future__ import annotations

from pathlib import Path

from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.lock import pins
from sparkbake.nodes import cluster, cluster_files, engines, node_files, sample_envs

__all__ = ["down", "logs", "status", "up", "write_node_files"]

PROC_SYS = Path("/proc/sys")  # this host's: its sysctls only ever warn

down, logs, status = cluster.down, cluster.logs, cluster.status


def write_node_files(config: Config, tag: Tag, addresses: str, interface: str | None,
                     template: Path | None, out: Path, force: bool, *, console: Console) -> int:
    """One .env per node (node_files), then check-env of them together."""
    layout = node_files.parse_addresses(addresses, interface)
    source = template or node_files.template_of(tag, sample_envs.load(config, tag).accept)
    paths = node_files.write(tag, layout, source, out, force)
    for path in paths:
        console.result(f"wrote {path}")
    return cluster_files.check_files(tag, paths, PROC_SYS, False,
                                     pins.runtime_lock_path(config, tag), console=console)


def up(config: Config, settings: Settings, tag: Tag, files: list[Path], hosts: str | None,
       image: str | None, timeout: float, show: bool, shm_size: str | None = None, *,
       console: Console) -> int:
    """check-env of the files together, then the nodes brought up (cluster.up), or with
    show, the commands that would bring them up by hand."""
    nodes = engines.parse_hosts(hosts) if hosts else []
    image = image or tag.image_ref
    if show:
        return cluster.print_commands(tag, files, nodes, image, dict(settings.environ),
                                      shm_size)
    with step(console, f"check-env of {len(files)} file(s) for {image}"):
        cluster_files.check_files(tag, files, PROC_SYS, False, pins.runtime_lock_path(config, tag),
                                  console=console, image=image)
    return cluster.up(config, tag, files, nodes, image, timeout, dict(settings.environ),
                      shm_size, console=console)
