"""The node list: a deployment's site values in one YAML file (node-files --nodes-file,
up --nodes-file), read once into frozen dataclasses.

    topology: ring              # ring | switch | pair (optional)
    defaults:                   # what every node shares; a node's own key wins
      iface: enp1s0f0np0
      ib_hca: rocep1s0f0
      ib_gid_index: auto        # a number, or auto: the entrypoint finds iface's RoCE v2 GID
      model_host_path: /srv/models/models--deepseek-ai--DeepSeek-V4-Flash
      cache_host_path: /srv/jit-cache
    nodes:                      # in rank order: the head first
      - {address: 192.168.100.11, engine: ssh://spark-1}
      - {address: 192.168.100.12, engine: ssh://spark-2}

A wrong key (with a "did you mean"), a missing field or a bad value is one line with the
file and line (config.yamlsource).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from sparkbake.config import yamlsource
from sparkbake.config.yamlsource import LocatedDict, LocatedList, Where, did_you_mean
from sparkbake.errors import ConfigError, UsageError
from sparkbake.nodes import cluster_files, engines, envfile

__all__ = ["Layout", "SiteNode", "Topology", "canonical_address", "engines_for", "engines_given",
           "load"]

Topology = Literal["ring", "switch", "pair"]
TOPOLOGIES: tuple[str, ...] = get_args(Topology)
NODE_KEYS = ("address", "iface", "ib_hca", "ib_gid_index", "model_host_path",
             "cache_host_path", "engine")
SHARED_KEYS = NODE_KEYS[1:]  # an address is a node's own
INTERFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")  # a Linux interface name (IFNAMSIZ - 1)
HCA = re.compile(r"[=^]?[A-Za-z0-9_.-]+(:[0-9]+)?(,[A-Za-z0-9_.-]+(:[0-9]+)?)*")  # NCCL_IB_HCA
HOST_PATH = re.compile(r"/[^:\s\0]*")  # absolute; a ':' would split docker's -v HOST:MOUNT
MANUAL = "docs/how-to/four-sparks.md (The node list)"
GID_INDEX = re.compile(r"auto|[0-9]{1,3}")
CHECKS: dict[str, tuple[re.Pattern[str], str]] = {
    "iface": (INTERFACE, "a network interface name (ip -br link lists them)"),
    "ib_hca": (HCA, "an RDMA device name, as NCCL_IB_HCA takes it (e.g. rocep1s0f0)"),
    "ib_gid_index": (GID_INDEX, "a GID index (0-255) or auto"),
    "model_host_path": (HOST_PATH, "an absolute path without ':' or spaces"),
    "cache_host_path": (HOST_PATH, "an absolute path without ':' or spaces"),
}


@dataclass(frozen=True)
class SiteNode:
    """One node's site values; None: not set (the template's value stays)."""

    address: str  # its fabric address, canonical (canonical_address)
    iface: str | None = None
    ib_hca: str | None = None
    ib_gid_index: str | None = None  # a number, or "auto"
    model_host_path: str | None = None
    cache_host_path: str | None = None
    engine: engines.Node | None = None
    where: str = ""  # file:line of its entry, for the errors that name it


@dataclass(frozen=True)
class Layout:
    """The nodes, head first, and the fabric between them."""

    nodes: tuple[SiteNode, ...]
    topology: Topology | None = None

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(node.address for node in self.nodes)

    def engines(self) -> list[engines.Node]:
        """Each node's engine, in rank order; [] when the list names none (the local one)."""
        return [node.engine for node in self.nodes if node.engine is not None]


