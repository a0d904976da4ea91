"""What `plan` says of each stage: its key, and whether the next run skips it. Each state
comes from the test the stage itself makes before it runs, so the two cannot disagree."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sparkbake import planning
from sparkbake.bake import runtime_image
from sparkbake.config.model import Config, DirUpstream, Tag, Upstream
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.core.stages import PlanState, Stage
from sparkbake.fetch import remote_patches, upstream_tree
from sparkbake.oci import emulation
from sparkbake.oci.docker_engine import Client, image_attrs_or_none
from sparkbake.patch import apply
from sparkbake.planning import Plan, StagePlan
from sparkbake.wheels import container_build
from sparkbake.wheels.report import read_report

__all__ = ["COVERS", "stage_states"]

# the stages whose inputs each stage's key covers
COVERS = {Stage.PATCH: (Stage.FETCH, Stage.PATCH), Stage.KERNELS: (Stage.FETCH, Stage.KERNELS),
          Stage.WHEELS: (Stage.FETCH, Stage.PATCH, Stage.WHEELS),
          Stage.BAKE: (Stage.FETCH, Stage.PATCH, Stage.WHEELS, Stage.BAKE)}


def stage_states(config: Config, plan: Plan, client: Client | None, *,
                 console: Console) -> list[StagePlan]:
    """Each stage's key and state; the image's state is `unknown` without an engine."""
    layout = Folders.of(config)
    fetched = (upstream_tree.is_fetched(plan.tag.upstream, layout.source(plan.fetch_key))
               and not remote_patches.missing(plan.remote))
    patch_state: PlanState = ("blocked" if plan.problems else
                              _cached(apply.is_patched(layout.patched(plan.patch_key))))
    kernels_state = _cached(container_build.reusable_kernels(layout.kernels(plan.kernel_key))
                            is not None)
    wheels_state = _cached(container_build.is_built(layout.wheel_set(plan.wheels_key)))
    bake_state: PlanState = "unknown"
    if client is not None:
        attrs = image_attrs_or_none(client, plan.tag.image_ref)
        bake_state = _cached(runtime_image.is_current(attrs, plan, layout,
                                                  _wheels_content(layout, plan), console=console))
    smoke_record = layout.smoke_record(plan.tag.name)
    why = _why(layout, plan)
    emulated = _emulation_text(plan.tag, client)
    return [
        StagePlan(Stage.FETCH, plan.fetch_key, _cached(fetched), _upstream_text(plan)),
        StagePlan(Stage.PATCH, plan.patch_key, patch_state, "; ".join(plan.problems)
                  or why(Stage.PATCH, patch_state) or ", ".join(plan.tag.series)),
        StagePlan(Stage.KERNELS, plan.kernel_key, kernels_state,
                  why(Stage.KERNELS, kernels_state) or _kernels_text(plan.tag)),
        StagePlan(Stage.WHEELS, plan.wheels_key, wheels_state,
                  why(Stage.WHEELS, wheels_state)
                  or _wheels_text(plan.tag) + ("" if plan.tag.kernels else emulated)),
        StagePlan(Stage.BAKE, plan.inputs, bake_state, why(Stage.BAKE, bake_state)
                  or plan.tag.image_ref + (emulated and " (venv made emulated, files native)")),
        StagePlan(Stage.SMOKE, plan.inputs, _record_state(smoke_record, plan.inputs),
                  str(smoke_record.relative_to(config.root)) + emulated),
        _publish_plan(layout, plan),
    ]


def _publish_plan(layout: Folders, plan: Plan) -> StagePlan:
    """A tag's own release, or, for one platform of a multi-platform tag, its image in the
    release's record (under its per-build tag, in the release's index)."""
    release = plan.tag.release
    if release is None:
        return StagePlan(Stage.PUBLISH, plan.inputs,
                         _record_state(layout.release_record(plan.tag.name), plan.inputs),
                         f"{plan.tag.name}, {plan.tag.name}-{plan.inputs[:12]}")
    return StagePlan(Stage.PUBLISH, plan.inputs,
                     _platform_state(layout.release_record(release), plan),
                     f"{plan.tag.name}-{plan.inputs[:12]} in the index {release}")


def _wheels_content(layout: Folders, plan: Plan) -> str | None:
    """What the bake compares with its image's wheels label: the wheels entry's content,
    None before the wheels stage (the bake then decides on the wheels it gets)."""
    folder = layout.wheel_set(plan.wheels_key)
    if not container_build.is_built(folder):
        return None
    return runtime_image.wheels_content(read_report(folder))


def _cached(done: bool) -> PlanState:
    return "cached" if done else "missing"


def _why(layout: Folders, plan: Plan) -> Callable[[Stage, PlanState], str]:
    """For a stage that will run: what changed since the last build-image of the tag."""
    try:
        before = json.loads(layout.last_build(plan.tag.name).read_text())
    except (OSError, ValueError):
        before = {}

    now = json.loads(json.dumps(plan.stage_inputs))  # tuples as the record has them: lists

    def explain(stage: Stage, state: PlanState) -> str:
        if state != "missing" or not before:
            return ""
        changes = dict.fromkeys(change for covered in COVERS[stage] for change in
                                planning.changed_inputs(before.get(covered, {}), now[covered]))
        return "reruns: " + ("; ".join(changes) if changes else "not built with these inputs")

    return explain


def _platform_state(path: Path, plan: Plan) -> PlanState:
    """cached when the release's record holds this platform's image of these inputs."""
    try:
        record = json.loads(path.read_text())
        platforms = record.get("platforms") or []
    except (OSError, ValueError, AttributeError):
        return "missing" if not path.is_file() else "stale"
    mine = [p for p in platforms if isinstance(p, dict) and p.get("tag") == plan.tag.name]
    return "cached" if any(p.get("inputs") == plan.inputs for p in mine) else \
        "stale" if mine else "missing"


def _record_state(path: Path, inputs: str) -> PlanState:
    if not path.is_file():
        return "missing"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return "stale"  # unreadable: it will be written anew
    return "cached" if isinstance(record, dict) and record.get("inputs") == inputs else "stale"


def _wheels_text(tag: Tag) -> str:
    if tag.kernels:
        return f"{tag.sm_arch}: {tag.kernels.wheel} + the series, on this host"
    target = "the CPU" if tag.upstream.device == "cpu" else tag.sm_arch
    return f"{target} on {tag.builder.name}"


def _emulation_text(tag: Tag, client: Client | None) -> str:
    """Where the tag's containers run under qemu: on another platform than the engine's (or,
    without an engine, this host's)."""
    native = emulation.engine_platform(client) if client else emulation.host_platform()
    return "" if tag.platform == native else f"; emulated: {tag.platform} on {native}"


def _kernels_text(tag: Tag) -> str:
    if tag.kernels:
        return f"from {tag.kernels.wheel} (seed: no compiler)"
    return "compiled extensions; cached = no compiler"


def _upstream_text(plan: Plan) -> str:
    pin = planning.upstream_pin(plan.tag.upstream)
    third = plan.stage_inputs[Stage.WHEELS].get("third-party sources", [])
    extra = f" + {len(third)} third-party sources (locked)" if third else ""
    found = plan.remote
    extra += f" + {len(found)} remote patch(es)" if found else ""
    return f"{plan.tag.upstream.key} ({pin['kind']}){_dated(plan.tag.upstream)}{extra}"


def _dated(upstream: Upstream) -> str:
    """A folder's source date, and where it comes from: what its image's dates will be."""
    if not isinstance(upstream, DirUpstream) or upstream.source_date_epoch is not None:
        return ""
    date, source = upstream_tree.dir_dating(upstream.path)
    day = datetime.fromtimestamp(date, UTC).strftime("%Y-%m-%d")
    return f", dated {day} ({source})"
