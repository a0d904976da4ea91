"""publish of a multi-platform tag: one release for every platform it names, or none.

Every platform's image must have passed its smoke checks before anything is sent. Then each
goes to the registry by digest, under its own per-build tag (NAME-arm64-<inputs>: a name the
registry's garbage collector keeps); then the OCI image index that lists exactly those
digests, under NAME-<inputs>; then the release record; and last the release tag NAME moves to
the index, in one manifest push. Each platform's image gets its SBOM and statements
(attest.attach); the index digest and each image digest get the key's signature. An
interruption at any point leaves NAME where it was, and publishing again finishes the job.
NAME already at this index: nothing is sent.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sparkbake import planning
from sparkbake.attest.signing import SigningKey
from sparkbake.bake import runtime_image
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.errors import ConfigError, PublishError
from sparkbake.hashing import data_hash
from sparkbake.oci import image_layout, registry_access
from sparkbake.oci.docker_engine import Client
from sparkbake.publish import attach, push, releases, smoke_gate
from sparkbake.publish.record import Release, ReleaseSmoke

__all__ = ["index_document", "publish_release"]


@dataclass(frozen=True)
class _Platform:
    """One platform's image, checked and ready to go."""

    plan: planning.Plan
    attrs: dict[str, Any]
    baked: runtime_image.Image
    smoked: ReleaseSmoke

    @property
    def per_build(self) -> str:
        return f"{self.plan.tag.name}-{self.plan.inputs[:12]}"


def publish_release(client: Client, config: Config, settings: Settings, name: str,
                    tags: tuple[Tag, ...], registry: str | None, force: bool,
                    skip_smoke: bool = False, key: SigningKey | None = None, *,
                    console: Console) -> Release:
    """Publish the platforms' images and the index of them as release `name` (above)."""
    ready = [_ready(client, config, tag, skip_smoke, console=console,
                    settings=settings) for tag in tags]  # all, before any push
    repository = _repository(tags, registry)
    data = image_layout.canonical(index_document(ready))
    index = image_layout.Descriptor(image_layout.INDEX_TYPE,
                                  "sha256:" + hashlib.sha256(data).hexdigest(), len(data))
    inputs = data_hash([p.plan.inputs for p in ready])
    per_build = f"{name}-{inputs[:12]}"
    target = push.Target.of(client, settings, repository, [per_build, name], {index.digest},
                            force, console=console)
    if target.current[name] == index.digest:
        console.notice(f"publish: {repository}:{name} is already this release ({index.digest})")
    records = tuple(_push_platform(config, target, p, force, key, console=console) for p in ready)
    if target.current[per_build] != index.digest:
        console.detail(f"+ push index {index.digest} ({len(ready)} platforms) -> "
                       f"{repository}:{per_build}")
        _put_first_index(target, data, index, per_build)
    push.check_pushed(target.session, per_build, index.digest, console=console)
    layout = image_layout.Layout(ready[0].baked.layout, console)
    signed = attach.check_signers(target.session, layout, repository, index.digest, key, force)
    attach.sign(target.session, layout, repository, index.digest, key, (name, per_build), signed,
                console=console)
    release = _record(repository, name, per_build, index.digest, inputs, records)
    releases.write_record(Folders.of(config).releases, release, console=console)
    if target.current[name] != index.digest:
        console.detail(f"+ tag {repository}:{name} -> {index.digest}")
        target.session.put_index(data, index, name)
    push.check_pushed(target.session, name, index.digest, console=console)
    return release


def _put_first_index(target: push.Target, data: bytes, index: image_layout.Descriptor,
                     per_build: str) -> None:
    """The index under its per-build tag; a registry that refuses it (4xx) is said to, with
    the release tag untouched."""
    try:
        target.session.put_index(data, index, per_build)
    except PublishError as exc:
        if not re.search(r"HTTP 4\d\d", exc.message) or "HTTP 401" in exc.message:
            raise
        raise PublishError(f"{target.repository} refused the image index of the release "
                           f"({exc.message.split(': ', 1)[-1]}); the release tag was not "
                           "touched", "publish to a registry that takes OCI image indexes "
                           "(distribution 2.7 and later, and the hosted ones), or publish "
                           "each platform's tag on its own") from exc


def index_document(ready: list[_Platform]) -> dict[str, Any]:
    """The OCI image index of the platforms' manifests, in the order the tag names them."""
    manifests = []
    for one in ready:
        platform = one.plan.tag.platform
        manifests.append({"mediaType": one.baked.image.media_type,
                          "digest": one.baked.image.digest, "size": one.baked.image.size,
                          "platform": {"architecture": platform.architecture,
                                       "os": platform.os}})
    return {"schemaVersion": 2, "mediaType": image_layout.INDEX_TYPE, "manifests": manifests}


def _ready(client: Client, config: Config, tag: Tag, skip_smoke: bool, *, console: Console,
           settings: Settings) -> _Platform:
    plan = planning.make(config, tag)
    attrs = push.local_image(client, plan, settings=settings)
    baked = push.baked_image(config, plan, attrs, settings=settings, console=console)
    push.require_intact(baked, tag.name, settings=settings, console=console)
    smoked = smoke_gate.smoke_gate(Folders.of(config).smoke_record(tag.name), tag.name,
                                   baked.config,
                             skip_smoke, console=console, settings=settings)
    return _Platform(plan, attrs, baked, smoked)


def _repository(tags: tuple[Tag, ...], registry: str | None) -> str:
    found = {tag.repository for tag in tags}
    if len(found) != 1:
        raise ConfigError(f"the platforms of {tags[0].release} name {len(found)} repositories "
                          f"({', '.join(sorted(found))})", "give them one repository")
    return registry_access.retarget(found.pop(), registry)


def _push_platform(config: Config, target: push.Target, one: _Platform,
                   force: bool, key: SigningKey | None, *, console: Console) -> Release:
    """One platform's blobs and manifest, under its per-build tag; its record."""
    target.current.setdefault(one.per_build, target.session.manifest_digest(one.per_build))
    push.check_overwrite(f"{target.repository}:{one.per_build}",
                         target.current[one.per_build], {one.baked.image.digest}, force,
                         console=console)
    pushed, sent = target.push(one.baked, one.per_build)
    attached = attach.attach_baked(target.session, config, one.plan, one.baked, key,
                                   (one.per_build,), force, console=console)
    manifest = releases.image_manifest(image_layout.Layout(one.baked.layout, console),
                                       one.baked.image)
    return push.platform_release(config, one.plan, target.repository, (one.per_build,),
                                 pushed, sent, one.smoked, one.baked, one.attrs, manifest,
                                 attached)


def _record(repository: str, name: str, per_build: str, digest: str, inputs: str,
            platforms: tuple[Release, ...]) -> Release:
    """The release's record: the index, and each platform's own record inside it."""
    first = platforms[0]
    passed = all(p.smoke_result == "passed" for p in platforms)
    # each platform's record has its own verdict; the release passed only if all did
    smoke = ReleaseSmoke("passed", checks={"platforms": len(platforms)}) if passed else \
        ReleaseSmoke("skipped", found="missing")
    return Release(
        tag=name, repository=repository,
        images=(f"{repository}:{name}", f"{repository}:{per_build}"), digest=digest,
        pinned=f"{repository}@{digest}", smoke=smoke, manifest=None, transfer=None,
        image_id="", build=None, inputs=inputs, upstream=first.upstream, series=first.series,
        env=first.env, labels={}, published=datetime.now(UTC).isoformat(timespec="seconds"),
        platforms=platforms)
