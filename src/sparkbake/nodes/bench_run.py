"""bench TAG (and up --bench): `vllm bench serve` from the cluster's image on the head's
engine against the head, guarded against foreign traffic (bench.py decides), its figures
printed and kept in the cluster record (build/clusters/TAG.json, "bench") and, by the image
the head ran, in the tag's bench measurements (bench_store: TAG.bench.json), which outlive the
record and where `diff` finds a release's figures."""

from __future__ import annotations

import argparse
import json
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from sparkbake import records
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.core.smoke_record import CheckFailed
from sparkbake.errors import SmokeError, UsageError
from sparkbake.files import atomic_write, read_json, scratch_dir
from sparkbake.nodes import bench, bench_store, cluster, serve_client
from sparkbake.nodes.bench import BenchFigures, Load
from sparkbake.oci import docker_engine
from sparkbake.oci.engine_client import Client, Container
from sparkbake.run import Run

__all__ = ["bench_command", "measure"]

OUT = "/tmp/sparkbake-bench"  # in the bench container
VLLM = "/opt/venv/bin/vllm"
ATTEMPTS = 2  # the run, and once more after foreign traffic
SAMPLE_EVERY = 0.5  # seconds between samples of the head's /metrics during the run
QUIET_WAIT = 10.0  # seconds to wait for requests in flight to finish before a run


class Sampler(threading.Thread):
    """The head's /metrics, sampled until stopped (a sample that fails is left out)."""

    def __init__(self, server: serve_client.Server) -> None:
        super().__init__(daemon=True)
        self.server, self.samples = server, list[dict[str, float]]()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(SAMPLE_EVERY):
            try:
                self.samples.append(self.server.metrics())
            except Exception:  # a missed sample only thins the guard
                continue


def measure(config: Config, tag: str, load: Load, *, console: Console) -> BenchFigures:
    """The bench against the running cluster of tag; its figures, also in its record."""
    found = cluster.load(config, tag)
    head = found.nodes[0]
    client = cluster.clients_of([head])[head.engine.url]
    box = cluster.box_of(client, found, head)
    if box is None or box.status != "running":
        raise SmokeError(f"{tag}: the head's container {head.container(tag)} is not running",
                         f"bring it up: sparkbake up {tag} NODE.env ...")
    server = serve_client.Server(found.api)
    why = ""
    for attempt in range(1, ATTEMPTS + 1):
        result = _attempt(config, found, box, server, load, console=console)
        if isinstance(result, BenchFigures):
            _remember(config, _measured(client, found, box, result))
            console.result(f"{tag}: bench: {result.describe()}")
            return result
        why = result
        console.notice(f"bench, run {attempt} of {ATTEMPTS}, not counted: {why}")
    raise SmokeError(f"{tag}: bench refused: {why}, on each of {ATTEMPTS} runs",
                     f"run it when nothing else sends requests to {found.api}: "
                     f"sparkbake bench {tag}")


def _attempt(config: Config, found: cluster.Cluster, box: Container,
             server: serve_client.Server, load: Load, *,
             console: Console) -> BenchFigures | str:
    """One guarded run: its figures, or why foreign traffic spoiled it."""
    before = _quiet(server)
    if bench.in_flight(before):
        return bench.foreign(before, [], before, load) or ""
    sampler = Sampler(server)
    sampler.start()
    try:
        result = _bench(config, found, box, load, console=console)
    finally:
        sampler.stopped.set()
        sampler.join()
    after = server.metrics()
    spoiled = bench.foreign(before, sampler.samples, after, load)
    if spoiled:
        return spoiled
    try:
        return bench.figures(result, before, after, load, time.strftime("%Y-%m-%d"))
    except ValueError as exc:
        raise SmokeError(f"{found.tag}: bench: {exc}", f"its log: {_log(config, found.tag)}") \
            from exc


def _quiet(server: serve_client.Server) -> dict[str, float]:
    """The head's /metrics once no request is in flight, or after QUIET_WAIT seconds."""
    deadline = time.monotonic() + QUIET_WAIT
    try:
        while bench.in_flight(metrics := server.metrics()) and time.monotonic() < deadline:
            time.sleep(SAMPLE_EVERY)
    except CheckFailed as exc:
        raise SmokeError(f"bench: the head's {exc}", "sparkbake status TAG") from exc
    return metrics


def _bench(config: Config, found: cluster.Cluster, box: Container, load: Load, *,
           console: Console) -> dict[str, Any]:
    """`vllm bench serve` in a container of the cluster's image beside the head; its
    result JSON."""
    env = dict(item.split("=", 1) for item in box.attrs["Config"]["Env"] if "=" in item)
    mounts = {mount["Source"]: {"bind": mount["Destination"], "mode": "ro"}
              for mount in box.attrs.get("Mounts", []) if mount.get("Type") == "bind"}
    model = env.get("SERVED_MODEL_NAME") or env.get("MODEL") or "/model"
    command = bench.bench_command(bench.base_url(env), model, env.get("MODEL") or "/model",
                                  load, OUT)
    head = found.nodes[0]
    client = cluster.clients_of([head])[head.engine.url]
    with scratch_dir(cluster.state_path(config, found.tag).parent, ".bench-") as scratch, \
            step(console, f"vllm bench serve against {found.api} ({load.prompts} prompts)"):
        done = docker_engine.run_container(
            client, found.image, command, entrypoint=[VLLM], network_mode="host",
            volumes=mounts, log_path=_log(config, found.tag),
            copy_out=(OUT, scratch / "out.tar"))
        if done.exit_code != 0:
            raise SmokeError(f"{found.tag}: vllm bench serve exited with {done.exit_code}: "
                             f"{done.tail(1)}", f"its log: {_log(config, found.tag)}")
        with tarfile.open(scratch / "out.tar") as archive:
            member = archive.extractfile(f"{Path(OUT).name}/result.json")
            document: dict[str, Any] = json.load(member) if member else {}
    return document


def _log(config: Config, tag: str) -> Path:
    return cluster.state_path(config, tag).with_suffix(".bench.log")


def _measured(client: Client, found: cluster.Cluster, box: Container,
              figures: BenchFigures) -> bench_store.Measured:
    """The figures with the image the head's container ran: its ID and manifest digests."""
    image_id = str(box.attrs.get("Image") or "")
    attrs = docker_engine.image_attrs_or_none(client, image_id) or {}
    return bench_store.Measured(found.tag, found.image, image_id,
                                bench_store.digests_of(attrs.get("RepoDigests") or []), figures)


def _remember(config: Config, measured: bench_store.Measured) -> None:
    """The figures as the record's "bench" key, beside up's readout, and under the image's
    ID in the tag's bench measurements, which down keeps."""
    path = cluster.state_path(config, measured.cluster)
    record = {**read_json(path), "bench": records.to_json(measured.figures)}
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    bench_store.remember(path.with_suffix(bench_store.SUFFIX), measured)


def bench_command(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """bench TAG: the guarded bench against the cluster up brought up; 0 with its figures."""
    load = Load(args.prompts, args.input_len, args.output_len, args.concurrency)
    wrong = [name for name, value in vars(load).items() if value < 1]
    if wrong:
        raise UsageError(f"bench: --{wrong[0].replace('_', '-')} must be 1 or more",
                         f"sparkbake bench {tag.name} --help")
    measure(run.config, tag.name, load, console=run.console)
    return 0
