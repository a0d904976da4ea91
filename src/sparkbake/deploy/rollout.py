"""deploy: a published release onto the nodes, each a Docker engine (ssh://, tcp://, unix://).

On each node the release's digest is pulled from its registry; when the node cannot pull it
(no registry it reaches), or with --stream, the image is streamed from the local engine
instead (`docker save` of the image ID into the node's `docker load`). The node's image ID
must be the release record's; the published names are tagged there, and the common smoke
checks run on the node (checks.run with the node's client; its record goes beside the
report, not over the local one). Each deploy leaves a report in build/deploys/, with the
bytes each node pulled (the layers its engine did not have) or was streamed.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkbake import records
from sparkbake.attest.image_identity import SignedImage
from sparkbake.config.platforms import of_machine
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.core.folders import Folders
from sparkbake.core.smoke_record import SmokeReport
from sparkbake.deploy import node_image
from sparkbake.deploy.node_image import check_image_id
from sparkbake.deploy.report import (
    DeployReport,
    DeployResult,
    HostReport,
    NodeEngine,
    NodeSmoke,
    NodeTransfer,
)
from sparkbake.errors import EngineError, FatalError, PublishError, SmokeError
from sparkbake.files import atomic_write
from sparkbake.nodes.engines import Node, connect
from sparkbake.oci import docker_engine, transfer
from sparkbake.oci.docker_engine import Client, image_exists, stream_errors
from sparkbake.oci.registry_access import split_repository
from sparkbake.oci.registry_login import registry_login
from sparkbake.planning import Plan
from sparkbake.publish import releases
from sparkbake.publish.record import Release
from sparkbake.smoke import checks

__all__ = ["Job", "check_image_id", "deploy"]


@dataclass(frozen=True)
class Job:
    """One deploy: the tag and its release, how to smoke it, how the image may travel."""

    config: Config
    plan: Plan
    facts: Callable[[], checks.Facts]  # the host's facts of the tag (patched tree), for smoke
    options: checks.Options
    release: Release
    stream: bool
    local: Callable[[], Client]  # the local engine, connected when first needed
    folder: Path  # build/deploys/<tag>-<time>/: per node, its smoke record and log
    signed: tuple[SignedImage, ...] = ()  # --require-signature: what the signed manifest names


def deploy(config: Config, plan: Plan, nodes: list[Node], facts: Callable[[], checks.Facts],
           options: checks.Options, *, stream: bool = False,
           release: Release | None = None, console: Console, settings: Settings,
           signed: tuple[SignedImage, ...] = ()) -> DeployReport:
    """Put the tag's release (or the one given: a platform of a multi-platform release,
    pulled by its index digest) on every node, verify it and smoke it there, one node after
    the other (stopping at the first failure); write and return the report. facts is
    called once, when the first node is smoked."""
    checks.check_options(options)
    release = release or _release(config, plan, settings=settings)
    clients = {node: connect(node) for node in nodes}  # every node answers before any work
    started = datetime.now(UTC)
    folder = Folders.of(config).deploys / f"{plan.tag.name}-{started:%Y%m%dT%H%M%S.%fZ}"
    job = Job(config, plan, functools.cache(facts), options, release, stream,
              functools.cache(functools.partial(docker_engine.connect, settings)), folder,
              signed)
    hosts = {node: HostReport(node.url, "not attempted") for node in nodes}
    result: DeployResult = "failed"
    try:
        for node in nodes:
            _deploy_node(job, node, clients[node], hosts, console=console, settings=settings)
        result = "deployed"
    finally:
        for client in clients.values():
            client.close()
        report = DeployReport(
            tag=plan.tag.name, digest=release.digest, image_id=release.image_id,
            pinned=release.pinned, stream=stream, gpu=options.gpu, result=result,
            started=started.isoformat(timespec="seconds"), hosts=tuple(hosts.values()),
            finished=datetime.now(UTC).isoformat(timespec="seconds"))
        path = folder.with_name(f"{folder.name}.json")
        atomic_write(path, json.dumps(records.to_json(report), indent=2) + "\n")
        console.notice(f"deploy report: {path}")
    return replace(report, report=str(path))


def _release(config: Config, plan: Plan, *, settings: Settings) -> Release:
    """The tag's release record; it must be of what versions.yaml describes now (the smoke
    checks on the nodes compare the image with that)."""
    record = releases.read_record(Folders.of(config).releases, plan.tag.name, settings=settings)
    if record.inputs != plan.inputs or not record.image_id:
        raise PublishError(f"the release of {plan.tag.name} (inputs "
                           f"{record.inputs[:12]}) is not the image versions.yaml "
                           f"now describes (inputs {plan.inputs[:12]})",
                           f"publish it again (`{settings.command('publish', plan.tag.name)}`), "
                           "or deploy "
                           "from the checkout it was published from")
    return record


def _deploy_node(job: Job, node: Node, client: Client, hosts: dict[Node, HostReport], *,
                 console: Console, settings: Settings) -> None:
    """Transfer, verify, tag, smoke; hosts[node] records the steps done, also when one fails."""
    started = time.monotonic()
    host = HostReport(node.url, "failed")
    try:
        host = replace(host, engine=_engine(client, node, job.plan))
        moved = _transfer(job, node, client, console=console, settings=settings)
        host = replace(host, transfer=moved)
        found, identity = node_image.tag_and_verify(
            job.release, job.plan.tag.image_ref, job.signed, node, client,
            moved.method == "pull", console=console)
        host = replace(host, image_id=found, identity=identity)
        if moved.method == "pull":
            host = replace(host, repo_digest=node_image.check_repo_digest(job.release, node,
                                                                          client))
        beside = _smoke_config(job, node)
        record = checks.results_paths(beside, job.plan)[0]
        try:
            _smoke(job, node, client, beside, console=console, settings=settings)
        except SmokeError:
            host = replace(host, smoke=_smoke_summary(record))
            raise
        host = replace(host, smoke=_smoke_summary(record), result="deployed")
    except FatalError as exc:
        host = replace(host, error=str(exc))
        raise
    finally:
        hosts[node] = replace(host, seconds=round(time.monotonic() - started, 1))


def _engine(client: Client, node: Node, plan: Plan) -> NodeEngine:
    info: dict[str, Any] = client.info()
    arch = of_machine(str(info.get("Architecture"))).architecture
    if arch != plan.tag.platform.architecture:
        raise EngineError(f"node {node.url} is {info.get('OSType')}/{arch}, the image of "
                          f"{plan.tag.name} is {plan.tag.platform}",
                          "deploy to nodes of the tag's platform")
    return NodeEngine(info.get("Name"), info.get("ServerVersion"), arch,
                      "nvidia" in (info.get("Runtimes") or {}))


def _transfer(job: Job, node: Node, client: Client, *, console: Console,
              settings: Settings) -> NodeTransfer:
    """How the image got onto the node: present, pull, or stream (with why pull failed),
    and the bytes that travelled to it."""
    if image_exists(client, job.release.image_id):
        had = transfer.Pulled((), tuple(_layer_sizes(job.release).items()))
        console.notice(had.line(node.url, image=job.release.image_id))
        return NodeTransfer("present", had.record())
    if job.stream:
        return NodeTransfer("stream", _stream(job, node, client, console=console))
    try:
        pulled = _pull(client, node, job.release.pinned, _layer_sizes(job.release),
                       console=console, settings=settings)
    except PublishError as exc:
        console.notice(f"deploy: {exc.message}; streaming it from the local engine instead")
        return NodeTransfer("stream", _stream(job, node, client, console=console),
                            pull_failed=exc.message)
    console.notice(pulled.line(node.url))
    return NodeTransfer("pull", pulled.record())


def _layer_sizes(release: Release) -> dict[str, int]:
    """The release's layer sizes by pull progress id: its blobs but the config (none in a
    record from before publish counted its blobs: then the pull's own progress gives them)."""
    blobs = (release.transfer.get("blobs") if release.transfer else None) or []
    return transfer.progress_ids(b for b in blobs if b.get("digest") != release.image_id)


