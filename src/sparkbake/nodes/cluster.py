"""up: a tag's image brought up on the nodes of one deployment as an operator brings it up,
from one .env per node (docs/how-to/four-sparks.md).

`up` checks the files together (check-env), then on each node's engine runs the image's own
preflight on the node's file and drops the page caches; starts the workers, each headless
(the entrypoint's doing), then the head; waits for the head's /health while watching every
node; runs the serve checks against the head and reads out each rank's KV-cache lines and,
where the tag speculates, the acceptance length. What it started is recorded in
build/clusters/TAG.json, from which down, status and logs (cluster_commands.py) find the
nodes again.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sparkbake import records
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.core.folders import Folders
from sparkbake.core.smoke_record import CheckFailed, CheckResult
from sparkbake.errors import ConfigError, EngineError, SmokeError
from sparkbake.files import atomic_write, read_json
from sparkbake.nodes import (
    cluster_files,
    envfile,
    memory_readout,
    preflight,
    serve_checks,
    serve_client,
    serve_stream,
)
from sparkbake.nodes import cluster_readout as readout
from sparkbake.nodes.engines import Node, connect
from sparkbake.oci import docker_engine
from sparkbake.oci.docker_engine import Client
from sparkbake.oci.engine_client import Container

__all__ = ["Cluster", "ClusterNode", "box_of", "clients_of", "containers_of", "docker_run",
           "load", "measurements_path", "plan_nodes", "print_commands", "start_order", "up"]

LABEL = "dev.sparkbake.cluster"
RANK_LABEL = "dev.sparkbake.rank"
JIT_CACHE = "/var/cache/jit"  # images/runtime.json's jit cache
DROP_CACHES = "sync; echo 3 > /proc/sys/vm/drop_caches"
DROP_BY_HAND = "sync; echo 3 | sudo tee /proc/sys/vm/drop_caches"
LOCAL_ENGINE = "unix:///var/run/docker.sock"
FLOOR_RULE = "host-memory-floor"


@dataclass(frozen=True)
class ClusterNode:
    """One node: its rank, its .env file and values, and the engine it runs on."""

    rank: int
    env_file: Path
    engine: Node
    env: dict[str, str] = field(hash=False)

    @property
    def role(self) -> str:
        return "head" if self.rank == 0 else f"worker {self.rank}"

    def container(self, tag: str) -> str:
        return f"sparkbake-{tag}-rank{self.rank}"

    def describe(self) -> str:
        return f"{self.role} ({self.env_file.name} on {self.engine.url})"


@dataclass(frozen=True)
class Cluster:
    """What up started: the tag, the image, the head's API and the nodes, head first."""

    tag: str
    image: str
    api: str
    nodes: tuple[ClusterNode, ...]

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "image": self.image, "api": self.api,
                "nodes": [{"rank": n.rank, "env_file": str(n.env_file), "engine": n.engine.url,
                           "container": n.container(self.tag)} for n in self.nodes]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Cluster:
        nodes = tuple(ClusterNode(int(n["rank"]), Path(n["env_file"]), Node(n["engine"]), {})
                      for n in data["nodes"])
        return Cluster(str(data["tag"]), str(data["image"]), str(data["api"]), nodes)


def local_engine(environ: dict[str, str]) -> Node:
    return Node(environ.get("DOCKER_HOST") or LOCAL_ENGINE)


def plan_nodes(files: list[Path], engines: list[Node], local: Node) -> list[ClusterNode]:
    """The nodes of the files, head first: each file's rank, and its engine (--hosts in the
    files' order; none: all on the local engine). The files' own errors are check-env's."""
    if engines and len(engines) != len(files):
        raise ConfigError(f"--hosts names {len(engines)} engine(s) for {len(files)} .env "
                          "file(s)", "name one engine per file, in the files' order")
    found = []
    for index, path in enumerate(files):
        values = envfile.read(path).values
        rank = cluster_files.rank(values)
        found.append(ClusterNode(int(rank) if rank.isdigit() else 0, path,
                                 engines[index] if engines else local, values))
    return sorted(found, key=lambda node: node.rank)


