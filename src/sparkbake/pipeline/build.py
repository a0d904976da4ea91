"""The build stages as typed functions: fetch -> Source, patch -> PatchedTree,
wheels -> WheelSet, bake -> Image. Each is skipped when its cache entry is there (the test
is the one `plan` uses: pipeline/status.py); each later stage takes the earlier products.
`run_stages` returns the last stage's outcome with every stage run of the build."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sparkbake import bases, planning
from sparkbake.bake import runtime_image
from sparkbake.config.model import Config, Tag
from sparkbake.config.settings import Settings
from sparkbake.console.display import Console, StageRun
from sparkbake.core.folders import Folders
from sparkbake.core.stages import Stage
from sparkbake.fetch import remote_patches, thirdparty, upstream_tree
from sparkbake.files import atomic_write
from sparkbake.lock import pins
from sparkbake.oci.docker_engine import Client, connect
from sparkbake.patch import apply
from sparkbake.patch.apply import PatchedTree
from sparkbake.planning import Plan
from sparkbake.run import Run
from sparkbake.wheels import container_build, entrycheck
from sparkbake.wheels.container_build import WheelSet

__all__ = ["Build", "Outcome", "Source", "bake", "fetch", "fetched_plan", "of_tag", "patch",
           "run_stages", "wheels", "with_locks"]


@dataclass(frozen=True)
class Source:
    """The fetch stage's product: the pristine upstream tree and its SOURCE_DATE_EPOCH."""

    tree: Path
    source_date: int


@dataclass(frozen=True)
class Build:
    """What every stage of one build reads: the run (its versions.yaml, settings and
    console, and so where the outputs go) and the tag's plan (its remote patches fetched:
    fetched_plan), how to build; and the stage runs so far, in order (the one list of them)."""

    run: Run
    plan: Plan
    options: apply.Options = field(default_factory=apply.Options)
    load: bool = True  # False: the engine's tag is left alone (verify's rebuild)
    # shared by the copies `replace` makes (with_locks): one build, one list
    runs: list[StageRun] = field(default_factory=list)

    @property
    def config(self) -> Config:
        return self.run.config

    @property
    def settings(self) -> Settings:
        return self.run.settings

    @property
    def console(self) -> Console:
        return self.run.console

    @property
    def layout(self) -> Folders:
        return self.run.folders

    @property
    def tag(self) -> Tag:
        return self.plan.tag

    def log(self, stage: Stage) -> Path:
        return self.layout.stage_log(self.tag.name, stage)

    @contextmanager
    def stage(self, stage: Stage, key: str | None = None) -> Iterator[StageRun]:
        """The stage's line and its log, under key (default: the stage's key in the plan);
        its run kept in runs."""
        with self.console.stage(stage, self.plan.key(stage) if key is None else key,
                                self.log(stage)) as run:
            if not any(kept is run for kept in self.runs):  # stages do not nest: once
                self.runs.append(run)
            yield run


@dataclass(frozen=True)
class Outcome:
    """A stage command's result: its line for the user, its facts for --json, and the stage
    runs that led to it, in order (the summary's rows)."""

    text: str
    facts: dict[str, Any]  # JSON: printed by --json, written by --metadata-file
    runs: tuple[StageRun, ...] = ()


def fetch(build: Build, *, third_party: bool = False) -> Source:
    """The pristine tree (third_party: and the tag's locked CMake sources, verified: what
    `sparkbake fetch` does besides). The remote patches were fetched with the plan."""
    plan, layout = build.plan, build.layout
    with build.stage(Stage.FETCH):
        tree = upstream_tree.fetch(build.tag.upstream, layout.source(plan.fetch_key),
                                   build.settings, console=build.console)
        if third_party:
            found = thirdparty.fetch_locked(build.config, build.tag, build.settings,
                                            console=build.console)
            build.console.detail(f"third-party sources: {len(found)} verified" if found else
                 "third-party sources: none locked")
        return Source(tree, upstream_tree.source_date(build.tag.upstream, tree.parent))


def patch(build: Build, source: Source) -> PatchedTree:
    plan = build.plan
    with build.stage(Stage.PATCH):
        return apply.apply(plan, source.tree, build.layout.patched(plan.patch_key),
                             build.options, console=build.console)


