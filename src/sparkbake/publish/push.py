"""publish: push a smoke-tested image as baked, verify its remote digest, record the release.

Its SBOM and in-toto statements go with it, attached to the digest, which is signed with the
user's key if one is given (attest.attach). The image goes from build/oci to the registry
over the distribution API, blob for blob, so
the registry serves the digest the bake wrote (`docker push` would recompress the layers and
make another manifest); only the blobs the registry lacks are sent, and the record counts
them. The engine's image must be that image, and a passing smoke record
must name its image ID (`--skip-smoke` overrides, and the release record says so). The
release record also goes into the releases index (`releases`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkbake.attest.signing import SigningKey
from sparkbake.bake import runtime_image
from sparkbake.bake.runtime_image import INPUTS_LABEL
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.core.smoke_record import SmokeReport, counts
from sparkbake.errors import FatalError, PublishError, UsageError
from sparkbake.files import atomic_write
from sparkbake.oci import image_layout, registry_access, transfer
from sparkbake.oci.distribution import Remote, Session
from sparkbake.oci.docker_engine import (
    Client,
    image_attrs,
    image_exists,
    image_labels,
    insecure_registries,
)
from sparkbake.oci.registry_access import DOCKER_DEFAULT, InsecureRegistries
from sparkbake.oci.registry_login import registry_login
from sparkbake.planning import Plan, upstream_pin
from sparkbake.publish import attach, releases
from sparkbake.publish.record import Release, ReleaseSeries, ReleaseSmoke, SmokeFound
from sparkbake.wheels.report import REPORT, read_report

__all__ = [
    "Remote", "Target", "baked_image", "check_overwrite", "check_pushed", "check_smoke",
    "engine_insecure", "local_image", "locate", "open_session", "platform_release", "publish",
    "read_smoke", "remote_for", "require_intact", "retarget", "smoke_gate", "split_repository",
    "write_record",
]

REGISTRY_ARG = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?")


def publish(client: Client, config: Config, settings: Settings, plan: Plan,
            registry: str | None, force: bool, skip_smoke: bool = False,
            key: SigningKey | None = None, *, console: Console) -> Release:
    """Push the tag's smoke-tested image under `<tag>-<inputs[:12]>`, write
    build/releases/<tag>.json and its line in the releases index, then move `<tag>` to it;
    each name verified in the registry; return the record.

    In that order, so an interruption never leaves the moving tag on an image without its
    per-build tag and its record; publishing again finishes what is missing."""
    repository = retarget(plan.tag.repository, registry)
    attrs = local_image(client, plan, settings=settings)
    baked = baked_image(config, plan, attrs, settings=settings, console=console)
    require_intact(baked, plan.tag.name, settings=settings, console=console)
    smoked = smoke_gate(Folders.of(config).smoke_record(plan.tag.name), plan.tag.name,
                        baked.config, skip_smoke, console=console, settings=settings)
    moving, per_build = plan.tag.name, f"{plan.tag.name}-{plan.inputs[:12]}"
    target = Target.of(client, settings, repository, [per_build, moving],
                       {baked.image.digest}, force, console=console)
    pushed, sent = target.push(baked, per_build)
    attached = attach.attach_baked(target.session, config, plan, baked, key, (moving, per_build),
                                   force, console=console)
    release = platform_release(config, plan, repository, (moving, per_build), pushed, sent,
                               smoked, baked, attrs, attached, console=console)
    write_record(Folders.of(config).releases, release, console=console)
    target.move(baked, moving)
    return release


def platform_release(config: Config, plan: Plan, repository: str, names: tuple[str, ...],
                     pushed: str, sent: transfer.Sent, smoked: ReleaseSmoke,
                     baked: runtime_image.Image, attrs: dict[str, Any],
                     attached: attach.Attached | None = None, *, console: Console) -> Release:
    """The record of one image pushed under names: what it is and what it was made of."""
    return Release(
        tag=plan.tag.name, repository=repository,
        images=tuple(f"{repository}:{n}" for n in names), digest=pushed,
        pinned=f"{repository}@{pushed}", smoke=smoked,
        manifest=releases.image_manifest(image_layout.Layout(baked.layout, console), baked.image),
        transfer=sent.record(), image_id=baked.config, build=_build_record(config, plan),
        inputs=plan.inputs, upstream={"key": plan.tag.upstream.key,
                                      **upstream_pin(plan.tag.upstream)},
        series=tuple(ReleaseSeries(s.name, s.sha256, s.patches) for s in plan.series),
        env=dict(plan.tag.env), labels=image_labels(attrs),
        published=datetime.now(UTC).isoformat(timespec="seconds"),
        attestations=attached.to_json() if attached else None)


@dataclass(frozen=True)
class Target:
    """The registry's repository and what its names point at before the publish."""

    repository: str
    session: Session
    current: dict[str, str | None]

    @classmethod
    def of(cls, client: Client, settings: Settings, repository: str, names: list[str],
           digests: set[str], force: bool, *, console: Console) -> Target:
        """Refuse, before anything goes, to move a name that points at another digest than
        those given (unless forced)."""
        session = open_session(repository, settings, insecure=engine_insecure(client),
                               console=console)
        current = {name: session.manifest_digest(name) for name in names}
        for name in names:
            check_overwrite(f"{repository}:{name}", current[name], digests, force, console=console)
        return cls(repository, session, current)

    def push(self, baked: runtime_image.Image, name: str) -> tuple[str, transfer.Sent]:
        """The blobs the registry lacks and the manifest under name; the digest it stored,
        verified, and the blobs sent."""
        self.session.console.detail(f"+ push oci:{baked.layout}:{baked.image.digest[:19]} -> "
                                    f"{self.repository}:{name}")
        tags = [name] if self.current[name] != baked.image.digest else []
        pushed, sent = self.session.push(image_layout.Layout(baked.layout, self.session.console),
                                         baked.image, tags)
        self.session.console.notice(sent.line(baked.image.digest))
        if pushed != baked.image.digest:
            raise PublishError(f"{self.repository} stored the image as {pushed}, not as the "
                               f"baked {baked.image.digest}", "check the registry (does it "
                               "rewrite manifests?)")
        check_pushed(self.session, name, pushed, console=self.session.console)
        return pushed, sent

    def move(self, baked: runtime_image.Image, name: str) -> None:
        """name onto the pushed image (its manifest is in the registry), verified."""
        if self.current[name] != baked.image.digest:
            self.session.console.detail(f"+ tag {self.repository}:{name} -> {baked.image.digest}")
            self.session.set_tag(image_layout.Layout(baked.layout, self.session.console),
                                 baked.image, name)
        check_pushed(self.session, name, baked.image.digest, console=self.session.console)


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