def api_url(head: ClusterNode) -> str:
    """The head's API as seen from here: its engine's host (127.0.0.1 for a local socket),
    without the engine's user and port; an IPv6 address bracketed."""
    host = urlsplit(head.engine.url).hostname
    host = "127.0.0.1" if head.engine.url.startswith("unix:") or not host else host
    return f"http://{f'[{host}]' if ':' in host else host}:{head.env.get('API_PORT') or 8000}"


def container_options(tag: Tag, node: ClusterNode, shm_size: str | None = None
                      ) -> dict[str, Any]:
    """How the node's container runs: host networking and IPC, the file's values as its
    environment (with NCCL's and gloo's names for the fabric), the model read-only, the JIT
    cache writable, the GPUs and RDMA devices where the tag and file have them. shm_size:
    an IPC namespace of its own with that much /dev/shm instead of the host's, for nodes
    that share a host (vLLM takes ranks that see one /dev/shm for one node, and their
    sockets in each container's own /tmp are then not found)."""
    env = dict(node.env)
    fabric = {"NCCL_SOCKET_IFNAME": env.get("FABRIC_IFACE"),
              "GLOO_SOCKET_IFNAME": env.get("FABRIC_IFACE"),
              "NCCL_IB_HCA": env.get("IB_HCA"), "NCCL_IB_GID_INDEX": env.get("IB_GID_INDEX")}
    env |= {name: value for name, value in fabric.items() if value and name not in env}
    volumes = {}
    if env.get("MODEL_HOST_PATH"):
        volumes[env["MODEL_HOST_PATH"]] = {"bind": serve_checks.MODEL_MOUNT, "mode": "ro"}
    if env.get("CACHE_HOST_PATH"):
        volumes[env["CACHE_HOST_PATH"]] = {"bind": JIT_CACHE, "mode": "rw"}
    options: dict[str, Any] = {
        "name": node.container(tag.name), "environment": env, "volumes": volumes,
        "network_mode": "host", "labels": {LABEL: tag.name, RANK_LABEL: str(node.rank)},
        **({"shm_size": shm_size} if shm_size else {"ipc_mode": "host"})}
    if tag.upstream.device == "cuda":
        options["device_requests"] = [dict(serve_checks.ALL_GPUS)]
    if env.get("IB_HCA"):
        options["devices"] = ["/dev/infiniband:/dev/infiniband"]
        options["ulimits"] = [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    return options


def docker_run(tag: Tag, node: ClusterNode, image: str, shm_size: str | None = None
               ) -> list[str]:
    """The `docker run` an operator types for the node: the same options as up's, the file's
    values through `--env-file` (its literal NAME=VALUE form)."""
    options = container_options(tag, node, shm_size)
    env_file = node.env_file.with_suffix(".docker-env").name
    words = ["docker", "run", "-d", "--name", options["name"], "--network", "host",
             *(["--shm-size", shm_size] if shm_size else ["--ipc", "host"])]
    words += ["--gpus", "all"] if "device_requests" in options else []
    for device in options.get("devices", []):
        words += ["--device", device, "--ulimit", "memlock=-1"]
    for name, value in options["labels"].items():
        words += ["--label", f"{name}={value}"]
    words += ["--env-file", env_file]
    for name, value in options["environment"].items():
        words += ["-e", f"{name}={value}"] if name not in node.env else []
    for host, mount in options["volumes"].items():
        words += ["-v", f"{host}:{mount['bind']}" + (":ro" if mount["mode"] == "ro" else "")]
    return [*words, image]


def start_order(nodes: list[ClusterNode]) -> list[ClusterNode]:
    """The workers first, then the head: a worker waits for the head, not the other way."""
    return [*nodes[1:], nodes[0]]


def state_path(config: Config, tag: str) -> Path:
    return Folders.of(config).build / "clusters" / f"{tag}.json"


def measurements_path(config: Config, tag: str) -> Path:
    """The non-KV shares `up` measured for the tag, per layout (memory_readout)."""
    return Folders.of(config).build / "clusters" / f"{tag}.memory.json"


def clients_of(nodes: tuple[ClusterNode, ...] | list[ClusterNode]) -> dict[str, Client]:
    clients: dict[str, Client] = {}
    for node in nodes:
        if node.engine.url not in clients:
            clients[node.engine.url] = connect(node.engine)
    return clients


def up(config: Config, tag: Tag, files: list[Path], engines: list[Node], image: str,
       timeout: float, environ: dict[str, str], shm_size: str | None = None, *,
       console: Console) -> int:
    """Bring the tag up on the files' nodes; 0 when the head serves, SmokeError (6) when a
    node stops, the head never answers or a serve check fails."""
    nodes = plan_nodes(files, engines, local_engine(environ))
    cluster = Cluster(tag.name, image, api_url(nodes[0]), tuple(nodes))
    clients = clients_of(nodes)
    _refuse_running(cluster, clients)
    for node in nodes:
        _prepare(tag, cluster, node, clients[node.engine.url], console=console)
    atomic_write(state_path(config, tag.name), json.dumps(cluster.to_json(), indent=2) + "\n")
    for node in start_order(nodes):
        _start(tag, cluster, node, clients[node.engine.url], shm_size, console=console)
    started = time.monotonic()
    _wait_healthy(cluster, clients, timeout, console=console)
    head = nodes[0]
    served = serve_checks.Served(head.env, preflight.entrypoint().serve_command(
        {**dict(tag.env), **head.env}), None)
    ready = _wait_token(cluster, served, started, timeout, console=console)
    results = _serve_checks(tag, cluster, served, console=console)
    return _read_out(config, tag, cluster, clients, served, results, ready,
                     console=console)


def print_commands(tag: Tag, files: list[Path], engines: list[Node], image: str,
                   environ: dict[str, str], shm_size: str | None = None) -> int:
    """What up runs on each node, in its order, as the commands an operator types there
    (on stdout, as check-env --print shows its command)."""
    nodes = plan_nodes(files, engines, local_engine(environ))
    print("# on every node first: " + DROP_BY_HAND)
    for node in start_order(nodes):
        env_file = node.env_file.with_suffix(".docker-env").name
        print(f"# {node.describe()}: {env_file} holds the file's values, literal\n"
              f"env -i sh -c 'set -a; . ./{node.env_file.name}; env' | grep -v '^PWD=' > "
              f"{env_file}\n{shlex.join(docker_run(tag, node, image, shm_size))}")
    print(f"# then: until curl -sf {api_url(nodes[0])}/health; do sleep 10; done", flush=True)
    return 0


def _refuse_running(cluster: Cluster, clients: dict[str, Client]) -> None:
    """No start over the tag's containers, found by label on every node's engine (with up's
    record or without it): each named, and the down that removes them all."""
    found = [f"{name} on {url}" for url, client in clients.items()
             for name in sorted(box.name for box in containers_of(client, cluster.tag))]
    if found:
        hosts = ",".join(url for url in clients if url != LOCAL_ENGINE)
        raise ConfigError(f"{cluster.tag} already has containers: {', '.join(found)}",
                          f"take them down first: sparkbake down {cluster.tag}"
                          + (f" --hosts {hosts}" if hosts else ""))


def _prepare(tag: Tag, cluster: Cluster, node: ClusterNode, client: Client, *,
             console: Console) -> None:
    """The node's image, its own preflight of the file (the node's sysctls: the host memory
    floor) and its page caches dropped, or what to run there instead."""
    if not docker_engine.image_exists(client, cluster.image):
        raise EngineError(f"{node.describe()}: {cluster.image} is not in its engine",
                          f"deploy it first: sparkbake deploy {tag.name} --hosts "
                          f"{node.engine.url}")
    mounts = container_options(tag, node)["volumes"]  # the model, as its checks read it
    with step(console, f"preflight on {node.describe()}"):
        checked = docker_engine.run_container(client, cluster.image, ["--print"],
                                              environment=node.env, volumes=mounts,
                                              network=False)
    findings = [line for line in checked.output.splitlines() if "sparkbake preflight:" in line]
    if checked.exit_code != 0:
        first = next((line for line in findings if "error" in line), checked.tail(1))
        raise ConfigError(f"{node.describe()}: the image's preflight refuses the file: "
                          f"{first.strip()}", f"sparkbake check-env {node.env_file} --tag "
                          f"{tag.name} shows every finding")
    for line in findings:
        console.notice(f"{node.role}: {line.strip()}" + (
            " (docs/how-to/four-sparks.md#start)" if FLOOR_RULE in line else ""))
    _drop_caches(cluster.image, node, client, console=console)


def _drop_caches(image: str, node: ClusterNode, client: Client, *, console: Console) -> None:
    try:
        dropped = docker_engine.run_container(client, image, ["sh", "-c", DROP_CACHES],
                                              network=False, privileged=True)
        why = None if dropped.exit_code == 0 else dropped.tail(1) or f"exit {dropped.exit_code}"
    except EngineError as exc:
        why = exc.message
    if why is None:
        console.detail(f"{node.role}: page caches dropped")
    else:
        console.notice(f"{node.role}: page caches not dropped ({why}); run "
                       f"`{DROP_BY_HAND}` on {node.engine.url} before the start")


def _start(tag: Tag, cluster: Cluster, node: ClusterNode, client: Client,
           shm_size: str | None, *, console: Console) -> Container:
    with step(console, f"start {node.describe()}"):
        return docker_engine.run_detached(client, cluster.image,
                                          **container_options(tag, node, shm_size))


def box_of(client: Client, cluster: Cluster, node: ClusterNode) -> Container | None:
    found = [box for box in containers_of(client, cluster.tag)
             if box.labels.get(RANK_LABEL) == str(node.rank)]
    return found[0] if found else None


def containers_of(client: Client, tag: str) -> list[Container]:
    return client.containers.list(all=True, filters={"label": f"{LABEL}={tag}"})


def stopped(cluster: Cluster, clients: dict[str, Client]) -> Callable[[], str | None]:
    """A probe: which node's container has stopped, its exit code and last lines, or None."""
    def why() -> str | None:
        for node in cluster.nodes:
            box = box_of(clients[node.engine.url], cluster, node)
            if box is None:
                return f"{node.describe()}: its container {node.container(cluster.tag)} is gone"
            if box.status in ("exited", "dead"):
                code = box.attrs["State"].get("ExitCode")
                log = box.logs(tail=200).decode(errors="replace")
                return (f"{node.describe()}: container {box.name} exited with {code}: "
                        f"{readout.why_stopped(log)}")
        return None
    return why


def _wait_healthy(cluster: Cluster, clients: dict[str, Client], timeout: float, *,
                  console: Console) -> None:
    server = serve_client.Server(cluster.api)
    try:
        with step(console, f"wait for {cluster.api}/health (at most {timeout:.0f} s)"):
            serve_client.check_health(server, timeout, stopped(cluster, clients))
    except CheckFailed as exc:
        gone = stopped(cluster, clients)()
        head = cluster.nodes[0]
        box = box_of(clients[head.engine.url], cluster, head)
        last = readout.last_lines(box.logs(tail=40).decode(errors="replace")) if box else ""
        message = gone or (f"{head.describe()}: {cluster.api}/health did not answer 200 "
                           f"within {timeout:.0f} s; its last lines: {last}")
        raise SmokeError(f"{cluster.tag}: {message}",
                         f"sparkbake logs {cluster.tag} shows each node's log; "
                         f"sparkbake down {cluster.tag} removes the containers") from exc


def _wait_token(cluster: Cluster, served: serve_checks.Served, started: float,
                timeout: float, *, console: Console) -> serve_stream.Ready:
    """Ready means a token: after /health, one streamed request's first token; both timed
    from the head's start (started: when up started it, the last of the nodes)."""
    healthy = time.monotonic() - started
    server = serve_client.Server(cluster.api)
    try:
        with step(console, f"wait for a streamed token from {cluster.api}"):
            serve_stream.first_token(server, serve_checks.served_name(served),
                                     max(timeout - healthy, serve_stream.LEAST))
    except CheckFailed as exc:
        raise SmokeError(f"{cluster.tag}: {cluster.nodes[0].describe()}: /health answered 200 "
                         f"but {exc}", f"sparkbake logs {cluster.tag} --rank 0 shows the "
                         f"head's log; sparkbake down {cluster.tag} removes the containers"
                         ) from exc
    ready = serve_stream.Ready(healthy, time.monotonic() - started)
    console.result(f"  {ready.describe()}")
    return ready


def _serve_checks(tag: Tag, cluster: Cluster, served: serve_checks.Served, *,
                  console: Console) -> list[CheckResult]:
    """The tag's serve checks but health (awaited already) against the head."""
    checks = serve_checks.api_checks(serve_client.Server(cluster.api), served)
    wanted = [name for name in serve_checks.names(tag) if name in checks]
    if "--enable-prefix-caching" not in served.command:
        wanted = [name for name in wanted if name != "serve-prefix-cache"]
    with step(console, f"serve checks against {cluster.api}"):
        results = serve_checks.probe(wanted, checks)
    for result in results:
        console.result(f"  {result.status:7} {result.name}: {result.detail}")
    return results


def _read_out(config: Config, tag: Tag, cluster: Cluster, clients: dict[str, Client],
              served: serve_checks.Served, results: list[CheckResult], ready: serve_stream.Ready,
              *, console: Console) -> int:
    nodes = []
    for node in cluster.nodes:
        box = box_of(clients[node.engine.url], cluster, node)
        log = box.logs().decode(errors="replace") if box else ""
        nodes.append(readout.NodeReadout(node.rank, readout.kv_cache_lines(log)))
        console.result(f"  KV cache, {nodes[-1].describe()}")
    acceptance = _acceptance(cluster, served.command)
    console.result(f"  acceptance: {acceptance}")
    memory = _memory(config, tag, cluster, nodes, console=console)
    passed = sum(result.status == "passed" for result in results)
    line = readout.verdict(cluster.tag, nodes, ready, passed, len(results), acceptance)
    record = {**cluster.to_json(), "healthy_after_s": round(ready.health_s, 1),
              "first_token_after_s": round(ready.first_token_s, 1),
              "checks": [records.to_json(r) for r in results], "acceptance": acceptance,
              "kv_cache": {str(n.rank): list(n.kv_cache) for n in nodes}, "memory": memory,
              "verdict": line}
    atomic_write(state_path(config, cluster.tag), json.dumps(record, indent=2) + "\n")
    if passed != len(results):
        raise SmokeError(line, f"sparkbake logs {cluster.tag} --rank 0 shows the head's log")
    console.result(line)
    return 0


def _memory(config: Config, tag: Tag, cluster: Cluster, nodes: list[readout.NodeReadout], *,
            console: Console) -> dict[str, Any]:
    """Each rank's KV room and the pool's tokens beside check-env's prediction for its file;
    a warning for each more than 10 % away; the record's `memory` entry."""
    ranks = []
    for node, read in zip(cluster.nodes, nodes, strict=True):
        role = "head" if node.rank == 0 else "worker"
        predicted = next((figures for figures in preflight.memory_figures(tag, node.env_file)
                          if figures["role"] == role), None)
        room, tokens = memory_readout.parse(read.kv_cache)
        ranks.append(memory_readout.RankMemory(node.rank, role, room, tokens, predicted))
        console.result(f"  memory, rank {node.rank}: {memory_readout.describe(ranks[-1])}")
    for warning in memory_readout.warnings(ranks):
        console.notice(f"  warning: {warning}")
    entry = memory_readout.memory_record(ranks, time.strftime("%Y-%m-%d"))
    memory_readout.remember(measurements_path(config, tag.name), entry)
    return entry


def _acceptance(cluster: Cluster, command: list[str]) -> str:
    if "--speculative-config" not in command:
        return "none (the tag does not speculate here)"
    length = readout.acceptance_length(serve_client.Server(cluster.api).metrics())
    return f"{length:.2f}" if length is not None else "no draft yet (send a decode bench)"


def load(config: Config, tag: str) -> Cluster:
    path = state_path(config, tag)
    if not path.is_file():
        raise ConfigError(f"no cluster of {tag} was brought up from here ({path} is missing)",
                          f"bring it up: sparkbake up {tag} NODE.env ...")
    return Cluster.from_json(read_json(path))
