"""The one small typed wrapper around the docker SDK. The client is always passed in."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import tarfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.errors import EngineError, FatalError
from sparkbake.files import naming
from sparkbake.oci.engine_client import Client, Container

__all__ = [
    "RUN_LABEL",
    "Client",
    "ContainerResult",
    "bridge_gateway",
    "build_image",
    "connect",
    "engine_or_none",
    "image_attrs",
    "image_attrs_or_none",
    "image_exists",
    "image_labels",
    "load_image",
    "load_stream",
    "run_container",
    "run_detached",
    "run_label",
    "started_container",
]

# The Docker SDK and requests are imported where used: the SDK takes ~0.2 s to import
# (paramiko, cryptography) and most commands never talk to an engine.
TAIL_LINES = 40
# seconds an engine call may go without a byte back. A container's run (wait, logs) and an
# image build are not bounded: they last as long as their work.
ENGINE_TIMEOUT = 600
ARCHIVE_CHUNK = 1 << 20
# on every container sparkbake makes: which run made it (HOST:PID), so that `gc` finds the
# containers of a run that was killed before it could remove them
RUN_LABEL = "dev.sparkbake.run"


def run_label() -> str:
    """This run's RUN_LABEL value."""
    return f"{socket.gethostname()}:{os.getpid()}"


def connect(settings: Settings) -> Client:
    """A client for the engine the run's DOCKER_HOST names (else the local socket), checked
    with a ping."""
    import docker
    import docker.errors
    import requests

    try:
        client: Client = docker.from_env(timeout=ENGINE_TIMEOUT,
                                         environment=dict(settings.environ))
        client.ping()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise EngineError(
            f"no Docker engine answers ({str(exc).splitlines()[0][:160]})",
            "start one (e.g. `dockerd &` as root, see docs/tutorial.md) or set DOCKER_HOST",
        ) from exc
    return client


def engine_or_none(settings: Settings) -> Client | None:
    """The engine if one answers: `plan` and `tags` work without one."""
    try:
        return connect(settings)
    except EngineError:
        return None


def image_exists(client: Client, ref: str) -> bool:
    return image_attrs_or_none(client, ref) is not None


def tag_same_key(client: Client, ref: str) -> str | None:
    """Give `ref` (REPOSITORY/NAME:KEY) to an image already made for the same KEY under
    another NAME: the same spec under two names in versions.yaml is made once. The other
    image's name, or None when there is none."""
    repository, key = ref.rsplit(":", 1)
    kind = repository.rsplit("/", 1)[0]
    for image in client.images.list(filters={"reference": f"{kind}/*:{key}"}):
        others = [name for name in image.attrs.get("RepoTags") or [] if name != ref]
        if others:
            image.tag(repository, key)
            return str(others[0])
    return None


def image_attrs_or_none(client: Client, ref: str) -> dict[str, Any] | None:
    """The engine's attributes of the image ref, in one request; None: it has no such image."""
    import docker.errors

    try:
        attrs: dict[str, Any] = client.images.get(ref).attrs
    except docker.errors.ImageNotFound:
        return None
    return attrs


def image_attrs(client: Client, ref: str) -> dict[str, Any]:
    attrs: dict[str, Any] = client.images.get(ref).attrs
    return attrs


def image_labels(attrs: dict[str, Any]) -> dict[str, str]:
    """An image's labels, from its engine attributes (none: {})."""
    labels: dict[str, str] = (attrs.get("Config") or {}).get("Labels") or {}
    return labels


def build_image(
    client: Client,
    console: Console,
    context: Path,
    tag: str,
    *,
    error: type[FatalError],
    buildargs: Mapping[str, str] | None = None,
) -> str:
    """Build context/Dockerfile with the classic builder; its output goes to the console (the
    stage's log); return the id."""
    import docker.errors

    lines: list[str] = []
    try:
        stream = client.api.build(path=str(context), tag=tag, rm=True, forcerm=True,
                                  decode=True, buildargs=dict(buildargs or {}))
        image_id = None
        for chunk in stream:
            if "stream" in chunk:
                text = chunk["stream"]
                lines.extend(text.rstrip("\n").splitlines())
                console.detail(text.rstrip("\n")) if text.strip() else None
            if "error" in chunk:
                log = console.open_log()
                where = f" (log: {log})" if log else ""
                last = " / ".join(lines[-5:])
                raise error(f"building {tag} failed: {chunk['error'].strip()}{where}",
                            f"last output: {last}" if last else console.output_hint())
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    except docker.errors.APIError as exc:
        raise error(f"building {tag} failed: {exc.explanation or exc}",
                    "check the Docker engine") from exc
    return str(image_id or client.images.get(tag).id)