def canonical_address(text: str) -> str:
    """A node's fabric address in one spelling (an IPv4-mapped IPv6 address as IPv4);
    ValueError saying why it cannot be a node's."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for flaw, why in ((address.is_unspecified, "unspecified (any address)"),
                      (address.is_multicast, "a multicast address"),
                      (address == ipaddress.IPv4Address("255.255.255.255"), "the broadcast "
                       "address")):
        if flaw:
            raise ValueError(f"{text!r} is {why}, not one node's address")
    return str(address)


def load(path: Path) -> Layout:
    """The node list at path; ConfigError (exit 2) naming file:line of what is wrong."""
    if not path.is_file():
        raise UsageError(f"--nodes-file {path}: no such file", "give the node list's path")
    where = Where(path, MANUAL)
    top = where.mapping(yamlsource.read(path), "the node list", ("topology", "defaults",
                                                                  "nodes"), ("nodes",))
    defaults = where.mapping(top.get("defaults", LocatedDict(top.line)), "defaults",
                             SHARED_KEYS, parent=top, key="defaults")
    items = top["nodes"]
    if not isinstance(items, LocatedList) or not items:
        raise ConfigError(f"{where(top, 'nodes')}: nodes must be a list of the nodes, the "
                          "head first", "write nodes: [{address: 10.0.0.1}, ...]")
    nodes = tuple(_node(where, items, index, defaults) for index in range(len(items)))
    _distinct(nodes)
    _same_engines(nodes)
    return Layout(nodes, _topology(where, top, len(nodes)))


def _node(where: Where, items: LocatedList, index: int, defaults: LocatedDict) -> SiteNode:
    spot = f"{where.path}:{items.item_lines[index]}"
    entry = items[index]
    if not isinstance(entry, LocatedDict):
        raise ConfigError(f"{spot}: node {index} must be a mapping, not "
                          f"{yamlsource.kind_of(entry)}", "write - {address: 10.0.0.1, ...}")
    where.mapping(entry, f"node {index}", NODE_KEYS, ("address",))
    values = {key: _value(where, entry if key in entry else defaults, key)
              for key in NODE_KEYS if key in entry or key in defaults}
    try:
        values["address"] = canonical_address(values["address"])
    except ValueError as exc:
        raise ConfigError(f"{where(entry, 'address')}: address {exc}",
                          "give the node's fabric address") from None
    engine = values.pop("engine", None)
    return SiteNode(**values, where=spot, engine=None if engine is None else _engine(
        where, entry if "engine" in entry else defaults, engine))


def _value(where: Where, mapping: LocatedDict, key: str) -> str:
    raw = mapping[key]
    value = str(raw) if key == "ib_gid_index" and type(raw) is int else raw
    if not isinstance(value, str):
        where.string(mapping, key)  # names the key's line and what it is instead
    pattern, hint = CHECKS.get(key, (None, ""))
    if pattern is not None and not pattern.fullmatch(value):
        raise ConfigError(f"{where(mapping, key)}: {key} {value!r} is not {hint}",
                          f"write {hint}")
    if key == "ib_gid_index" and value != "auto" and int(value) > 255:
        raise ConfigError(f"{where(mapping, key)}: ib_gid_index {value} is above 255",
                          "write a GID index (0-255) or auto")
    return value


def _engine(where: Where, mapping: LocatedDict, text: str) -> engines.Node:
    """The node's Docker engine; a bare HOST means ssh://HOST, as --hosts reads it."""
    try:
        if "," in text:
            raise UsageError(text, "one engine a node")
        return engines.parse_hosts(text)[0]
    except UsageError:
        raise ConfigError(f"{where(mapping, 'engine')}: engine {text!r} is not one Docker "
                          "host URL (ssh://, tcp://, unix://)",
                          "write ssh://[USER@]HOST[:PORT], tcp://HOST[:PORT] or "
                          "unix:///PATH") from None


def _distinct(nodes: tuple[SiteNode, ...]) -> None:
    seen: dict[str, SiteNode] = {}
    for node in nodes:
        if node.address in seen:
            raise ConfigError(f"{node.where}: address {node.address} is also the address of "
                              f"{seen[node.address].where}", "each node has its own address")
        seen[node.address] = node


def _same_engines(nodes: tuple[SiteNode, ...]) -> None:
    """Every node names its engine, or none does (all on the local engine)."""
    lacking = [node for node in nodes if node.engine is None]
    if lacking and len(lacking) < len(nodes):
        raise ConfigError(f"{lacking[0].where}: this node names no engine, and others do",
                          "give every node its engine: (ssh://HOST, tcp://HOST:PORT), or "
                          "none for all on this machine's")


def _topology(where: Where, top: LocatedDict, count: int) -> Topology | None:
    if "topology" not in top:
        return None
    value: Any = top["topology"]
    if value not in TOPOLOGIES:
        raise ConfigError(f"{where(top, 'topology')}: topology {value!r} is not one of "
                          f"{', '.join(TOPOLOGIES)}{did_you_mean(str(value), TOPOLOGIES)}",
                          "ring: nodes cabled in a ring; switch: through a switch; pair: two "
                          "nodes cabled to each other")
    if (value == "pair" and count != 2) or (value == "ring" and count < 2):
        raise ConfigError(f"{where(top, 'topology')}: topology {value} of {count} node(s)",
                          "a pair is two nodes; a ring, two or more")
    topology: Topology = value
    return topology


def engines_given(nodes_file: Path | None, hosts: str | None,
                  files: list[Path]) -> list[engines.Node]:
    """Each file's engine as a command was given it (up, check-nodes): --hosts in the files'
    order, or by rank from --nodes-file; [] for neither (all on the local engine)."""
    if nodes_file is None:
        return engines.parse_hosts(hosts) if hosts else []
    if hosts:
        raise UsageError("give --hosts or --nodes-file, not both",
                         "the node list names each node's engine")
    return engines_for(load(nodes_file), files)


def engines_for(layout: Layout, files: list[Path]) -> list[engines.Node]:
    """Each file's engine, in the files' order: the list's node of the file's rank, whose
    address the file's VLLM_HOST_IP must be; [] when the list names no engine."""
    if len(files) != len(layout.nodes):
        raise ConfigError(f"{layout.nodes[0].where}: the node list has {len(layout.nodes)} "
                          f"node(s), and {len(files)} .env file(s) were given",
                          "give every node's file, as node-files wrote them")
    found = []
    for path in files:
        file = envfile.read(path)
        rank = cluster_files.rank(file.values)
        node = layout.nodes[int(rank)] if rank.isdigit() and int(rank) < len(files) else None
        if node is None:
            continue  # a rank no node has: check-env of the files together names it
        given = file.values.get("VLLM_HOST_IP", "")
        if _same_host(given, node.address):
            found.append(node.engine)
            continue
        raise ConfigError(f"{file.where('VLLM_HOST_IP')}: VLLM_HOST_IP={given}, but "
                          f"{node.where} gives rank {rank} the address {node.address}",
                          "write the files again from the list (node-files --nodes-file)")
    return [engine for engine in found if engine is not None] if layout.engines() else []


def _same_host(given: str, address: str) -> bool:
    try:
        return canonical_address(given) == address
    except ValueError:
        return False
