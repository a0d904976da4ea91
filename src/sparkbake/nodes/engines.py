"""The nodes a release goes to: each a Docker engine named by its host URL, as DOCKER_HOST
names one (ssh://, tcp://, unix://), and the client that reaches it.

ssh:// goes through the OpenSSH client (the docker SDK's `use_ssh_client`), so the user's
~/.ssh/config, keys and agent apply; the node runs `docker system dial-stdio`.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from sparkbake.errors import EngineError, UsageError
from sparkbake.oci.docker_engine import Client

__all__ = ["Node", "connect", "parse_hosts"]

SCHEMES = ("ssh", "tcp", "unix")
NETWORK_HOST = r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
SSH_HOST = re.compile(rf"(?:[A-Za-z0-9_.-]+@)?{NETWORK_HOST}")
TCP_HOST = re.compile(NETWORK_HOST)
BARE_HOST = re.compile(r"(?:[A-Za-z0-9_.-]+@)?[A-Za-z0-9_.-]+")  # no port: tcp or ssh?
HOSTS_USAGE = "e.g. --hosts ssh://spark-1,ssh://admin@spark-2:2222,tcp://10.0.0.3:2375"
PING_TIMEOUT = 20  # seconds for a node to answer at all
TIMEOUT = 600  # seconds of silence allowed in a pull, a load, a smoke run


@dataclass(frozen=True)
class Node:
    """One node: the Docker host URL of its engine."""

    url: str

    @property
    def slug(self) -> str:
        """The URL as a file name: `ssh://root@spark-1` -> `root_spark-1`."""
        return re.sub(r"[^A-Za-z0-9.-]+", "_", self.url.split("://", 1)[1]).strip("_")


def parse_hosts(text: str) -> list[Node]:
    """--hosts: comma-separated Docker host URLs; a bare `[USER@]HOST` means ssh://."""
    nodes = [Node(_host_url(item.strip())) for item in text.split(",") if item.strip()]
    if not nodes:
        raise UsageError("--hosts names no node", HOSTS_USAGE)
    twice = sorted({n.url for n in nodes if nodes.count(n) > 1})
    if twice:
        raise UsageError(f"--hosts names {', '.join(twice)} more than once", "name each once")
    return nodes


def _host_url(item: str) -> str:
    scheme, sep, rest = item.partition("://")
    if not sep and BARE_HOST.fullmatch(item):
        return f"ssh://{item}"
    if scheme not in SCHEMES:
        raise UsageError(f"--hosts: {item!r} is not a Docker host URL (ssh://, tcp://, "
                         "unix://)", HOSTS_USAGE)
    valid = {"ssh": SSH_HOST.fullmatch(rest) is not None,
             "tcp": TCP_HOST.fullmatch(rest) is not None,
             "unix": rest.startswith("/") and len(rest) > 1}[scheme]
    if not valid:
        raise UsageError(f"--hosts: {item!r} is not a {scheme}:// address",
                         "unix:///ABSOLUTE/PATH, ssh://[USER@]HOST[:PORT], tcp://HOST[:PORT]")
    return item


def connect(node: Node) -> Client:
    """A client of the node's engine, checked with a ping; EngineError (8) naming the node."""
    import docker  # here: the Docker SDK is slow to import and only deploy needs a node
    import docker.errors
    import requests

    def client(timeout: int) -> Client:
        made: Client = docker.DockerClient(base_url=node.url, timeout=timeout,
                                           use_ssh_client=node.url.startswith("ssh://"))
        return made
    try:
        with contextlib.closing(client(PING_TIMEOUT)) as probe:  # fail fast
            probe.ping()
        return client(TIMEOUT)  # the one that waits for pulls, loads and smoke runs
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise EngineError(f"node {node.url}: no Docker engine answers ({reason})",
                          _reach_remedy(node)) from exc


def _reach_remedy(node: Node) -> str:
    if node.url.startswith("ssh://"):
        host = node.url[len("ssh://"):]
        port = re.search(r":([0-9]+)$", host)
        target = f"-p {port[1]} {host[:port.start()]}" if port else host
        return f"check that `ssh {target} docker info` works (ssh keys, host up, docker CLI there)"
    return f"check that the node is up and its engine listens at {node.url}"
