"""deploy of a multi-platform release: each node pulls the release's index digest, and its
engine takes its own platform's image from it. Nodes go by platform: each group is deployed
as that platform's tag, and every node must then hold the platform's image ID under the
release's repository digest, as the release record says."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from sparkbake import planning
from sparkbake.attest.image_identity import SignedImage
from sparkbake.config.platforms import Platform, of_machine, platform_name
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.deploy import rollout
from sparkbake.deploy.report import DeployReport
from sparkbake.errors import PublishError
from sparkbake.nodes.engines import Node, connect
from sparkbake.publish import releases
from sparkbake.publish.record import Release
from sparkbake.smoke import checks

__all__ = ["deploy_release"]


def deploy_release(config: Config, name: str, nodes: list[Node],
                   facts: Callable[[planning.Plan], checks.Facts], options: checks.Options,
                   stream: bool = False, *, settings: Settings, console: Console,
                   signed: tuple[SignedImage, ...] = ()) -> list[DeployReport]:
    """The release on every node, by the index digest; one report per platform's nodes
    (signed: what the signed index names, each node's image checked against it)."""
    record = releases.read_record(Folders.of(config).releases, name, settings=settings)
    if not record.platforms:
        raise PublishError(f"the release record of {name} lists no platforms",
                           f"publish it again: `{settings.command('publish', name)}`")
    reports = []
    for platform, group in _by_platform(nodes).items():
        tag = _platform_tag(config, name, platform)
        plan = planning.make(config, tag)
        pulled = _pulled_release(record, tag, plan, settings=settings)
        reports.append(rollout.deploy(config, plan, group, functools.partial(facts, plan),
                                      options, stream=stream, release=pulled, console=console,
                                      settings=settings, signed=signed))
    return reports


def _by_platform(nodes: list[Node]) -> dict[Platform, list[Node]]:
    """Nodes by their engines' platform (linux/arm64), in the order given."""
    groups: dict[Platform, list[Node]] = {}
    for node in nodes:
        client = connect(node)
        try:
            machine = str(client.info().get("Architecture"))
        finally:
            client.close()
        groups.setdefault(of_machine(machine), []).append(node)
    return groups


def _platform_tag(config: Config, name: str, platform: Platform) -> Tag:
    tag = config.tags.get(platform_name(name, platform))
    if tag is None or tag.release != name:
        have = ", ".join(str(config.tags[t].platform) for t in config.releases.get(name, ()))
        raise PublishError(f"the release {name} has no {platform} image (it has {have})",
                           "deploy to nodes of its platforms, or add the platform to the tag")
    return tag


def _pulled_release(record: Release, tag: Tag, plan: planning.Plan, *,
                    settings: Settings) -> Release:
    """The platform's own record, pulled by the release's index digest and named by the
    release's names; it must be of what versions.yaml describes now."""
    mine = next((p for p in record.platforms if p.tag == tag.name), None)
    if mine is None or mine.inputs != plan.inputs:
        raise PublishError(f"the release {record.tag} holds no image of {tag.name} as "
                           f"versions.yaml now describes it (inputs {plan.inputs[:12]})",
                           f"publish it again: `{settings.command('publish', record.tag)}`")
    return replace(mine, pinned=record.pinned, images=record.images)
