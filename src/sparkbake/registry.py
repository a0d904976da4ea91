"""publish: push a smoke-tested image, verify its remote digest, record the release."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker.errors
import requests

from .cache import atomic_write
from .config import Config
from .docker_api import Client, image_attrs, image_exists, stream_errors
from .errors import PublishError, UsageError
from .plan import Plan, upstream_pin
from .proc import echo
from .settings import host_settings

__all__ = [
    "Remote", "check_overwrite", "check_smoke", "local_digests", "publish", "push_stream",
    "remote_digest", "remote_for", "retarget", "split_repository",
]

INPUTS_LABEL = "dev.sparkbake.inputs"
HTTP_TIMEOUT = 30
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
REGISTRY_ARG = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?")
PUSH_REMEDY = "check that the registry takes pushes (not read-only; `docker login` if it needs it)"


@dataclass(frozen=True)
class Remote:
    """A repository as the registry HTTP API sees it."""

    host: str  # as written in the image name, e.g. 127.0.0.1:5000
    path: str  # the repository inside the registry, e.g. sparkbake-demo
    base_url: str  # http(s)://host of the API
    verify: bool | str  # TLS trust for requests


def publish(client: Client, config: Config, plan: Plan, registry: str | None,
            force: bool) -> dict[str, Any]:
    """Push the tag's smoke-tested image under `<tag>` and `<tag>-<inputs[:12]>`, verify the
    registry's digests and write build/releases/<tag>.json; return that record."""
    repository = retarget(plan.tag.repository, registry)
    attrs = _local_image(client, plan)
    check_smoke(config.build_dir / "smoke" / f"{plan.tag.name}.json", plan)
    names = [plan.tag.name, f"{plan.tag.name}-{plan.inputs[:12]}"]
    remote = remote_for(repository)
    _ping(remote)
    local = local_digests(attrs, repository)
    for name in names:
        check_overwrite(f"{repository}:{name}", remote_digest(remote, name), local, force)
    digests = {_push(client, plan.tag.image_ref, repository, name) for name in names}
    if len(digests) != 1:
        raise PublishError(f"the tags of {repository} were pushed as different digests: "
                           f"{', '.join(sorted(digests))}", "retry the publish")
    digest = digests.pop()
    for name in names:
        _verify(remote, name, digest)
    return _record(config, plan, attrs, repository, names, digest)


def retarget(repository: str, registry: str | None) -> str:
    """Put `registry` (HOST[:PORT]) in place of the registry host of `repository`."""
    if registry is None:
        return repository
    if not REGISTRY_ARG.fullmatch(registry):
        raise UsageError(f"--registry {registry!r} is not HOST[:PORT]",
                         "e.g. --registry 127.0.0.1:5000")
    return f"{registry}/{split_repository(repository)[1]}"


def split_repository(repository: str) -> tuple[str | None, str]:
    """(registry host or None, path): the first component is a host if it has '.' or ':'."""
    first, sep, rest = repository.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, repository


def remote_for(repository: str) -> Remote:
    """Plain http for loopback registries, https with the host's CA bundle otherwise."""
    host, path = split_repository(repository)
    host = host or "docker.io"
    api_host = host
    if host == "docker.io":
        api_host, path = "registry-1.docker.io", path if "/" in path else f"library/{path}"
    hostname = host[: host.index("]") + 1] if host.startswith("[") else host.split(":")[0]
    if hostname in ("localhost", "[::1]") or hostname.startswith("127."):
        return Remote(host=host, path=path, base_url=f"http://{api_host}", verify=True)
    verify: bool | str = host_settings().ca_bundle or True
    return Remote(host=host, path=path, base_url=f"https://{api_host}", verify=verify)


def check_smoke(path: Path, plan: Plan) -> dict[str, Any]:
    """The passing smoke record of exactly these inputs, or PublishError."""
    tag = plan.tag.name
    remedy = f"run `nox -s smoke -- {tag}` first"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise PublishError(f"{tag} has no smoke record ({path})", remedy) from None
    except (OSError, ValueError) as exc:
        raise PublishError(f"{path}: unreadable smoke record ({exc})", remedy) from exc
    if not isinstance(record, dict) or record.get("inputs") != plan.inputs:
        raise PublishError(f"{path}: the smoke record is not of the current image "
                           f"(inputs {plan.inputs[:12]})", remedy)
    if record.get("passed") is not True:
        raise PublishError(f"{path}: the smoke checks of {tag} did not pass",
                           f"fix them, then run `nox -s smoke -- {tag}`")
    return record


