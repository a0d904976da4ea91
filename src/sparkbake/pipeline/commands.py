"""The CLI's commands: each a few calls into the stages (build.py) and the stage packages."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from sparkbake import planning
from sparkbake.bake import runtime_image
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import Console, StageRun
from sparkbake.core.folders import Folders
from sparkbake.core.stages import Stage
from sparkbake.deploy import release_nodes, rollout
from sparkbake.errors import ConfigError, EngineError
from sparkbake.fetch import thirdparty, upstream_tree
from sparkbake.files import scratch_dir
from sparkbake.lock import pins
from sparkbake.nodes import cluster, engines, memory_readout
from sparkbake.nodes.cluster_files import check_files as check_env_files
from sparkbake.nodes.preflight import check_env
from sparkbake.oci import emulation, image_layout, local_registry
from sparkbake.oci.docker_engine import Client, connect, engine_or_none
from sparkbake.patch import apply
from sparkbake.pipeline import build, release_checks, status, verify
from sparkbake.pipeline.stage_commands import Output, print_json
from sparkbake.planning import Plan
from sparkbake.publish import push, release_index, releases
from sparkbake.series import exchange, lint, patchtests, rebase
from sparkbake.smoke import checks, image_planner

__all__ = [
    "check_env",
    "check_env_files",
    "deploy_tag",
    "diff_releases",
    "export_series",
    "import_series",
    "lock_tag",
    "measured_share",
    "patch_lint",
    "patch_tests",
    "plan_report",
    "publish",
    "rebase_check",
    "rebuild",
    "registry_command",
    "releases_report",
    "smoke_tag",
    "verify_tag",
]

def plan_report(config: Config, tag: Tag, as_json: bool, *, settings: Settings,
                console: Console) -> tuple[str, bool]:
    """The plan as text or JSON, and whether a stage is blocked (its remedy is in it)."""
    plan = planning.make(config, tag)
    states = status.stage_states(config, plan, engine_or_none(settings=settings), console=console)
    text = planning.render_json(plan, states) if as_json else planning.render_text(states)
    return text, any(state.state == "blocked" for state in states)


def _stage(config: Config, tag: Tag, stage: Stage, key: str,
           console: Console) -> AbstractContextManager[StageRun]:
    """A command's stage: its line, and its log in build/logs/<tag>/."""
    return console.stage(stage, key, Folders.of(config).stage_log(tag.name, stage))


def verify_tag(config: Config, settings: Settings, tag: Tag, against: str | None, *,
               console: Console) -> int:
    """Rebuild the tag from clean (fresh build/ and wheels/ in a scratch folder; the engine's
    base and builder images are reused) and compare it with the baked image or `against`."""
    plan = planning.make(config, tag)
    original = verify.original(config, settings, plan, against, console=console)
    verify.require_intact(original, tag.name,
                          settings=settings)  # before an hour of rebuild, not after
    with scratch_dir(Folders.of(config).scratch("verify"), f"{tag.name}.") as scratch:
        console.detail(f"verify: rebuilding {tag.name} from clean in {scratch}")
        rebuilt = rebuild(dataclasses.replace(config, work=scratch), settings, tag, console=console)
        rebuilt_side = verify.Side(image_layout.Layout(rebuilt.layout, console), rebuilt.image)
        verify.require_intact(rebuilt_side, tag.name, settings=settings)
        report = verify.compare(original, rebuilt_side)
    return _done(verify.conclude(config, plan, report, console=console), console=console)


def rebuild(config: Config, settings: Settings, tag: Tag, *,
            console: Console) -> runtime_image.Image:
    """fetch .. bake into config's build/ and wheels/, leaving the engine's tag alone."""
    plan = build.fetched_plan(config, tag, settings, console=console)
    return build.image(build.Build(config, plan, settings, load=False, console=console))


def patch_lint(config: Config, *, console: Console) -> int:
    return lint.lint(config, console=console)


def export_series(config: Config, work: Path, series_name: str, commits: str | None, *,
                  upstream: str | None = None, drop: bool = False, console: Console) -> int:
    return exchange.export(config, work, series_name, commits, upstream=upstream, drop=drop,
                           console=console)


def import_series(config: Config, source: str, commits: str, series_name: str, *,
                  upstream: str | None = None, console: Console) -> int:
    return exchange.import_range(config, source, commits, series_name, upstream=upstream,
                                 console=console)


def rebase_check(config: Config, settings: Settings, tag: Tag, target: str, *,
                 console: Console) -> int:
    return rebase.check(config, tag, target, settings, console=console)


