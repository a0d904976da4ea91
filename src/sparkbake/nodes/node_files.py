"""node-files: one .env per node of a deployment, written from one list of node addresses.

The first address is the head's (rank 0), the others the workers' in order. Each file is the
template (the tag's smoke suite's rank-0 sample, or --from FILE) with the settings that say
which node it is set in place: NODE_RANK, VLLM_HOST_IP, MASTER_ADDR (the head's address),
NNODES and TP_SIZE (one GPU a node), IMAGE (the tag's) and, given --iface, FABRIC_IFACE.
Everything else stays the template's, comments included, so the files differ only where the
nodes do; they are then checked together (cluster_files).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkbake.config.versions import Tag
from sparkbake.errors import ConfigError, UsageError
from sparkbake.files import atomic_write
from sparkbake.nodes import cluster_files, envfile
from sparkbake.nodes.sample_envs import Sample

__all__ = ["Layout", "file_name", "parse_addresses", "render", "template_of", "write"]

INTERFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")  # a Linux interface name (IFNAMSIZ - 1)


@dataclass(frozen=True)
class Layout:
    """The nodes: their fabric addresses, head first, and the fabric interface (or None)."""

    addresses: tuple[str, ...]
    interface: str | None = None

    def settings(self, rank: int, image: str) -> dict[str, str]:
        """What makes node `rank`'s file its own."""
        count = str(len(self.addresses))
        values = {"IMAGE": image, "NNODES": count, "TP_SIZE": count, "NODE_RANK": str(rank),
                  "MASTER_ADDR": self.addresses[0], "VLLM_HOST_IP": self.addresses[rank]}
        return values | ({"FABRIC_IFACE": self.interface} if self.interface else {})


def parse_addresses(text: str, interface: str | None) -> Layout:
    """--nodes A,B,...: IP addresses, head first, each once; UsageError (exit 2) otherwise."""
    addresses = tuple(item.strip() for item in text.split(",") if item.strip())
    if not addresses:
        raise UsageError("--nodes names no address", "e.g. --nodes 192.168.100.11,192.168.100.12")
    for address in addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise UsageError(f"--nodes: {address!r} is not an IP address",
                             "give each node's fabric address, the head's first") from None
    twice = sorted({a for a in addresses if addresses.count(a) > 1})
    if twice:
        raise UsageError(f"--nodes names {', '.join(twice)} more than once",
                         "each node has its own fabric address")
    if interface is not None and not INTERFACE.fullmatch(interface):
        raise UsageError(f"--iface {interface!r} is not a network interface name",
                         "e.g. --iface enp1s0f0np0 (ip -br link lists them)")
    return Layout(addresses, interface)


def file_name(rank: int) -> str:
    return "head.env" if rank == 0 else f"worker-{rank}.env"


def template_of(tag: Tag, samples: Sequence[Sample]) -> Path:
    """The suite's accept sample of rank 0 (the head's), the one the files are made from."""
    for sample in samples:
        if cluster_files.rank(sample.env) == "0" and sample.env.get("MODEL"):
            return sample.path
    raise ConfigError(f"tag {tag.name}: its smoke suite {tag.smoke!r} has no head's sample "
                      ".env to start from", "give one with --from FILE")


def render(template: str, settings: dict[str, str], header: str) -> str:
    """The template with each setting's value put in place (its last assignment, as the
    shell reads it), the ones it lacks added at the end, under header."""
    lines = template.splitlines()
    missing = dict(settings)
    for index in reversed(range(len(lines))):
        for name in list(missing):
            replaced = _assign(lines[index], name, missing[name])
            if replaced is not None:
                lines[index] = replaced
                del missing[name]
    added = [f"{name}={value}" for name, value in missing.items()]
    return "\n".join([header, *lines, *added]) + "\n"


def _assign(line: str, name: str, value: str) -> str | None:
    """line with name's assignment given value, or None when line assigns no name."""
    if line.lstrip().startswith("#"):
        return None
    pattern = re.compile(rf"(^|\s)((?:export\s+)?{name}=)"
                         r"(\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s#]*)")
    matches = list(pattern.finditer(line))
    if not matches:
        return None
    last = matches[-1]
    return line[:last.start(3)] + value + line[last.end(3):]


def write(tag: Tag, layout: Layout, template: Path, out: Path, force: bool) -> list[Path]:
    """One file per node in out; an existing file is kept unless force (ConfigError)."""
    paths = [out / file_name(rank) for rank in range(len(layout.addresses))]
    there = [str(p) for p in paths if p.exists()]
    if there and not force:
        raise ConfigError(f"{', '.join(there)} already exist(s)",
                          "choose another --out, or pass --force to write over them")
    try:
        text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {template}: {exc}", "give a node's .env with --from") \
            from exc
    envfile.parse(text, template)  # its errors name the template's line
    for rank, path in enumerate(paths):
        header = (f"# Node {rank} of {len(paths)} ({'head' if rank == 0 else 'worker'}) of "
                  f"{tag.name}: `sparkbake node-files` from {template.name}.")
        atomic_write(path, render(text, layout.settings(rank, tag.image_ref), header))
    return paths