def local_digests(attrs: dict[str, Any], repository: str) -> set[str]:
    """The digests the engine knows the image by in `repository` (from earlier pushes)."""
    found = set()
    for entry in attrs.get("RepoDigests") or []:
        name, _, digest = str(entry).partition("@")
        if name == repository:
            found.add(digest)
    return found


def check_overwrite(ref: str, remote: str | None, local: set[str], force: bool) -> None:
    """Refuse to move a remote tag that points at another image, unless forced."""
    if remote is None or remote in local:
        return
    if force:
        echo(f"{ref}: moving the tag away from {remote} (--force)")
        return
    mine = ", ".join(sorted(local)) if local else "not pushed there yet"
    raise PublishError(f"{ref} already points at {remote}, not at the local image ({mine})",
                       "publish another tag, or pass --force to move this one")


def remote_digest(remote: Remote, reference: str) -> str | None:
    """The manifest digest the registry serves for reference; None if it has none."""
    url = f"{remote.base_url}/v2/{remote.path}/manifests/{reference}"
    response = _get(remote, url, {"Accept": MANIFEST_TYPES})
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise PublishError(f"{url}: HTTP {response.status_code} {response.reason}",
                           f"check the registry {remote.host}")
    header = response.headers.get("Docker-Content-Digest")
    return header or "sha256:" + hashlib.sha256(response.content).hexdigest()


def push_stream(stream: Iterable[Any], ref: str) -> str:
    """Follow a decoded push stream: print each layer's states once, raise on an error
    reported inside it, return the pushed manifest digest."""
    seen: set[tuple[str, str]] = set()
    digest = None
    for chunk, error in stream_errors(stream):
        if error:
            raise PublishError(f"pushing {ref} failed: {' '.join(error.split())[:300]}",
                               PUSH_REMEDY)
        aux = chunk.get("aux")
        if isinstance(aux, dict) and aux.get("Digest"):
            digest = str(aux["Digest"])
        _progress(chunk, seen)
        said = re.search(r"digest: (sha256:[0-9a-f]{64})", str(chunk.get("status", "")))
        digest = digest or (said.group(1) if said else None)
    if digest is None:
        raise PublishError(f"pushing {ref}: the engine reported no digest", "retry the publish")
    return digest


def _progress(chunk: dict[str, Any], seen: set[tuple[str, str]]) -> None:
    text = str(chunk.get("status") or "")
    if not text:
        return
    layer = str(chunk.get("id") or "")
    key = (layer, "Retrying" if text.startswith("Retrying") else text)
    if key not in seen:
        seen.add(key)
        echo(f"{layer}: {text}" if layer else text)


def _local_image(client: Client, plan: Plan) -> dict[str, Any]:
    ref, tag = plan.tag.image_ref, plan.tag.name
    if not image_exists(client, ref):
        raise PublishError(f"image {ref} is not in the Docker engine",
                           f"build it: `nox -s build-image -- {tag}`")
    attrs = image_attrs(client, ref)
    built = ((attrs.get("Config") or {}).get("Labels") or {}).get(INPUTS_LABEL)
    if built != plan.inputs:
        raise PublishError(f"image {ref} is stale: its {INPUTS_LABEL} is {str(built)[:12]}, "
                           f"the plan's inputs are {plan.inputs[:12]}",
                           f"rebuild it: `nox -s build-image -- {tag}`")
    return attrs


def _ping(remote: Remote) -> None:
    """Fail fast on a host that is down or is no registry (the engine retries for a minute)."""
    try:
        response = requests.get(f"{remote.base_url}/v2/", timeout=HTTP_TIMEOUT,
                                verify=remote.verify)
    except requests.RequestException as exc:
        raise _unreachable(remote, exc) from exc
    if response.status_code not in (200, 401):
        raise PublishError(f"{remote.host} answers, but not as a registry "
                           f"(HTTP {response.status_code} on /v2/)",
                           "check the --registry address or the tag's repository")