def _pull(client: Client, node: Node, ref: str, sizes: dict[str, int], *, console: Console,
          settings: Settings) -> transfer.Pulled:
    """`docker pull ref` on the node; which layers it fetched, from its progress."""
    import docker.errors  # here, as in each function that needs it: the SDK is slow to import

    remedy = "check that the node reaches the registry (and is logged in), or use --stream"
    progress: list[dict[str, Any]] = []
    with step(console, f"pull {ref} on {node.url}"):
        try:
            pulling = client.api.pull(ref, stream=True, decode=True,
                                      auth_config=_auth(ref, settings=settings))
            for chunk, message in stream_errors(pulling):
                if message:
                    raise PublishError(f"node {node.url} cannot pull {ref}: "
                                       f"{message.strip()[:300]}", remedy)
                progress.append(chunk)
        except docker.errors.APIError as exc:
            raise PublishError(f"node {node.url} cannot pull {ref}: "
                               f"{str(exc.explanation or exc)[:300]}", remedy) from exc
    return transfer.pulled_from_progress(progress, sizes)


def _auth(ref: str, *, settings: Settings) -> dict[str, str] | None:
    """The login Docker's client here keeps for the registry of ref, sent with the pull as
    `docker pull` sends it (the node's engine trusts the registry by its own certs.d)."""
    host = split_repository(ref)[0] or "docker.io"
    login = registry_login(host, settings)
    if login is None:
        return None
    if login.identity_token:
        return {"identitytoken": login.secret, "serveraddress": host}
    return {"username": login.username, "password": login.secret, "serveraddress": host}


