"""A cluster's nodes as they answer, and what an up that ended early leaves.

down, status and logs act on every node whose engine answers and name each one that does
not (one unreachable node no longer stops them all). A tag's containers are found by up's
label on the engines, so down finds them without up's record too. One up of a tag runs at a
time (a lock beside the record). An up stopped by Ctrl-C removes this run's own short-lived
containers (the preflight's, the privileged one that drops the page caches) and names the
tag's containers left running, with the command that removes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sparkbake import filelock
from sparkbake.config.versions import Config
from sparkbake.errors import ConfigError, EngineError, Interrupted
from sparkbake.nodes import cluster
from sparkbake.nodes.engines import Node, connect
from sparkbake.oci.docker_engine import RUN_LABEL, Client, run_label
from sparkbake.oci.engine_client import Container

__all__ = ["Reached", "interrupted", "labelled", "listed", "one_up", "reach"]


@dataclass(frozen=True)
class Reached:
    """Some nodes' engines: a client of each one that answers, and why for each that does
    not (by URL)."""

    clients: dict[str, Client]
    missed: dict[str, str]


def reach(urls: Iterable[str]) -> Reached:
    """Each engine tried once; one that does not answer is noted, not fatal."""
    clients: dict[str, Client] = {}
    missed: dict[str, str] = {}
    for url in dict.fromkeys(urls):
        try:
            clients[url] = connect(Node(url))
        except EngineError as exc:
            missed[url] = exc.message.removeprefix(f"node {url}: ")
    return Reached(clients, missed)


def labelled(reached: Reached, tag: str, rank: int | None = None
             ) -> list[tuple[str, Container]]:
    """The tag's containers on the engines that answer, by up's label (one rank's only, with
    rank), the head first: each with its engine's URL."""
    found = [(url, box) for url, client in reached.clients.items()
             for box in cluster.containers_of(client, tag)
             if rank is None or box.labels.get(cluster.RANK_LABEL) == str(rank)]
    return sorted(found, key=lambda pair: _rank_of(pair[1]))


def listed(found: list[tuple[str, Container]]) -> str:
    return ", ".join(f"{box.name} on {url}" for url, box in found)


def _rank_of(box: Container) -> int:
    rank = box.labels.get(cluster.RANK_LABEL, "")
    return int(rank) if rank.isdigit() else 1 << 16


@contextlib.contextmanager
def one_up(config: Config, tag: str) -> Iterator[None]:
    """The tag's up lock for the block: a second up of the tag is refused at once (exit 2),
    naming the one that runs; waiting for it would only find the cluster up."""
    path = cluster.state_path(config, tag).with_suffix(".up.lock")
    try:
        with filelock.exclusive(path, 0, lambda _: None):
            yield
    except filelock.Busy as busy:
        raise ConfigError(f"{tag}: another up of it runs ({busy})",
                          f"let it finish, then `sparkbake status {tag}`; or stop it (an up "
                          "that was killed holds no lock)") from None


def interrupted(tag: str, urls: list[str]) -> Interrupted:
    """After Ctrl-C in up: this run's short-lived containers removed from each engine, and
    the error that names the tag's containers still there."""
    reached = reach(urls)
    for client in reached.clients.values():
        _remove_own(client)
    left = labelled(reached, tag)
    unknown = f"; not reached: {', '.join(reached.missed)}" if reached.missed else ""
    if not left:
        return Interrupted(f"{tag}: up interrupted; none of its containers runs{unknown}",
                           f"start it again: sparkbake up {tag} NODE.env ...")
    return Interrupted(f"{tag}: up interrupted; still running: {listed(left)}{unknown}",
                       f"sparkbake down {tag} removes them")


def _remove_own(client: Client) -> None:
    import docker.errors  # here: the Docker SDK is slow to import

    own = client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_label()}"})
    for box in own:
        with contextlib.suppress(docker.errors.APIError):
            box.remove(force=True)
