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

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sparkbake import records
from sparkbake.attest.signing import SigningKey
from sparkbake.bake import runtime_image
from sparkbake.bake.runtime_image import INPUTS_LABEL
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.core.baked_manifest import BakedManifest
from sparkbake.core.folders import Folders
from sparkbake.errors import PublishError
from sparkbake.oci import image_layout, registry_access, transfer
from sparkbake.oci.distribution import Session
from sparkbake.oci.docker_engine import (
    Client,
    image_attrs,
    image_exists,
    image_labels,
)
from sparkbake.planning import Plan, upstream_pin
from sparkbake.publish import attach, releases, shipped_with, smoke_gate
from sparkbake.publish.record import Attached, Release, ReleaseSeries, ReleaseSmoke
from sparkbake.wheels.report import REPORT, read_report

__all__ = ["Target", "baked_image", "check_overwrite", "check_pushed", "local_image",
           "platform_release", "publish", "require_intact"]



def publish(client: Client, config: Config, settings: Settings, plan: Plan,
            registry: str | None, force: bool, skip_smoke: bool = False,
            key: SigningKey | None = None, *, console: Console) -> Release:
    """Push the tag's smoke-tested image under `<tag>-<inputs[:12]>`, write
    build/releases/<tag>.json and its line in the releases index, then move `<tag>` to it;
    each name verified in the registry; return the record.

    In that order, so an interruption never leaves the moving tag on an image without its
    per-build tag and its record; publishing again finishes what is missing."""
    repository = registry_access.retarget(plan.tag.repository, registry)
    attrs = local_image(client, plan, settings=settings)
    baked = baked_image(config, plan, attrs, settings=settings, console=console)
    require_intact(baked, plan.tag.name, settings=settings, console=console)
    smoked = smoke_gate.smoke_gate(Folders.of(config).smoke_record(plan.tag.name), plan.tag.name,
                        baked.config, skip_smoke, console=console, settings=settings)
    moving, per_build = plan.tag.name, f"{plan.tag.name}-{plan.inputs[:12]}"
    target = Target.of(client, settings, repository, [per_build, moving],
                       {baked.image.digest}, force, console=console)
    pushed, sent = target.push(baked, per_build)
    attached = attach.attach_baked(target.session, config, plan, baked, key, (moving, per_build),
                                   force, console=console)
    manifest = releases.image_manifest(image_layout.Layout(baked.layout, console), baked.image)
    release = platform_release(config, plan, repository, (moving, per_build), pushed, sent,
                               smoked, baked, attrs, manifest, attached)
    releases.write_record(Folders.of(config).releases, release, console=console)
    target.move(baked, moving)
    return release


def platform_release(config: Config, plan: Plan, repository: str, names: tuple[str, ...],
                     pushed: str, sent: transfer.Sent, smoked: ReleaseSmoke,
                     baked: runtime_image.Image, attrs: dict[str, Any],
                     manifest: BakedManifest | None,
                     attached: Attached | None = None) -> Release:
    """The record of one image pushed under names: what it is and what it was made of
    (manifest: the image's /opt/sparkbake/manifest.json, releases.image_manifest)."""
    return Release(
        tag=plan.tag.name, repository=repository,
        images=tuple(f"{repository}:{n}" for n in names), digest=pushed,
        pinned=f"{repository}@{pushed}", smoke=smoked,
        manifest=manifest,
        transfer=sent.record(), image_id=baked.config, build=_build_record(config, plan),
        inputs=plan.inputs, upstream={"key": plan.tag.upstream.key,
                                      **upstream_pin(plan.tag.upstream)},
        series=tuple(ReleaseSeries(s.name, s.sha256, s.patches) for s in plan.series),
        env=dict(plan.tag.env), labels=image_labels(attrs),
        published=datetime.now(UTC).isoformat(timespec="seconds"),
        attestations=attached,
        locks=shipped_with.locks(config, plan.tag),
        verdicts=shipped_with.backend_verdicts(plan.tag))


def _build_record(config: Config, plan: Plan) -> dict[str, Any]:
    """How the wheels were built (job count, kernel reuse): host state, kept out of the image."""
    folder = Folders.of(config).wheel_set(plan.wheels_key)
    if not (folder / REPORT).is_file():
        return {}
    built = read_report(folder)
    return {**({"jobs": records.to_json(built.jobs)} if built.jobs else {}),
            **({"kernels": records.to_json(built.kernels)} if built.kernels else {}),
            **({"nvcc": built.nvcc} if built.nvcc else {})}


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
        insecure = registry_access.engine_insecure(client)
        session = registry_access.open_session(repository, settings, insecure=insecure,
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