class Engine:
    """The build's Docker engine, connected on first use: cached wheels and an image the
    local engine has current need no SDK client (runtime_image.current_in_local_engine)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            self._client = connect(self.settings)
        return self._client


def wheels(build: Build, engine: Engine, source: Source, patched: PatchedTree) -> WheelSet:
    with build.stage(Stage.WHEELS):
        return _wheels(build, engine, source, patched)


def bake(build: Build, engine: Engine, source: Source, patched: PatchedTree,
         built: WheelSet) -> runtime_image.Image:
    config, tag = build.config, build.tag
    with build.stage(Stage.BAKE):
        runtime_lock = pins.require_runtime_lock(config, tag, patched.path, settings=build.settings)
        if build.load and (current := runtime_image.current_in_local_engine(
                build.plan, build.layout, built, build.settings.environ,
                console=build.console)) is not None:
            return current
        from sparkbake.lock import wheelhouse  # here, past the cached check: see _wheels

        client = engine.client()
        runtime_base = bases.ensure(client, tag.runtime, tag.platform, config.build_dir,
                                    build.settings, console=build.console)
        house = wheelhouse.ensure(runtime_lock, tag, build.layout,
                                  console=build.console) if runtime_lock else None
        return runtime_image.make_image(client, build.run, runtime_image.Bake(
            build.plan, runtime_base, built, patched, source.source_date,
            build.log(Stage.BAKE), runtime_wheels=house, runtime_lock=runtime_lock,
            load=build.load))


def with_locks(build: Build, tree: PatchedTree) -> Build:
    """The build once the patched tree's locks are there: a missing sources lock (refused
    under CI: missing_lock) and missing builder or runtime locks (pins.make_missing) are
    made here, before the wheels stage pulls its builder base, and the plan is remade only
    then, since the locks are in the wheels' keys."""
    made = False
    if thirdparty.missing_lock(build.config, build.tag, tree.path, build.settings):
        # `lock`'s stage, as `sparkbake lock` shows it: the git commands go to its log
        with build.stage(Stage.LOCK, build.tag.name):
            thirdparty.lock_on_first_use(build.config, build.tag, tree.path, build.settings,
                                         console=build.console)
        made = True
    made = bool(pins.make_missing(build.config, build.tag, build.settings, tree.path,
                                  console=build.console)) or made
    return replace(build, plan=planning.make(build.config, build.tag)) if made else build


def patched(build: Build) -> PatchedTree:
    """fetch, patch."""
    return patch(build, fetch(build))


def image(build: Build) -> runtime_image.Image:
    """fetch, patch, wheels, bake: what build-image does."""
    return _baked(build)[1]


def _baked(build: Build) -> tuple[Build, runtime_image.Image]:
    """The image, and the build as it ended (its plan remade if the sources lock was made)."""
    source = fetch(build)
    tree = patch(build, source)
    build = with_locks(build, tree)
    engine = Engine(build.settings)
    return build, bake(build, engine, source, tree, wheels(build, engine, source, tree))


def fetched_plan(run: Run, tag: Tag) -> Plan:
    """The plan once the tag's remote patches are fetched: until then their content, and so
    whether they touch kernels, is unknown (the fetch stage's network, done first, and only
    here: a build's stages take them from this plan, made once)."""
    remote_patches.fetch(planning.remote_of(run.config, tag), run.settings, run.console)
    return planning.make(run.config, tag)


def of_tag(run: Run, tag: Tag, options: apply.Options | None = None, *,
           load: bool = True) -> Build:
    """The tag's build in the run, its plan made once the remote patches are fetched."""
    return Build(run, fetched_plan(run, tag), options or apply.Options(), load)


def run_stages(build: Build, last: Stage) -> Outcome:
    """The build stages up to last, each skipped when cached; the last one's outcome, with
    the build's stage runs."""
    outcome = UNTIL[last](build)
    return replace(outcome, runs=tuple(build.runs))


def _fetch_outcome(build: Build) -> Outcome:
    tree = fetch(build, third_party=True).tree
    return Outcome(f"pristine tree: {tree}", _facts(build, tree=str(tree)))