def locate(repository: str) -> tuple[str, str, str]:
    """(host as written, the API's host, path): Docker Hub's names made whole."""
    host, path = split_repository(repository)
    host = host or "docker.io"
    if host == "docker.io":
        return host, "registry-1.docker.io", path if "/" in path else f"library/{path}"
    return host, host, path


def remote_for(repository: str, settings: Settings, error: type[FatalError] = PublishError,
               insecure: InsecureRegistries = DOCKER_DEFAULT, *, console: Console) -> Remote:
    """The repository's registry, reached as Docker reaches it (registry_access): HTTPS with
    Docker's certs.d trust first; its fallback for insecure registries, said."""
    host, api_host, path = locate(repository)
    found = registry_access.endpoint(host, api_host, settings, insecure.covers(host), error)
    if found.note:
        console.notice(f"registry {found.note}")
    return Remote(host=host, path=path, base_url=found.base_url, verify=found.trust.verify,
                  cert=found.trust.cert)


def open_session(repository: str, settings: Settings, error: type[FatalError] = PublishError,
                 insecure: InsecureRegistries = DOCKER_DEFAULT, *, console: Console) -> Session:
    """A session with the repository's registry and the login Docker's client keeps for it."""
    remote = remote_for(repository, settings, error, insecure, console=console)
    return Session(remote, settings, console, error,
                   login=registry_login(remote.host, settings))


def engine_insecure(client: Client) -> InsecureRegistries:
    cidrs, names = insecure_registries(client)
    return InsecureRegistries(cidrs or DOCKER_DEFAULT.cidrs, names)


def read_smoke(path: Path, image_id: str) -> tuple[SmokeFound, SmokeReport | None]:
    """What the smoke record at path says of the image, and the record (None: missing or
    unreadable)."""
    try:
        record = SmokeReport.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return "missing", None
    except (OSError, ValueError, KeyError, TypeError):  # not JSON, or not a smoke record
        return "unreadable", None
    if record.image_id != image_id:
        return "other image", record
    return ("passed" if record.passed else "failed"), record


def check_smoke(path: Path, tag: str, image_id: str, *, settings: Settings) -> SmokeReport:
    """The passing smoke record of exactly this image (by its ID), or PublishError."""
    state, record = read_smoke(path, image_id)
    remedy = (f"run `{settings.command('smoke', tag)}` first (or publish with --skip-smoke, "
              "recorded)")
    if state == "missing":
        raise PublishError(f"{tag} has no smoke record ({path})", remedy)
    if record is None:
        raise PublishError(f"{path}: unreadable smoke record", remedy)
    if state == "other image":
        raise PublishError(f"{path}: the smoke record is not of the image to publish (it "
                           f"checked {record.image_id[:19]}, not {image_id[:19]})", remedy)
    if state == "failed":
        raise PublishError(f"{path}: the smoke checks of {tag} did not pass",
                           f"fix them, then run `{settings.command('smoke', tag)}`")
    return record