@dataclass(frozen=True)
class ContainerResult:
    exit_code: int
    output: str
    oom_killed: bool = False  # the kernel's OOM killer ended a process of the container

    def tail(self, count: int = TAIL_LINES) -> str:
        return "\n".join(self.output.splitlines()[-count:])


def run_container(
    client: Client,
    image: str,
    command: Sequence[str],
    *,
    volumes: Mapping[str, Mapping[str, str]] | None = None,
    environment: Mapping[str, str] | None = None,
    network: bool = True,
    log_path: Path | None = None,
    console: Console | None = None,
    keep: bool = False,
    copy_out: tuple[str, Path] | None = None,
    copy_in: Mapping[str, bytes] | None = None,
    **extra: Any,
) -> ContainerResult:
    """Run a container to its end, its output streamed to console (None: only to log_path);
    always removed unless keep.
    copy_out=(path, tar): after a clean exit, path in the container is saved as a tar file.
    copy_in={absolute path: bytes}: files put into the container before it starts (they
    reach an engine on another machine, where a bind mount of a host path would not)."""
    with _container(client, image, command, volumes, environment, network, keep, extra,
                    copy_in) as box:
        lines: list[str] = []
        reader = threading.Thread(target=_follow, args=(box, lines, log_path, console), daemon=True)
        reader.start()
        status = box.wait()
        reader.join(timeout=10)
        box.reload()
        if copy_out and int(status["StatusCode"]) == 0:
            _copy_out(box, *copy_out)
        return ContainerResult(exit_code=int(status["StatusCode"]), output="".join(lines),
                               oom_killed=bool(box.attrs["State"].get("OOMKilled")))


@contextlib.contextmanager
def started_container(
    client: Client,
    image: str,
    command: Sequence[str],
    *,
    volumes: Mapping[str, Mapping[str, str]] | None = None,
    environment: Mapping[str, str] | None = None,
    **extra: Any,
) -> Iterator[Container]:
    """A container left running for the block (a server); then stopped and removed."""
    with _container(client, image, command, volumes, environment, True, False, extra) as box:
        yield box


def run_detached(client: Client, image: str, **options: Any) -> Container:
    """A container started to outlive this run (a cluster's node): without the run's label,
    so that gc leaves it; EngineError naming the image when the engine refuses it."""
    import docker.errors

    box = _created(client, image, [], options)
    try:
        _start(box, image)
    except EngineError:
        with contextlib.suppress(docker.errors.APIError):
            box.remove(force=True)
        raise
    return box


def bridge_gateway(client: Client, image: str) -> str:
    """The host's address on the default bridge, as its containers route to it. Read from a
    container's own routing table: an engine's IPAM record may leave out the gateway."""
    result = run_container(client, image, ["cat", "/proc/net/route"])
    for line in result.output.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000" and fields[2] != "00000000":
            # little-endian hex, as the kernel writes it
            return ".".join(str(b) for b in reversed(bytes.fromhex(fields[2])))
    raise EngineError(f"a container of {image} has no default route on the bridge network",
                      "check the engine's default bridge (docker network inspect bridge)")


def export_filesystem(client: Client, image: str, target: Path) -> None:
    """The image's root file system as one tar file, from a container created, never
    started, and removed."""
    import docker.errors

    box = _created(client, image, ["true"], {"labels": {RUN_LABEL: run_label()}})
    try:
        with target.open("wb") as out:
            for chunk in box.export():
                out.write(chunk)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            box.remove(force=True)


def _copy_out(box: Container, path: str, tar: Path) -> None:
    """path in the container as a tar file. The engine holds the container while it sends
    the archive: the stream is closed on any failure (a full disk), or removing the
    container would wait for the rest of it for ever (the SDK's stream cannot be closed)."""
    import requests

    api = box.client.api
    url = f"{api.base_url}/v{api.api_version}/containers/{box.id}/archive"
    try:
        with api.get(url, params={"path": path}, stream=True, timeout=ENGINE_TIMEOUT,
                      headers={"Accept-Encoding": "identity"}) as response, \
                naming(tar), tar.open("wb") as out:
            response.raise_for_status()
            for chunk in response.iter_content(ARCHIVE_CHUNK):
                out.write(chunk)
    except requests.RequestException as exc:
        raise EngineError(f"copying {path} out of container {box.short_id} failed: {exc}",
                          "check the Docker engine") from exc