def _stream(job: Job, node: Node, client: Client, *, console: Console) -> dict[str, dict[str, int]]:
    """`docker save IMAGE_ID` here, piped into `docker load` on the node; the bytes sent
    (the whole image: load has no way to skip the layers the node has)."""
    import docker.errors
    import requests

    image_id, local = job.release.image_id, job.local()
    if not image_exists(local, image_id):
        raise PublishError(f"the local engine has no image {image_id[:19]} (the release "
                           f"{job.release.pinned}) to stream to {node.url}",
                           f"pull it here first (`docker pull {job.release.pinned}`)")
    counted = _Counted(local.api.get_image(image_id))
    with step(console, f"stream {image_id[:19]} to {node.url}"):
        try:
            loading = client.api.load_image(counted, quiet=False)
            for _, message in stream_errors(loading):
                if message:
                    raise PublishError(f"node {node.url}: loading {image_id[:19]} failed: "
                                       f"{message.strip()[:300]}",
                                       "check the node's engine and its free disk space")
        except (docker.errors.APIError, requests.RequestException) as exc:
            raise PublishError(f"node {node.url}: streaming {image_id[:19]} failed: "
                               f"{str(exc)[:300]}",
                               "check both engines and the node's free disk space") from exc
    console.notice(f"deploy: {node.url}: streamed {transfer.human_bytes(counted.bytes)}")
    return {"streamed": {"bytes": counted.bytes}}


class _Counted:
    """An iterable of byte chunks that counts what passes through it."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks, self.bytes = chunks, 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.bytes += len(chunk)
            yield chunk


def _smoke_config(job: Job, node: Node) -> Config:
    """The config the node's smoke runs with: its build/ is the node's folder beside the
    report (so its record and log go there, and the local smoke record stays as it is), its
    wheels/ links to the project's (the checks read the tag's wheels)."""
    folder = job.folder / node.slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wheels").symlink_to(job.config.wheels_dir.resolve(), target_is_directory=True)
    return replace(job.config, work=folder)


def _smoke(job: Job, node: Node, client: Client, beside: Config, *, console: Console,
           settings: Settings) -> None:
    """checks.run on the node's engine, with the node's config."""
    try:
        checks.run(client, beside, job.plan, job.facts(), job.options, console=console,
                   settings=settings)
    except SmokeError as exc:
        raise SmokeError(f"on node {node.url}: {exc.message}", exc.remedy) from exc


def _smoke_summary(record: Path) -> NodeSmoke:
    try:
        report = records.from_json(SmokeReport, json.loads(record.read_text()))
    except (OSError, ValueError, KeyError, TypeError):  # no record, or not a smoke record
        return NodeSmoke(False, (), None)
    return NodeSmoke(report.passed, report.checks, str(record))
