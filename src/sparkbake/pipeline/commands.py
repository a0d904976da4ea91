"""The CLI's commands: each a few calls into the stages (build.py) and the stage packages."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from sparkbake import planning, records
from sparkbake.bake import runtime_image
from sparkbake.config.versions import Config, Tag
from sparkbake.console.display import StageRun
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
from sparkbake.publish import push, release_bench, release_index, releases
from sparkbake.run import Run
from sparkbake.series import exchange, lint, patchtests, rebase
from sparkbake.smoke import checks, image_planner, root_bundle

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

def plan_report(run: Run, tag: Tag, as_json: bool = False) -> tuple[str, bool]:
    """The plan as text or JSON, and whether a stage is blocked (its remedy is in it)."""
    plan = planning.make(run.config, tag)
    states = status.stage_states(run.config, plan, engine_or_none(settings=run.settings),
                                 console=run.console)
    text = planning.render_json(plan, states) if as_json else planning.render_text(states)
    return text, any(state.state == "blocked" for state in states)


def _stage(run: Run, tag_name: str, stage: Stage, key: str) -> AbstractContextManager[StageRun]:
    """A command's stage: its line, and its log in build/logs/<tag>/."""
    return run.console.stage(stage, key, run.folders.stage_log(tag_name, stage))


def verify_tag(run: Run, tag: Tag, against: str | None = None) -> int:
    """Rebuild the tag from clean (fresh build/ and wheels/ in a scratch folder; the engine's
    base and builder images are reused) and compare it with the baked image or `against`."""
    plan = planning.make(run.config, tag)
    original = verify.original(run, plan, against)
    verify.require_intact(original, tag.name,
                          settings=run.settings)  # before an hour of rebuild, not after
    with scratch_dir(run.folders.scratch("verify"), f"{tag.name}.") as scratch:
        run.console.detail(f"verify: rebuilding {tag.name} from clean in {scratch}")
        clean = Run.of(dataclasses.replace(run.config, work=scratch), run.settings, run.console)
        rebuilt = rebuild(clean, clean.config.tag(tag.name))
        rebuilt_side = verify.Side(image_layout.Layout(rebuilt.layout, run.console),
                                   rebuilt.image)
        verify.require_intact(rebuilt_side, tag.name, settings=run.settings)
        report = verify.compare(original, rebuilt_side)
    return _done(run, verify.conclude(run, plan, report))


def rebuild(run: Run, tag: Tag) -> runtime_image.Image:
    """fetch .. bake into the run's build/ and wheels/, leaving the engine's tag alone."""
    return build.image(build.of_tag(run, tag, load=False))


def patch_lint(run: Run) -> int:
    return lint.lint(run.config, console=run.console)


def export_series(run: Run, work: Path, series_name: str, commits: str | None, *,
                  upstream: str | None = None, drop: bool = False) -> int:
    return exchange.export(run.config, work, series_name, commits, upstream=upstream, drop=drop,
                           console=run.console)


def import_series(run: Run, source: str, commits: str, series_name: str, *,
                  upstream: str | None = None) -> int:
    return exchange.import_range(run.config, source, commits, series_name, upstream=upstream,
                                 console=run.console)


def rebase_check(run: Run, tag: Tag, target: str) -> int:
    return rebase.check(run.config, tag, target, run.settings, console=run.console)


def lock_tag(run: Run, tag: Tag, for_patch_tests: bool = False) -> int:
    config, settings, console = run.config, run.settings, run.console
    tree = None
    if for_patch_tests or tag.upstream.build_requirements or not tag.kernels:
        tree = build.patched(build.of_tag(run, tag)).path
    with _stage(run, tag.name, Stage.LOCK, tag.name):
        if for_patch_tests and tree:
            written = [patchtests.resolve(config, tag, tree, settings, console=console)]
            return _done(run, f"patch-tests lock: {written[0]}")
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
    return _done(run, "locks: " + (", ".join(map(str, written)) or "none needed"))


def patch_tests(run: Run, tag: Tag) -> int:
    """The series' own tests against the tag's patched tree, on the CPU."""
    work = build.of_tag(run, tag)
    patched = build.patched(work)
    lock_file = patchtests.require_lock(run.config, tag, patched.path, settings=run.settings)
    with _stage(run, tag.name, Stage.PATCH_TESTS, work.plan.patch_key):
        result = patchtests.run_tests(work.plan, patched.path, lock_file, run.folders,
                                      run.settings, console=run.console)
    return _done(run, f"patch-tests: {tag.name} passed ({result.tests} tests, {result.skipped} "
                      f"skipped; {result.junit})")