def _patch_outcome(build: Build) -> Outcome:
    tree = patched(build)
    return Outcome(f"patched tree: {tree.path} (hash {tree.tree_hash[:16]})",
                   _facts(build, tree=str(tree.path), tree_hash=tree.tree_hash))


def _wheels_outcome(build: Build) -> Outcome:
    source = fetch(build)
    tree = patch(build, source)
    build = with_locks(build, tree)
    built = wheels(build, Engine(build.settings), source, tree)
    return Outcome(f"wheels: {built.folder}",
                   _facts(build, wheels=str(built.folder), files=built.files))


def _image_outcome(build: Build) -> Outcome:
    build, baked = _baked(build)
    plan, digest = build.plan, baked.image.digest
    # what `plan` compares with, to say why a stage reruns
    atomic_write(build.layout.last_build(build.tag.name), json.dumps(plan.stage_inputs, indent=2))
    return Outcome(f"image: {plan.tag.image_ref} = {digest} (id {baked.config[:19]}, "
                   f"inputs {plan.inputs[:12]})",
                   # image.name and containerimage.digest: the keys `docker buildx build
                   # --metadata-file` writes, for tools that read them
                   _facts(build, image=plan.tag.image_ref, digest=digest, config=baked.config,
                          **{"image.name": plan.tag.image_ref, "containerimage.digest": digest}))


def _facts(build: Build, **facts: Any) -> dict[str, Any]:
    return {"tag": build.tag.name, "inputs": build.plan.inputs, **facts}


# each build command's last stage, and what runs up to it
UNTIL: dict[Stage, Callable[[Build], Outcome]] = {
    Stage.FETCH: _fetch_outcome, Stage.PATCH: _patch_outcome,
    Stage.WHEELS: _wheels_outcome, Stage.BAKE: _image_outcome,
}


def _wheels(build: Build, engine: Engine, source: Source, patched: PatchedTree) -> WheelSet:
    config, plan, settings = build.config, build.plan, build.settings
    layout = build.layout
    folder, kernels = layout.wheel_set(plan.wheels_key), layout.kernels(plan.kernel_key)
    # a damaged entry goes (with a warning) before anything reuses it
    entrycheck.drop_damaged(folder, entrycheck.damage(folder), console=build.console)
    entrycheck.drop_damaged(kernels, entrycheck.kernels_damage(kernels), console=build.console)
    if container_build.is_built(folder):  # cached wheels need no builder image, nor jobs
        return container_build.cached(plan.tag, folder, console=build.console)
    # the modules of building are imported past the cached checks: a no-op build, which
    # every command starts with, needs none of them (nox -s bench-noop)
    from sparkbake.wheels import kernelseed

    if plan.tag.kernels:
        kernelseed.require_python_only(plan.tag, plan.kernel_patches)
        kernelseed.seed(plan.tag.kernels, kernels, settings, console=build.console)
        return kernelseed.build_wheels(plan.tag, kernels, source.tree, patched.path, folder,
                                       source.source_date, plan.local_version,
                                       console=build.console)
    if plan.tag.upstream.kernel_reuse == "assemble" and kernelseed.assembles(kernels):
        return kernelseed.build_wheels(plan.tag, kernels, source.tree, patched.path, folder,
                                       source.source_date, plan.local_version,
                                       console=build.console)
    client = engine.client()  # no engine: said before the sources are downloaded
    # the sources first: a lock that lacks a declaration stops before a base is pulled
    fetched = thirdparty.prepare(config, plan.tag, patched.path, settings, console=build.console)
    base = bases.ensure(client, plan.tag.builder, plan.tag.platform, config.build_dir, settings,
                        console=build.console)
    lock_file = pins.require_lock(config, plan.tag, patched.path, settings=build.settings)
    builder = container_build.builder_image(client, base, lock_file, settings, config.build_dir,
                                            console=build.console)
    request = container_build.BuildRequest(
        tag=plan.tag, builder=builder, patched=patched, folder=folder, kernels=kernels,
        third_party=fetched, log=build.log(Stage.WHEELS),
        jobs=container_build.compile_jobs(client.info(), settings), memory=settings.builder_memory,
        compile_cache=settings.compile_cache, source_date=source.source_date,
        local_version=plan.local_version, pristine=source.tree, build_dir=config.build_dir,
    )
    return container_build.build(client, request, console=build.console)
