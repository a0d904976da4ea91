"""publish: push a smoke-tested image as baked, verify its remote digest, record the release.

The image goes from build/oci to the registry over the distribution API, blob for blob, so
the registry serves the digest the bake wrote (`docker push` would recompress the layers and
make another manifest); only the blobs the registry lacks are sent, and the record counts
them. The engine's image must be that image, and a passing smoke record
must name its image ID (`--skip-smoke` overrides, and the release record says so). The
release record also goes into the releases index (`releases`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from sparkbake.bake import imagebake
from sparkbake.config.settings import host_settings, registry_login
from sparkbake.config.versions import Config
from sparkbake.console import display
from sparkbake.console.invocation import command
from sparkbake.console.tools import echo
from sparkbake.errors import PublishError, UsageError
from sparkbake.files import atomic_write
from sparkbake.oci import ocilayout
from sparkbake.oci.distribution import Remote, Session, unreachable
from sparkbake.oci.docker_engine import Client, image_attrs, image_exists
from sparkbake.pipeline.plan import Plan, upstream_pin
from sparkbake.publish import releases

__all__ = [
    "Remote", "check_overwrite", "check_smoke", "publish", "read_smoke", "remote_for",
    "retarget", "smoke_gate", "split_repository",
]

INPUTS_LABEL = "dev.sparkbake.inputs"
HTTP_TIMEOUT = 30
REGISTRY_ARG = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?")


def publish(client: Client, config: Config, plan: Plan, registry: str | None,
            force: bool, skip_smoke: bool = False) -> dict[str, Any]:
    """Push the tag's smoke-tested image under `<tag>` and `<tag>-<inputs[:12]>`, verify the
    registry's digests, write build/releases/<tag>.json and its line in the releases index;
    return that record."""
    repository = retarget(plan.tag.repository, registry)
    attrs = _local_image(client, plan)
    baked = _baked(config, plan, attrs)
    smoked = smoke_gate(config.build_dir / "smoke" / f"{plan.tag.name}.json", plan.tag.name,
                        baked.config, skip_smoke)
    names = [plan.tag.name, f"{plan.tag.name}-{plan.inputs[:12]}"]
    remote = remote_for(repository)
    _ping(remote)
    session = Session(remote, login=registry_login(remote.host))
    current = {name: session.manifest_digest(name) for name in names}
    for name in names:
        check_overwrite(f"{repository}:{name}", current[name], {baked.image.digest}, force)
    echo(f"+ push oci:{baked.layout}:{plan.tag.name} -> {repository}:{{{','.join(names)}}}")
    moving = [name for name in names if current[name] != baked.image.digest]
    pushed, sent = session.push(ocilayout.Layout(baked.layout), baked.image, moving)
    display.notice(sent.line(baked.image.digest))
    if pushed != baked.image.digest:
        raise PublishError(f"{repository} stored the image as {pushed}, not as the baked "
                           f"{baked.image.digest}", "check the registry (does it rewrite "
                           "manifests?)")
    for name in names:
        _verify(session, name, pushed)
    published = {"repository": repository, "images": [f"{repository}:{n}" for n in names],
                 "digest": pushed, "pinned": f"{repository}@{pushed}", "smoke": smoked,
                 "manifest": releases.image_manifest(ocilayout.Layout(baked.layout), baked.image),
                 "transfer": sent.record()}
    return _record(config, plan, attrs, published)


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


def read_smoke(path: Path, image_id: str) -> tuple[str, dict[str, Any]]:
    """What the smoke record at path says of the image: (`passed` | `failed` | `missing` |
    `unreadable` | `other image`, the record or {})."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return "missing", {}
    except (OSError, ValueError):
        return "unreadable", {}
    if not isinstance(record, dict):
        return "unreadable", {}
    if record.get("image_id") != image_id:
        return "other image", record
    return ("passed" if record.get("passed") is True else "failed"), record


def check_smoke(path: Path, tag: str, image_id: str) -> dict[str, Any]:
    """The passing smoke record of exactly this image (by its ID), or PublishError."""
    state, record = read_smoke(path, image_id)
    remedy = f"run `{command('smoke', tag)}` first (or publish with --skip-smoke, recorded)"
    if state == "missing":
        raise PublishError(f"{tag} has no smoke record ({path})", remedy)
    if state == "unreadable":
        raise PublishError(f"{path}: unreadable smoke record", remedy)
    if state == "other image":
        raise PublishError(f"{path}: the smoke record is not of the image to publish (it "
                           f"checked {str(record.get('image_id'))[:19]}, not {image_id[:19]})",
                           remedy)
    if state == "failed":
        raise PublishError(f"{path}: the smoke checks of {tag} did not pass",
                           f"fix them, then run `{command('smoke', tag)}`")
    return record