def _get(remote: Remote, url: str, headers: dict[str, str]) -> requests.Response:
    """GET from the registry API, with an anonymous bearer token if the registry asks."""
    try:
        response = requests.get(url, headers=headers, timeout=HTTP_TIMEOUT, verify=remote.verify)
        token = _token(response, remote) if response.status_code == 401 else None
        if token:
            headers = {**headers, "Authorization": f"Bearer {token}"}
            response = requests.get(url, headers=headers, timeout=HTTP_TIMEOUT,
                                    verify=remote.verify)
    except (requests.RequestException, ValueError) as exc:
        raise _unreachable(remote, exc) from exc
    if response.status_code == 401:
        raise PublishError(f"registry {remote.host} wants credentials to read {remote.path}",
                           "sparkbake reads manifests anonymously; make the repository readable")
    return response


def _token(challenge: requests.Response, remote: Remote) -> str | None:
    header = challenge.headers.get("WWW-Authenticate", "")
    params = dict(re.findall(r'(\w+)="([^"]*)"', header))
    realm = params.pop("realm", None)
    if not header.lower().startswith("bearer") or realm is None:
        return None
    answer = requests.get(realm, params=params, timeout=HTTP_TIMEOUT, verify=remote.verify)
    body = answer.json() if answer.status_code == 200 else {}
    token = body.get("token") or body.get("access_token")
    return str(token) if token else None


def _unreachable(remote: Remote, exc: Exception) -> PublishError:
    if isinstance(exc, requests.exceptions.SSLError):
        reason = "TLS verification failed"
    else:
        errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))
        reason = errno.group(0) if errno else f"{type(exc).__name__}: {str(exc)[:160]}"
    if remote.base_url.startswith("http://"):
        port = remote.host.rsplit(":", 1)[1] if ":" in remote.host else "80"
        remedy = "start it with `nox -s registry -- start" + (
            "`" if port == "5000" else f" --port {port}`")
    else:
        remedy = "check the address, the network and TLS trust (PIP_CERT / REQUESTS_CA_BUNDLE)"
    return PublishError(f"registry {remote.host} does not answer ({reason})", remedy)


def _push(client: Client, source: str, repository: str, name: str) -> str:
    ref = f"{repository}:{name}"
    try:
        if ref != source:
            echo(f"+ docker tag {source} {ref}")
            client.api.tag(source, repository, tag=name, force=True)
        echo(f"+ docker push {ref}")
        return push_stream(client.api.push(repository, tag=name, stream=True, decode=True), ref)
    except docker.errors.APIError as exc:
        raise PublishError(f"pushing {ref} failed: {exc.explanation or exc}", PUSH_REMEDY) from exc
    except requests.RequestException as exc:
        raise PublishError(f"pushing {ref} failed: the engine connection broke ({exc})"[:300],
                           "check the Docker engine, then retry") from exc


def _verify(remote: Remote, name: str, digest: str) -> None:
    found = remote_digest(remote, name)
    if found != digest:
        raise PublishError(f"{remote.host}/{remote.path}:{name} is {found or 'missing'} in the "
                           f"registry after the push, not the pushed {digest}",
                           "another push may have raced this one; check the registry and retry")
    echo(f"verified {remote.host}/{remote.path}:{name} = {digest}")


def _record(config: Config, plan: Plan, attrs: dict[str, Any], repository: str,
            names: list[str], digest: str) -> dict[str, Any]:
    record: dict[str, Any] = {
        "tag": plan.tag.name,
        "repository": repository,
        "images": [f"{repository}:{name}" for name in names],
        "digest": digest,
        "pinned": f"{repository}@{digest}",
        "image_id": attrs.get("Id"),
        "inputs": plan.inputs,
        "upstream": upstream_pin(plan.tag.upstream),
        "series": [{"name": s.name, "sha256": s.sha256, "patches": [list(p) for p in s.patches]}
                   for s in plan.series],
        "labels": (attrs.get("Config") or {}).get("Labels") or {},
        "published": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    path = config.build_dir / "releases" / f"{plan.tag.name}.json"
    atomic_write(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    echo(f"release record: {path}")
    return record