def smoke_tag(run: Run, tag: Tag, options: checks.Options, client: Client | None = None,
              output: Output = Output()) -> int:
    """The tag's smoke checks on its image in the engine (client: another engine's)."""
    plan = planning.make(run.config, tag)
    client = client or connect(settings=run.settings)
    checks.require_image(client, plan,
                         settings=run.settings)  # before the patch stage's cache is looked at
    emulation.require_engine_runs(client, plan.tag.platform)
    with _stage(run, tag.name, Stage.SMOKE, plan.inputs):
        result = checks.run(client, run.config, plan, smoke_facts(run, plan), options,
                            console=run.console, settings=run.settings)
    counts = checks.counts(result.checks)
    print_json(output, records.to_json(result))
    return _done(run, f"smoke: {tag.name} passed ({counts['passed']} checks passed, "
                      f"{counts['skipped']} skipped; image {result.image_id[:19]})")


def smoke_facts(run: Run, plan: Plan) -> checks.Facts:
    """The patched tree and source date the smoke compares with: the fetch and patch
    stages' cache entries (made again if missing; the smoke only reads them)."""
    layout = run.folders
    pristine = upstream_tree.fetch(plan.tag.upstream, layout.source(plan.fetch_key),
                                   run.settings, console=run.console)
    patched = apply.apply(plan, pristine, layout.patched(plan.patch_key),
                            apply.Options(skip_applied=True), console=run.console)
    return checks.Facts(patched, upstream_tree.source_date(plan.tag.upstream, pristine.parent))


def device_bundle(run: Run, tag: Tag, out: Path | None) -> int:
    """The tag's device bundle (smoke.root_bundle), for sparkbake.smoke.oci_runtime."""
    plan = planning.make(run.config, tag)
    client = connect(settings=run.settings)
    checks.require_image(client, plan, settings=run.settings)
    out = out or run.folders.smoke_record(tag.name).with_name(f"{tag.name}-device.tar.xz")
    bundle = root_bundle.make(client, run, plan, smoke_facts(run, plan), out)
    mib = 1024 * 1024
    return _done(run, f"device bundle: {out} ({out.stat().st_size / mib:.1f} MiB; its root "
                      f"keeps {bundle.root_files} of the image's {bundle.image_files} files, "
                      f"{bundle.root_bytes / mib:.0f} of {bundle.image_bytes / mib:.0f} MiB); "
                      f"run it with `python -m sparkbake.smoke.oci_runtime {out.name}`")


def publish(run: Run, tag: Tag, registry_host: str | None, force: bool,
            skip_smoke: bool = False, output: Output = Output(),
            sign_key: Path | None = None) -> int:
    plan = planning.make(run.config, tag)
    key = release_checks.signing_key(sign_key, run.settings)  # a bad key stops before any push
    with _stage(run, tag.name, Stage.PUBLISH, plan.inputs):
        record = push.publish(connect(settings=run.settings), run.config, run.settings, plan,
                              registry_host, force, skip_smoke=skip_smoke, key=key,
                              console=run.console)
    print_json(output, records.to_json(record))
    return _done(run, f"published {tag.name}: {record.digest} (smoke: {record.smoke_result})")


def publish_release(run: Run, name: str, registry_host: str | None, force: bool,
                    skip_smoke: bool = False, output: Output = Output(),
                    sign_key: Path | None = None) -> int:
    """A multi-platform tag's release: every platform's image and the index of them."""
    tags = run.config.targets(name)
    key = release_checks.signing_key(sign_key, run.settings)
    with _stage(run, name, Stage.PUBLISH, name):
        record = release_index.publish_release(connect(settings=run.settings), run.config,
                                               run.settings, name, tags, registry_host, force,
                                               skip_smoke=skip_smoke, key=key,
                                               console=run.console)
    print_json(output, records.to_json(record))
    platforms = ", ".join(f"{p.tag} {p.digest[:19]}" for p in record.platforms)
    return _done(run, f"published {name}: {record.digest} ({platforms}; smoke: "
                      f"{record.smoke_result})")