def smoke_gate(path: Path, tag: str, image_id: str, skip: bool) -> dict[str, Any]:
    """The release record's `smoke`: the passing record's summary, or, with skip, what the
    record said of the image when --skip-smoke overrode it."""
    if skip:
        found, _ = read_smoke(path, image_id)
        display.notice(f"publish: --skip-smoke: {tag} ({image_id[:19]}) goes out without a passing "
             f"smoke record (found: {found})")
        return {"result": "skipped", "override": "--skip-smoke", "found": found}
    record = check_smoke(path, tag, image_id)
    checks = [c for c in record.get("checks") or [] if isinstance(c, dict)]
    counts = {s: sum(c.get("status") == s for c in checks) for s in ("passed", "skipped")}
    return {"result": "passed", "image_id": image_id, "time": record.get("time"),
            "checks": counts}


def check_overwrite(ref: str, remote: str | None, local: set[str], force: bool) -> None:
    """Refuse to move a remote tag that points at another image, unless forced."""
    if remote is None or remote in local:
        return
    if force:
        display.notice(f"{ref}: moving the tag away from {remote} (--force)")
        return
    mine = ", ".join(sorted(local)) if local else "not pushed there yet"
    raise PublishError(f"{ref} already points at {remote}, not at the local image ({mine})",
                       "publish another tag, or pass --force to move this one")


def _local_image(client: Client, plan: Plan) -> dict[str, Any]:
    ref, tag = plan.tag.image_ref, plan.tag.name
    if not image_exists(client, ref):
        raise PublishError(f"image {ref} is not in the Docker engine",
                           f"build it: `{command('build-image', tag)}`")
    attrs = image_attrs(client, ref)
    built = ((attrs.get("Config") or {}).get("Labels") or {}).get(INPUTS_LABEL)
    if built != plan.inputs:
        raise PublishError(f"image {ref} is stale: its {INPUTS_LABEL} is {str(built)[:12]}, "
                           f"the plan's inputs are {plan.inputs[:12]}",
                           f"rebuild it: `{command('build-image', tag)}`")
    return attrs


def _baked(config: Config, plan: Plan, attrs: dict[str, Any]) -> imagebake.Baked:
    """The image build/oci names for the tag; it must be the engine's (the smoke-tested)."""
    baked = imagebake.find(config.build_dir, plan)
    if baked is None or baked.config != attrs.get("Id"):
        where = "has none" if baked is None else f"has {baked.config[:19]}"
        raise PublishError(f"the engine's {plan.tag.image_ref} ({str(attrs.get('Id'))[:19]}) "
                           f"is not the image baked into {config.build_dir / 'oci'} ({where})",
                           f"rebuild it: `{command('build-image', plan.tag.name)}`, then smoke")
    return baked


def _ping(remote: Remote) -> None:
    """Fail fast on a host that is down or is no registry."""
    try:
        response = requests.get(f"{remote.base_url}/v2/", timeout=HTTP_TIMEOUT,
                                verify=remote.verify)
    except requests.RequestException as exc:
        raise unreachable(remote, exc) from exc
    if response.status_code not in (200, 401):
        raise PublishError(f"{remote.host} answers, but not as a registry "
                           f"(HTTP {response.status_code} on /v2/)",
                           "check the --registry address or the tag's repository")


def _verify(session: Session, name: str, digest: str) -> None:
    remote = session.remote
    found = session.manifest_digest(name)
    if found != digest:
        raise PublishError(f"{remote.host}/{remote.path}:{name} is {found or 'missing'} in the "
                           f"registry after the push, not the pushed {digest}",
                           "another push may have raced this one; check the registry and retry")
    echo(f"verified {remote.host}/{remote.path}:{name} = {digest}")


def _record(config: Config, plan: Plan, attrs: dict[str, Any],
            published: dict[str, Any]) -> dict[str, Any]:
    """build/releases/<tag>.json (published: repository, images, digest, pinned, smoke, the
    image's manifest.json and the blobs sent), then its line in the releases index."""
    record: dict[str, Any] = {
        "tag": plan.tag.name,
        **published,
        "image_id": attrs.get("Id"),
        "build": _build_record(config, plan),
        "inputs": plan.inputs,
        "upstream": {"key": plan.tag.upstream.key, **upstream_pin(plan.tag.upstream)},
        "series": [{"name": s.name, "sha256": s.sha256, "patches": [list(p) for p in s.patches]}
                   for s in plan.series],
        "env": dict(plan.tag.env),
        "labels": (attrs.get("Config") or {}).get("Labels") or {},
        "published": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    folder = config.build_dir / "releases"
    atomic_write(folder / f"{plan.tag.name}.json",
                 json.dumps(record, indent=2, sort_keys=True) + "\n")
    echo(f"release record: {folder / f'{plan.tag.name}.json'} (index: "
         f"{releases.add(folder, record)})")
    return record


def _build_record(config: Config, plan: Plan) -> dict[str, Any]:
    """How the wheels were built (job count, kernel reuse): host state, kept out of the image."""
    report = config.wheels_dir / plan.wheels_key / "wheels.json"
    if not report.is_file():
        return {}
    built = json.loads(report.read_text())
    return {key: built[key] for key in ("jobs", "kernels", "nvcc") if key in built}