def smoke_gate(path: Path, tag: str, image_id: str, skip: bool, *, console: Console,
               settings: Settings) -> ReleaseSmoke:
    """The release record's `smoke`: the passing record's summary, or, with skip, what the
    record said of the image when --skip-smoke overrode it."""
    if skip:
        found, _ = read_smoke(path, image_id)
        console.notice(f"publish: --skip-smoke: {tag} ({image_id[:19]}) goes out without a passing "
                       f"smoke record (found: {found})")
        return ReleaseSmoke("skipped", found=found)
    record = check_smoke(path, tag, image_id, settings=settings)
    tally = counts(record.checks)
    return ReleaseSmoke("passed", image_id, record.time,
                        {"passed": tally["passed"], "skipped": tally["skipped"]})


def check_overwrite(ref: str, remote: str | None, local: set[str], force: bool, *,
                    console: Console) -> None:
    """Refuse to move a remote tag that points at another image, unless forced."""
    if remote is None or remote in local:
        return
    if force:
        console.notice(f"{ref}: moving the tag away from {remote} (--force)")
        return
    mine = ", ".join(sorted(local)) if local else "not pushed there yet"
    raise PublishError(f"{ref} already points at {remote}, not at the local image ({mine})",
                       "publish another tag, or pass --force to move this one")


def local_image(client: Client, plan: Plan, *, settings: Settings) -> dict[str, Any]:
    ref, tag = plan.tag.image_ref, plan.tag.name
    if not image_exists(client, ref):
        raise PublishError(f"image {ref} is not in the Docker engine",
                           f"build it: `{settings.command('build-image', tag)}`")
    attrs = image_attrs(client, ref)
    built = image_labels(attrs).get(INPUTS_LABEL)
    if built != plan.inputs:
        raise PublishError(f"image {ref} is stale: its {INPUTS_LABEL} is {str(built)[:12]}, "
                           f"the plan's inputs are {plan.inputs[:12]}",
                           f"rebuild it: `{settings.command('build-image', tag)}`")
    return attrs


def baked_image(config: Config, plan: Plan, attrs: dict[str, Any], *, settings: Settings,
                console: Console) -> runtime_image.Image:
    """The image build/oci names for the tag; it must be the engine's (the smoke-tested)."""
    baked = runtime_image.find(Folders.of(config), plan, console=console)
    if baked is None or baked.config != attrs.get("Id"):
        where = "has none" if baked is None else f"has {baked.config[:19]}"
        raise PublishError(f"the engine's {plan.tag.image_ref} ({str(attrs.get('Id'))[:19]}) "
                           f"is not the image baked into {Folders.of(config).oci} ({where})",
                           f"rebuild it: `{settings.command('build-image', plan.tag.name)}`, then "
                           "smoke")
    return baked


def require_intact(baked: runtime_image.Image, tag: str, *, settings: Settings,
                   console: Console) -> None:
    """Every blob that is to leave the machine hashed: a damaged one is removed, never sent."""
    bad = image_layout.Layout(baked.layout, console).damaged(baked.image, full=True)
    if bad:
        raise PublishError(f"{baked.layout}: {len(bad)} blob(s) of {tag} are not the bytes of "
                           f"their digest ({bad[0][:19]}...); removed, nothing was pushed",
                           f"rebuild it: `{settings.command('build-image', tag)}`, smoke it, "
                           "publish again")


def check_pushed(session: Session, name: str, digest: str, *, console: Console) -> None:
    """The registry serves digest under name, else exit 7 (a race, or a rewriting registry)."""
    remote = session.remote
    found = session.manifest_digest(name)
    if found != digest:
        raise PublishError(f"{remote.host}/{remote.path}:{name} is {found or 'missing'} in the "
                           f"registry after the push, not the pushed {digest}",
                           "another push may have raced this one; check the registry and retry")
    console.detail(f"verified {remote.host}/{remote.path}:{name} = {digest}")


def write_record(folder: Path, release: Release, *, console: Console) -> None:
    """build/releases/<tag>.json, then its line in the releases index."""
    path = folder / f"{release.tag}.json"
    atomic_write(path, json.dumps(release.to_json(), indent=2, sort_keys=True) + "\n")
    console.detail(f"release record: {path} (index: {releases.add(folder, release)})")


def _build_record(config: Config, plan: Plan) -> dict[str, Any]:
    """How the wheels were built (job count, kernel reuse): host state, kept out of the image."""
    folder = Folders.of(config).wheel_set(plan.wheels_key)
    if not (folder / REPORT).is_file():
        return {}
    built = read_report(folder)
    return {**({"jobs": built.jobs.to_json()} if built.jobs else {}),
            **({"kernels": built.kernels.to_json()} if built.kernels else {}),
            **({"nvcc": built.nvcc} if built.nvcc else {})}