def lock_tag(config: Config, settings: Settings, tag: Tag, for_patch_tests: bool = False, *,
             console: Console) -> int:
    tree = None
    if for_patch_tests or tag.upstream.build_requirements or not tag.kernels:
        plan = build.fetched_plan(config, tag, settings, console=console)
        tree = build.patched(build.Build(config, plan, settings, console=console)).path
    with _stage(config, tag, Stage.LOCK, tag.name, console):
        if for_patch_tests and tree:
            written = [patchtests.resolve(config, tag, tree, settings, console=console)]
            return _done(f"patch-tests lock: {written[0]}", console=console)
        # the package index first: CMake's sources may sit on servers this host cannot reach
        written = pins.resolve(config, tag, settings, tree, console=console)
        if tree and not tag.kernels:  # a kernel seed compiles nothing: no CMake sources
            try:
                thirdparty.lock(config, tag, tree, settings, console=console)
            except EngineError as exc:
                kept = ", ".join(str(p.relative_to(config.root)) for p in written)
                raise EngineError(f"{exc.message} (the package locks are made: "
                                  f"{kept or 'none needed'})",
                                  exc.remedy) from None
    return _done("locks: " + (", ".join(map(str, written)) or "none needed"), console=console)


def patch_tests(config: Config, settings: Settings, tag: Tag, *, console: Console) -> int:
    """The series' own tests against the tag's patched tree, on the CPU."""
    plan = build.fetched_plan(config, tag, settings, console=console)
    patched = build.patched(build.Build(config, plan, settings, console=console))
    lock_file = patchtests.require_lock(config, tag, patched.path, settings=settings)
    with _stage(config, tag, Stage.PATCH_TESTS, plan.patch_key, console):
        result = patchtests.run_tests(plan, patched.path, lock_file, Folders.of(config), settings,
                                      console=console)
    return _done(f"patch-tests: {tag.name} passed ({result.tests} tests, {result.skipped} "
                 f"skipped; {result.junit})", console=console)


def smoke_tag(config: Config, settings: Settings, tag: Tag, options: checks.Options,
              client: Client | None = None, output: Output = Output(), *, console: Console) -> int:
    """The tag's smoke checks on its image in the engine (client: another engine's)."""
    plan = planning.make(config, tag)
    client = client or connect(settings=settings)
    checks.require_image(client, plan,
                         settings=settings)  # before the patch stage's cache is looked at
    emulation.require_engine_runs(client, plan.tag.platform)
    with _stage(config, tag, Stage.SMOKE, plan.inputs, console):
        result = checks.run(client, config, plan,
                            smoke_facts(config, settings, plan,
                                        console=console), options, console=console,
                                        settings=settings)
    counts = checks.counts(result.checks)
    print_json(output, result.to_json())
    return _done(f"smoke: {tag.name} passed ({counts['passed']} checks passed, "
                 f"{counts['skipped']} skipped; image {result.image_id[:19]})", console=console)


def smoke_facts(config: Config, settings: Settings, plan: Plan, *,
                console: Console) -> checks.Facts:
    """The patched tree and source date the smoke compares with: the fetch and patch
    stages' cache entries (made again if missing; the smoke only reads them)."""
    layout = Folders.of(config)
    pristine = upstream_tree.fetch(plan.tag.upstream, layout.source(plan.fetch_key), settings,
                                   console=console)
    patched = apply.apply(plan, pristine, layout.patched(plan.patch_key),
                            apply.Options(skip_applied=True), console=console)
    return checks.Facts(patched, upstream_tree.source_date(plan.tag.upstream, pristine.parent))


def publish(config: Config, settings: Settings, tag: Tag, registry_host: str | None,
            force: bool, skip_smoke: bool = False, output: Output = Output(),
            sign_key: Path | None = None, *, console: Console) -> int:
    plan = planning.make(config, tag)
    key = release_checks.signing_key(sign_key, settings)  # a bad key stops before any push
    with _stage(config, tag, Stage.PUBLISH, plan.inputs, console):
        record = push.publish(connect(settings=settings), config, settings, plan, registry_host,
                              force,
                              skip_smoke=skip_smoke, key=key, console=console)
    print_json(output, record.to_json())
    return _done(f"published {tag.name}: {record.digest} (smoke: {record.smoke_result})",
                 console=console)


def publish_release(config: Config, settings: Settings, name: str, registry_host: str | None,
                    force: bool, skip_smoke: bool = False, output: Output = Output(),
                    sign_key: Path | None = None, *, console: Console) -> int:
    """A multi-platform tag's release: every platform's image and the index of them."""
    tags = config.targets(name)
    key = release_checks.signing_key(sign_key, settings)
    log = Folders.of(config).stage_log(name, Stage.PUBLISH)
    with console.stage(Stage.PUBLISH, name, log):
        record = release_index.publish_release(connect(settings=settings), config, settings, name,
                                               tags,
                                               registry_host, force, skip_smoke=skip_smoke,
                                               key=key, console=console)
    print_json(output, record.to_json())
    platforms = ", ".join(f"{p.tag} {p.digest[:19]}" for p in record.platforms)
    return _done(f"published {name}: {record.digest} ({platforms}; smoke: "
                 f"{record.smoke_result})", console=console)