def releases_report(run: Run, as_json: bool = False) -> str:
    """The releases index as a table, or as JSON."""
    folder = run.folders.releases
    listed = releases.entries(folder)
    if as_json:
        return json.dumps({"releases": [records.to_json(entry) for entry in listed]}, indent=2)
    if not listed:
        return f"no releases in {folder} yet"
    return "\n".join(releases.render_table(listed))


def diff_releases(run: Run, names: tuple[str, str], as_json: bool = False) -> str:
    """What changed between two releases, from their records (a tag may be a suffix), and
    their benches, measured on clusters that ran their images."""
    folder = run.folders.releases
    a, b = (releases.read_record(folder, _release_name(run.config, folder, n),
                                 settings=run.settings) for n in names)
    report = dataclasses.replace(releases.diff(a, b), bench=release_bench.measured(
        run.folders.build / "clusters", a, b))
    if as_json:
        return json.dumps(records.to_json(report), indent=2)
    return "\n".join(releases.render_diff(report))


def _release_name(config: Config, folder: Path, name: str) -> str:
    """The record's own name if there is one, else the tag versions.yaml resolves it to."""
    if (folder / f"{name}.json").is_file():
        return name
    try:
        return config.tag(name).name
    except ConfigError:
        return name  # read_record names the releases there are


def deploy_tag(run: Run, tag: Tag, hosts: str, stream: bool, gpu: checks.GpuMode,
               output: Output = Output(), require_signature: Path | None = None) -> int:
    """The tag's release onto each node, verified there and smoked (the common checks)."""
    nodes = engines.parse_hosts(hosts)
    signed = release_checks.require_signed(run, tag.name, require_signature)
    plan = planning.make(run.config, tag)
    with _stage(run, tag.name, Stage.DEPLOY, plan.inputs):
        report = rollout.deploy(run.config, plan, nodes, lambda: smoke_facts(run, plan),
                                checks.Options(gpu=gpu), stream=stream, console=run.console,
                                settings=run.settings, signed=signed)
    methods = ", ".join(f"{h.host} ({h.transfer.method})" for h in report.hosts if h.transfer)
    print_json(output, records.to_json(report))
    return _done(run, f"deployed {tag.name} ({report.image_id[:19]}) to {methods}; smoke "
                      f"passed on each (report: {report.report})")


def deploy_release(run: Run, name: str, hosts: str, stream: bool, gpu: checks.GpuMode,
                   output: Output = Output(), require_signature: Path | None = None) -> int:
    """A multi-platform release onto each node by its index digest (release_nodes)."""
    nodes = engines.parse_hosts(hosts)
    signed = release_checks.require_signed(run, name, require_signature)
    with _stage(run, name, Stage.DEPLOY, name):
        reports = release_nodes.deploy_release(
            run.config, name, nodes, lambda plan: smoke_facts(run, plan),
            checks.Options(gpu=gpu), stream=stream, settings=run.settings, console=run.console,
            signed=signed)
    for report in reports:
        print_json(output, records.to_json(report))
    done = ", ".join(f"{h.host} ({r.tag}, {h.transfer.method})" for r in reports
                     for h in r.hosts if h.transfer)
    return _done(run, f"deployed {name} to {done}; smoke passed on each")


def registry_command(run: Run, action: str, port: int) -> int:
    config, console = run.config, run.console
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


def _done(run: Run, message: str) -> int:
    run.console.result(message)
    return 0


def measured_share(run: Run, tag: Tag) -> Callable[[str, str], tuple[float, str] | None]:
    """The non-KV shares `up` measured for the tag's layouts, as check-env asks them."""
    return memory_readout.measured_shares(cluster.measurements_path(run.config, tag.name))


def image_plan_asker(run: Run, tag: Tag) -> Callable[[list[dict[str, Any]], Path], list[str]]:
    """check-env --ask-image: what asks vLLM's planner in the tag's image for a file's
    layout, and sets its figures beside the host model's (smoke/image_planner.py)."""
    def ask(figures: list[dict[str, Any]], model_dir: Path) -> list[str]:
        record = image_planner.ask(connect(run.settings), tag.image_ref, model_dir,
                                   image_planner.planner_command(figures),
                                   run.folders.logs(tag.name) / "check-env-planner.log",
                                   console=run.console)
        return image_planner.compare(record, figures)
    return ask
