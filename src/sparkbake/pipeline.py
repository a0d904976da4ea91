"""The pipeline as a list of small stage calls; the CLI's commands end here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import bases, embedded_registry, images, patches, registry, smoke, sources, wheels
from . import plan as plan_mod
from .config import Config, Tag
from .docker_api import Client, connect
from .errors import EngineError
from .plan import Plan, StagePlan
from .proc import echo
from .settings import HostSettings, host_settings

__all__ = ["plan_report", "publish", "registry_command", "run_until", "smoke_tag", "stage_states"]

STAGES = ("fetch", "patch", "wheels", "build-image")


def stage_states(config: Config, plan: Plan, client: Client | None) -> list[StagePlan]:
    """Each stage's key and state; image state is `unknown` without an engine."""
    build = config.build_dir
    patch_state = "blocked" if plan.problems else _exists(build / "patched" / plan.patch_key /
                                                          "patches.json")
    bake_state = "unknown"
    if client is not None:
        bake_state = "cached" if images.is_current(client, plan) else "missing"
    smoke_record = build / "smoke" / f"{plan.tag.name}.json"
    return [
        StagePlan("fetch", plan.fetch_key, _exists(build / "sources" / plan.fetch_key / "tree"),
                  _upstream_text(plan.tag)),
        StagePlan("patch", plan.patch_key, patch_state,
                  "; ".join(plan.problems) or ", ".join(plan.tag.series)),
        StagePlan("kernels", plan.kernel_key,
                  _exists(config.wheels_dir / "kernels" / plan.kernel_key / "kernels.json"),
                  "compiled extensions; cached = no compiler runs"),
        StagePlan("wheels", plan.wheels_key,
                  _exists(config.wheels_dir / plan.wheels_key / wheels.REPORT),
                  f"{plan.tag.sm_arch} on {plan.tag.builder.name}"),
        StagePlan("bake", plan.inputs, bake_state, plan.tag.image_ref),
        StagePlan("smoke", plan.inputs, _record_state(smoke_record, plan.inputs),
                  str(smoke_record.relative_to(config.root))),
        StagePlan("publish", plan.inputs,
                  _record_state(build / "releases" / f"{plan.tag.name}.json", plan.inputs),
                  f"{plan.tag.name}, {plan.tag.name}-{plan.inputs[:12]}"),
    ]


def plan_report(config: Config, tag: Tag, as_json: bool) -> str:
    plan = plan_mod.make(config, tag)
    try:
        client: Client | None = connect()
    except EngineError:
        client = None
    states = stage_states(config, plan, client)
    return plan_mod.render_json(plan, states) if as_json else plan_mod.render_text(states)


def run_until(config: Config, tag: Tag, stage: str) -> int:
    """Run fetch .. stage; every stage whose key is cached is skipped."""
    plan = plan_mod.make(config, tag)
    settings = host_settings()
    pristine = sources.fetch(tag.upstream, config.build_dir / "sources" / plan.fetch_key, settings)
    if stage == "fetch":
        return _done(f"pristine tree: {pristine}")
    patched = patches.apply(plan, pristine, config.build_dir / "patched" / plan.patch_key)
    if stage == "patch":
        return _done(f"patched tree: {patched.path} (hash {patched.tree_hash[:16]})")
    client = connect()
    built = _wheels(client, config, plan, patched, settings)
    if stage == "wheels":
        return _done(f"wheels: {built.folder}")
    runtime_base = bases.ensure(client, tag.runtime, tag.platform, config.build_dir, settings)
    image_id = images.bake(client, plan, runtime_base, built, patched, config.build_dir)
    return _done(f"image: {tag.image_ref} ({image_id[:19]}, inputs {plan.inputs[:12]})")


def _wheels(client: Client, config: Config, plan: Plan, patched: patches.PatchedTree,
            settings: HostSettings) -> wheels.WheelSet:
    folder = config.wheels_dir / plan.wheels_key
    builder = ""
    if not (folder / wheels.REPORT).is_file():  # cached wheels need no builder image
        base = bases.ensure(client, plan.tag.builder, plan.tag.platform, config.build_dir,
                            settings)
        builder = wheels.builder_image(client, base, settings, config.build_dir)
    request = wheels.BuildRequest(
        tag=plan.tag, builder=builder, patched=patched, folder=folder,
        kernels=config.wheels_dir / "kernels" / plan.kernel_key,
        log=config.build_dir / "logs" / f"{plan.tag.name}-wheels.log",
        jobs=wheels.compile_jobs(client.info(), settings), memory=settings.builder_memory,
    )
    return wheels.build(client, request)


def smoke_tag(config: Config, tag: Tag, gpu: str) -> int:
    result: dict[str, Any] = smoke.run(connect(), config, plan_mod.make(config, tag), gpu)
    return _done(f"smoke: {tag.name} passed ({len(result['checks'])} checks)")


def publish(config: Config, tag: Tag, registry_host: str | None, force: bool) -> int:
    record = registry.publish(connect(), config, plan_mod.make(config, tag), registry_host, force)
    return _done(f"published {tag.name}: {record['digest']}")


def registry_command(config: Config, action: str, port: int) -> int:
    if action == "start":
        echo(embedded_registry.start(config, port))
    elif action == "stop":
        echo("registry stopped" if embedded_registry.stop(config) else "registry was not running")
    else:
        echo(embedded_registry.status(config, port))
    return 0


def _done(message: str) -> int:
    echo(message)
    return 0


def _exists(path: Path) -> str:
    return "cached" if path.exists() else "missing"


def _record_state(path: Path, inputs: str) -> str:
    if not path.is_file():
        return "missing"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return "stale"  # unreadable: it will be written anew
    return "cached" if isinstance(record, dict) and record.get("inputs") == inputs else "stale"


def _upstream_text(tag: Tag) -> str:
    pin = plan_mod.upstream_pin(tag.upstream)
    return f"{tag.upstream.key} ({pin['kind']})"