def releases_report(config: Config, as_json: bool) -> str:
    """The releases index as a table, or as JSON."""
    folder = Folders.of(config).releases
    listed = releases.entries(folder)
    if as_json:
        return json.dumps({"releases": [entry.to_json() for entry in listed]}, indent=2)
    if not listed:
        return f"no releases in {folder} yet"
    return "\n".join(releases.render_table(listed))


def diff_releases(config: Config, names: tuple[str, str], as_json: bool, *,
                  settings: Settings) -> str:
    """What changed between two releases, from their records (a tag may be a suffix)."""
    folder = Folders.of(config).releases
    a, b = (releases.read_record(folder, _release_name(config, folder, n),
                                 settings=settings) for n in names)
    report = releases.diff(a, b)
    if as_json:
        return json.dumps(report.to_json(), indent=2)
    return "\n".join(releases.render_diff(report))


def _release_name(config: Config, folder: Path, name: str) -> str:
    """The record's own name if there is one, else the tag versions.yaml resolves it to."""
    if (folder / f"{name}.json").is_file():
        return name
    try:
        return config.tag(name).name
    except ConfigError:
        return name  # read_record names the releases there are


def deploy_tag(config: Config, settings: Settings, tag: Tag, hosts: str, stream: bool,
               gpu: checks.GpuMode, output: Output = Output(),
               require_signature: Path | None = None, *, console: Console) -> int:
    """The tag's release onto each node, verified there and smoked (the common checks)."""
    nodes = engines.parse_hosts(hosts)
    release_checks.require_signed(config, settings, tag.name, require_signature, console=console)
    plan = planning.make(config, tag)
    with _stage(config, tag, Stage.DEPLOY, plan.inputs, console):
        report = rollout.deploy(config, plan, nodes,
                                lambda: smoke_facts(config, settings, plan, console=console),
                                checks.Options(gpu=gpu), stream=stream, console=console,
                                settings=settings)
    methods = ", ".join(f"{h.host} ({h.transfer.method})" for h in report.hosts if h.transfer)
    print_json(output, report.to_json())
    return _done(f"deployed {tag.name} ({report.image_id[:19]}) to {methods}; smoke passed "
                 f"on each (report: {report.report})", console=console)


def deploy_release(config: Config, settings: Settings, name: str, hosts: str, stream: bool,
                   gpu: checks.GpuMode, output: Output = Output(),
                   require_signature: Path | None = None, *, console: Console) -> int:
    """A multi-platform release onto each node by its index digest (release_nodes)."""
    nodes = engines.parse_hosts(hosts)
    release_checks.require_signed(config, settings, name, require_signature, console=console)
    with console.stage(Stage.DEPLOY, name, Folders.of(config).stage_log(name, Stage.DEPLOY)):
        reports = release_nodes.deploy_release(
            config, name, nodes, lambda plan: smoke_facts(config, settings, plan, console=console),
            checks.Options(gpu=gpu), stream=stream, settings=settings, console=console)
    for report in reports:
        print_json(output, report.to_json())
    done = ", ".join(f"{h.host} ({r.tag}, {h.transfer.method})" for r in reports
                     for h in r.hosts if h.transfer)
    return _done(f"deployed {name} to {done}; smoke passed on each", console=console)


def registry_command(config: Config, action: str, port: int, *, console: Console) -> int:
    if action == "start":
        console.detail(local_registry.start(config, console, port))
    elif action == "stop":
        stopped = local_registry.stop(config, console)
        console.detail("registry stopped" if stopped else "registry was not running")
    else:
        answers, line = local_registry.status(config)
        console.detail(line)
        return 0 if answers else EngineError.exit_code
    return 0


def _done(message: str, *, console: Console) -> int:
    console.result(message)
    return 0


def measured_share(config: Config, tag: Tag) -> Callable[[str, str], tuple[float, str] | None]:
    """The non-KV shares `up` measured for the tag's layouts, as check-env asks them."""
    return memory_readout.measured_shares(cluster.measurements_path(config, tag.name))


def image_plan_asker(config: Config, settings: Settings, tag: Tag, *, console: Console
                     ) -> Callable[[list[dict[str, Any]], Path], list[str]]:
    """check-env --ask-image: what asks vLLM's planner in the tag's image for a file's
    layout, and sets its figures beside the host model's (smoke/image_planner.py)."""
    def ask(figures: list[dict[str, Any]], model_dir: Path) -> list[str]:
        record = image_planner.ask(connect(settings), tag.image_ref, model_dir,
                                   image_planner.planner_command(figures),
                                   Folders.of(config).logs(tag.name) / "check-env-planner.log",
                                   console=console)
        return image_planner.compare(record, figures)
    return ask