def load_image(client: Client, archive: Path, *, error: type[FatalError]) -> None:
    """`docker load` a docker-archive tar file; errors reported in its stream are raised."""
    with archive.open("rb") as data:
        load_stream(client, data, archive.name, error=error)


def load_stream(client: Client, archive: IO[bytes] | Iterable[bytes], what: str, *,
                error: type[FatalError]) -> None:
    """`docker load` a docker-archive tar given as a file or as chunks; errors reported in
    its stream are raised."""
    import docker.errors
    import requests

    try:
        for _, message in stream_errors(client.api.load_image(archive, quiet=True)):
            if message:
                raise error(f"docker load of {what} failed: {message.strip()}",
                            "check the Docker engine and its free disk space")
    except (docker.errors.APIError, requests.RequestException) as exc:
        explained = exc.explanation if isinstance(exc, docker.errors.APIError) else None
        raise error(f"docker load of {what} failed: {explained or exc}",
                    "check the Docker engine and its free disk space") from exc


@contextlib.contextmanager
def _container(client: Client, image: str, command: Sequence[str],
               volumes: Mapping[str, Mapping[str, str]] | None,
               environment: Mapping[str, str] | None, network: bool, keep: bool,
               extra: dict[str, Any],
               copy_in: Mapping[str, bytes] | None = None) -> Iterator[Container]:
    import docker.errors

    options = dict(volumes=dict(volumes or {}), environment=dict(environment or {}),
                   network_disabled=not network, labels={RUN_LABEL: run_label()}, **extra)
    box = _created(client, image, command, options)
    try:
        if copy_in:
            box.put_archive("/", _tar_of(copy_in))
        _start(box, image)
        yield box
    finally:
        if not keep:
            with contextlib.suppress(docker.errors.APIError):
                box.remove(force=True)


def _created(client: Client, image: str, command: Sequence[str],
             options: dict[str, Any]) -> Container:
    """The container made, not started: one the engine then refuses to start (a privileged
    one where privileges are withheld) is still ours to remove."""
    import docker.errors

    try:
        return client.containers.create(image, list(command), **options)
    except docker.errors.ImageNotFound as exc:
        raise EngineError(f"image {image} is not in the engine", "build it first") from exc
    except docker.errors.APIError as exc:
        raise EngineError(f"cannot create a container of {image}: {exc.explanation or exc}",
                          "check the Docker engine") from exc


def _start(box: Container, image: str) -> None:
    import docker.errors

    try:
        box.start()
    except docker.errors.APIError as exc:
        raise EngineError(f"cannot start a container of {image}: {exc.explanation or exc}",
                          "check the Docker engine") from exc


def _tar_of(files: Mapping[str, bytes]) -> bytes:
    """An uncompressed tar of {absolute path: bytes} (mode 0644, parents 0755), for put_archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folders = {str(parent) for path in files for parent in PurePosixPath(path).parents}
        for folder in sorted(folders - {"/"}):
            entry = tarfile.TarInfo(folder.lstrip("/"))
            entry.type, entry.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(entry)
        for path, data in sorted(files.items()):
            entry = tarfile.TarInfo(path.lstrip("/"))
            entry.size, entry.mode = len(data), 0o644
            tar.addfile(entry, io.BytesIO(data))
    return buffer.getvalue()


def _follow(box: Container, lines: list[str], log_path: Path | None,
            console: Console | None) -> None:
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("w") if log_path else None
    try:
        for raw in box.logs(stream=True, follow=True):
            text = raw.decode(errors="replace")
            lines.append(text)
            if log:
                log.write(text)
                log.flush()
            if console is not None:
                console.detail(text.rstrip("\n"))
    finally:
        if log:
            log.close()


def stream_errors(stream: Any) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Yield (chunk, error message or None) for a decoded push/pull stream."""
    for chunk in stream:
        if isinstance(chunk, (bytes, str)):
            chunk = json.loads(chunk)
        detail = chunk.get("errorDetail") or {}
        message = chunk.get("error") or detail.get("message")
        yield chunk, message


def insecure_registries(client: Client) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The engine's insecure registries: (CIDRs, names), as `docker info` shows them."""
    config = client.info().get("RegistryConfig") or {}
    indexes = config.get("IndexConfigs") or {}
    return (tuple(config.get("InsecureRegistryCIDRs") or ()),
            tuple(name for name, index in indexes.items() if not index.get("Secure", True)))
