"""The pipeline as a list of small stage calls; the CLI's commands end here."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkbake.bake import bases, imagebake
from sparkbake.config.settings import HostSettings, host_settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console import display
from sparkbake.console.tools import echo
from sparkbake.deploy import nodes as nodes_mod
from sparkbake.deploy import rollout
from sparkbake.errors import ConfigError, EngineError
from sparkbake.fetch import remote_patches, thirdparty, upstream_tree
from sparkbake.files import atomic_write, scratch_dir
from sparkbake.lock import lockfiles, wheelhouse
from sparkbake.oci import emulation, local_registry, ocilayout
from sparkbake.oci.docker_engine import Client, connect
from sparkbake.patch import patches
from sparkbake.pipeline import plan as plan_mod
from sparkbake.pipeline import verify
from sparkbake.pipeline.plan import Plan, StagePlan
from sparkbake.publish import push, releases
from sparkbake.series import exchange, lint, patchtests, rebase
from sparkbake.smoke import checks
from sparkbake.smoke.preflight import check_env
from sparkbake.wheels import kernelseed, wheelbuild

__all__ = ["check_env", "deploy_tag", "diff_releases", "engine_or_none", "export_series",
           "import_series",
           "lock_tag", "patch_lint", "patch_tests", "plan_report", "publish", "rebase_check",
           "rebuild", "registry_command", "releases_report", "run_until", "smoke_tag",
           "stage_states", "verify_tag"]

STAGES = ("fetch", "patch", "wheels", "build-image")


def stage_states(config: Config, plan: Plan, client: Client | None) -> list[StagePlan]:
    """Each stage's key and state; image state is `unknown` without an engine."""
    build = config.build_dir
    patch_state = "blocked" if plan.problems else _exists(build / "patched" / plan.patch_key /
                                                          "patches.json")
    bake_state = "unknown"
    if client is not None:
        bake_state = "cached" if imagebake.is_current(client, plan, build) else "missing"
    smoke_record = build / "smoke" / f"{plan.tag.name}.json"
    why = _why(config, plan)
    kernels_state = _exists(config.wheels_dir / "kernels" / plan.kernel_key / "kernels.json")
    wheels_state = _exists(config.wheels_dir / plan.wheels_key / wheelbuild.REPORT)
    emulated = _emulation_text(plan.tag, client)
    return [
        StagePlan("fetch", plan.fetch_key, "missing" if remote_patches.missing(_remote(plan))
                  else _exists(build / "sources" / plan.fetch_key / "tree"), _upstream_text(plan)),
        StagePlan("patch", plan.patch_key, patch_state, "; ".join(plan.problems)
                  or why("patch", patch_state) or ", ".join(plan.tag.series)),
        StagePlan("kernels", plan.kernel_key, kernels_state,
                  why("kernels", kernels_state) or _kernels_text(plan.tag)),
        StagePlan("wheels", plan.wheels_key, wheels_state,
                  why("wheels", wheels_state)
                  or _wheels_text(plan.tag) + ("" if plan.tag.kernels else emulated)),
        StagePlan("bake", plan.inputs, bake_state, why("bake", bake_state)
                  or plan.tag.image_ref + (emulated and " (venv made emulated, files native)")),
        StagePlan("smoke", plan.inputs, _record_state(smoke_record, plan.inputs),
                  str(smoke_record.relative_to(config.root)) + emulated),
        StagePlan("publish", plan.inputs,
                  _record_state(build / "releases" / f"{plan.tag.name}.json", plan.inputs),
                  f"{plan.tag.name}, {plan.tag.name}-{plan.inputs[:12]}"),
    ]


# the stages whose inputs each stage's key covers
COVERS = {"patch": ("fetch", "patch"), "kernels": ("fetch", "kernels"),
          "wheels": ("fetch", "patch", "wheels"), "bake": ("fetch", "patch", "wheels", "bake")}


def _why(config: Config, plan: Plan) -> Callable[[str, str], str]:
    """For a stage that will run: what changed since the last build-image of the tag."""
    try:
        before = json.loads(_last_build(config, plan.tag).read_text())
    except (OSError, ValueError):
        before = {}

    now = json.loads(json.dumps(plan.stage_inputs))  # tuples as the record has them: lists

    def explain(stage: str, state: str) -> str:
        if state != "missing" or not before:
            return ""
        changes = dict.fromkeys(change for covered in COVERS[stage] for change in
                                plan_mod.changed_inputs(before.get(covered, {}), now[covered]))
        return "reruns: " + ("; ".join(changes) if changes else "not built with these inputs")

    return explain


def _last_build(config: Config, tag: Tag) -> Path:
    return config.build_dir / "plans" / f"{tag.name}.json"


def plan_report(config: Config, tag: Tag, as_json: bool) -> tuple[str, bool]:
    """The plan as text or JSON, and whether a stage is blocked (its remedy is in it)."""
    plan = plan_mod.make(config, tag)
    states = stage_states(config, plan, engine_or_none())
    text = plan_mod.render_json(plan, states) if as_json else plan_mod.render_text(states)
    return text, any(state.state == "blocked" for state in states)


def engine_or_none() -> Client | None:
    """The engine if one answers: `plan` and `tags` work without one."""
    try:
        return connect()
    except EngineError:
        return None


@dataclasses.dataclass(frozen=True)
class Output:
    """Where a stage command's result goes besides the console: JSON on stdout, a file."""

    json: bool = False
    metadata_file: Path | None = None


def run_until(config: Config, tag: Tag, stage: str,
              options: patches.Options | None = None, output: Output = Output()) -> int:
    """Run fetch .. stage; every stage whose key is cached is skipped."""
    plan = _fetched_plan(config, tag)
    product = _build(config, plan, stage, options or patches.Options())
    if stage == "build-image":  # what `plan` compares with, to say why a stage reruns
        atomic_write(_last_build(config, tag), json.dumps(plan.stage_inputs, indent=2))
    found = _result(plan, product)
    for line in display.summary_lines(display.current.runs, display.current):
        display.notice(line)
    display.result(found.pop("text"))
    found["stages"] = [run.to_json() for run in display.current.runs]
    if output.metadata_file:
        atomic_write(output.metadata_file, json.dumps(found, indent=2) + "\n")
    _print_json(output, found)
    return 0


def _result(plan: Plan, product: Path | patches.PatchedTree | wheelbuild.WheelSet | imagebake.Baked
            ) -> dict[str, Any]:
    """The last stage's product: a line for the user ("text") and its facts, for --json."""
    base: dict[str, Any] = {"tag": plan.tag.name, "inputs": plan.inputs}
    if isinstance(product, Path):
        return {**base, "text": f"pristine tree: {product}", "tree": str(product)}
    if isinstance(product, patches.PatchedTree):
        return {**base, "text": f"patched tree: {product.path} (hash {product.tree_hash[:16]})",
                "tree": str(product.path), "tree_hash": product.tree_hash}
    if isinstance(product, wheelbuild.WheelSet):
        return {**base, "text": f"wheels: {product.folder}", "wheels": str(product.folder),
                "files": [wheel["file"] for wheel in product.report["wheels"]]}
    digest = product.image.digest
    return {**base, "text": f"image: {plan.tag.image_ref} = {digest} (id {product.config[:19]}, "
                          f"inputs {plan.inputs[:12]})",
            "image": plan.tag.image_ref, "digest": digest, "config": product.config,
            # the keys `docker buildx build --metadata-file` writes, for tools that read them
            "image.name": plan.tag.image_ref, "containerimage.digest": digest}


def stage_log(config: Config, tag: Tag, stage: str) -> Path:
    """A stage's full output: build/logs/<tag>/<stage>.log."""
    return config.build_dir / "logs" / tag.name / f"{stage}.log"


def _build(config: Config, plan: Plan, stage: str, options: patches.Options, *,
           load: bool = True) -> Path | patches.PatchedTree | wheelbuild.WheelSet | imagebake.Baked:
    """fetch .. stage into config's build/ and wheels/, each stage skipped when cached;
    returns the last stage's product. load=False leaves the engine's tag alone."""
    tag = plan.tag
    settings = host_settings()
    with display.stage("fetch", plan.fetch_key, stage_log(config, tag, "fetch")):
        pristine = upstream_tree.fetch(tag.upstream, config.build_dir / "sources" / plan.fetch_key,
                                 settings)
        remote_patches.fetch(_remote(plan), settings)
        if stage == "fetch":
            fetched = thirdparty.fetch_locked(config, tag, settings)
            echo(f"third-party sources: {len(fetched)} verified" if fetched else
                 "third-party sources: none locked")
            return pristine
        date = upstream_tree.source_date(tag.upstream, pristine.parent)
    with display.stage("patch", plan.patch_key, stage_log(config, tag, "patch")):
        patched = patches.apply(plan, pristine, config.build_dir / "patched" / plan.patch_key,
                                options)
    if stage == "patch":
        return patched
    client = connect()
    with display.stage("wheels", plan.wheels_key, stage_log(config, tag, "wheels")):
        built = _wheels(client, config, plan, (pristine, patched), settings, date)
    if stage == "wheels":
        return built
    with display.stage("bake", plan.inputs, stage_log(config, tag, "bake")):
        runtime_base = bases.ensure(client, tag.runtime, tag.platform, config.build_dir,
                                    settings)
        lockfiles.make_missing(config, tag, settings, patched.path)
        runtime_lock = lockfiles.require_runtime_lock(config, tag, patched.path)
        house = wheelhouse.ensure(runtime_lock, tag, config.wheels_dir) if runtime_lock else None
        return imagebake.bake(client, plan, runtime_base, built, patched, config.build_dir,
                           source_date=date, cache=settings.cache_dir, load=load,
                           runtime_wheels=house, log=stage_log(config, tag, "bake"))


def verify_tag(config: Config, tag: Tag, against: str | None) -> int:
    """Rebuild the tag from clean (fresh build/ and wheels/ in a scratch folder; the engine's
    base and builder images are reused) and compare it with the baked image or `against`."""
    plan = plan_mod.make(config, tag)
    original = verify.original(config, plan, against)
    with scratch_dir(config.build_dir / "verify", f"{tag.name}.") as scratch:
        echo(f"verify: rebuilding {tag.name} from clean in {scratch}")
        rebuilt = rebuild(dataclasses.replace(config, work=scratch), tag)
        rebuilt_side = verify.Side(ocilayout.Layout(rebuilt.layout), rebuilt.image)
        report = verify.compare(original, rebuilt_side)
    return _done(verify.conclude(config, plan, report))


def rebuild(config: Config, tag: Tag) -> imagebake.Baked:
    """fetch .. bake into config's build/ and wheels/, leaving the engine's tag alone."""
    baked = _build(config, _fetched_plan(config, tag), "build-image", patches.Options(),
                   load=False)
    assert isinstance(baked, imagebake.Baked)
    return baked


def _fetched_plan(config: Config, tag: Tag) -> Plan:
    """The plan once the tag's remote patches are fetched: until then their content, and so
    whether they touch kernels, is unknown (the fetch stage's network, done first)."""
    plan = plan_mod.make(config, tag)
    if remote_patches.fetch(_remote(plan), host_settings()):
        return plan_mod.make(config, tag)
    return plan


def _remote(plan: Plan) -> list[remote_patches.RemotePatch]:
    return [patch for series in plan.series for patch in series.remote]


def _wheels(client: Client, config: Config, plan: Plan,
            trees: tuple[Path, patches.PatchedTree], settings: HostSettings,
            source_date: int) -> wheelbuild.WheelSet:
    pristine, patched = trees
    folder = config.wheels_dir / plan.wheels_key
    kernels = config.wheels_dir / "kernels" / plan.kernel_key
    builder = ""
    fetched: tuple[thirdparty.Fetched, ...] = ()
    if not (folder / wheelbuild.REPORT).is_file():  # cached wheels need no builder image
        if plan.tag.kernels:
            kernelseed.require_python_only(plan.tag,
                                           plan.stage_inputs["kernels"]["kernel patches"])
            kernelseed.seed(plan.tag.kernels, kernels, settings)
            return kernelseed.build_wheels(plan.tag, kernels, pristine, patched.path, folder,
                                           source_date, plan.local_version)
        if plan.tag.upstream.kernel_reuse == "assemble" and kernelseed.assembles(kernels):
            return kernelseed.build_wheels(plan.tag, kernels, pristine, patched.path, folder,
                                           source_date, plan.local_version)
        base = bases.ensure(client, plan.tag.builder, plan.tag.platform, config.build_dir,
                            settings)
        lockfiles.make_missing(config, plan.tag, settings, patched.path)
        lock_file = lockfiles.require_lock(config, plan.tag, patched.path)
        fetched = thirdparty.prepare(config, plan.tag, patched.path, settings)
        builder = wheelbuild.builder_image(client, base, lock_file, settings, config.build_dir)
    request = wheelbuild.BuildRequest(
        tag=plan.tag, builder=builder, patched=patched, folder=folder, kernels=kernels,
        third_party=fetched,
        log=stage_log(config, plan.tag, "wheels"),
        jobs=wheelbuild.compile_jobs(client.info(), settings), memory=settings.builder_memory,
        source_date=source_date, local_version=plan.local_version, pristine=pristine,
    )
    return wheelbuild.build(client, request)


def patch_lint(config: Config) -> int:
    return lint.lint(config)


def export_series(config: Config, work: Path, series_name: str, commits: str | None) -> int:
    return exchange.export(config, work, series_name, commits)


def import_series(config: Config, source: str, commits: str, series_name: str) -> int:
    return exchange.import_range(config, source, commits, series_name)


def rebase_check(config: Config, tag: Tag, target: str) -> int:
    return rebase.check(config, tag, target, host_settings())


def lock_tag(config: Config, tag: Tag, for_patch_tests: bool = False) -> int:
    tree = None
    if for_patch_tests or tag.upstream.build_requirements or not tag.kernels:
        patched = _build(config, _fetched_plan(config, tag), "patch", patches.Options())
        assert isinstance(patched, patches.PatchedTree)
        tree = patched.path
    with display.stage("lock", tag.name, stage_log(config, tag, "lock")):
        if for_patch_tests and tree:
            written = [patchtests.resolve(config, tag, tree, host_settings())]
            return _done(f"patch-tests lock: {written[0]}")
        if tree and not tag.kernels:  # a kernel seed compiles nothing: no CMake sources
            thirdparty.lock(config, tag, tree, host_settings())
        written = lockfiles.resolve(config, tag, host_settings(), tree)
    return _done("locks: " + (", ".join(map(str, written)) or "none needed"))


def patch_tests(config: Config, tag: Tag) -> int:
    """The series' own tests against the tag's patched tree, on the CPU."""
    plan = _fetched_plan(config, tag)
    patched = _build(config, plan, "patch", patches.Options())
    assert isinstance(patched, patches.PatchedTree)
    lock_file = patchtests.require_lock(config, tag, patched.path)
    with display.stage("patch-tests", plan.patch_key, stage_log(config, tag, "patch-tests")):
        result = patchtests.run_tests(plan, patched.path, lock_file, config.build_dir)
    return _done(f"patch-tests: {tag.name} passed ({result.tests} tests, {result.skipped} "
                 f"skipped; {result.junit})")


def smoke_tag(config: Config, tag: Tag, options: checks.Options,
              client: Client | None = None, output: Output = Output()) -> int:
    """The tag's smoke checks on its image in the engine (client: another engine's)."""
    plan = plan_mod.make(config, tag)
    client = client or connect()
    checks.require_image(client, plan)  # before the patch stage's cache is looked at
    emulation.require_engine_runs(client, plan.tag.platform)
    with display.stage("smoke", plan.inputs, stage_log(config, tag, "smoke")):
        result: dict[str, Any] = checks.run(client, config, plan, smoke_facts(config, plan),
                                           options)
    counts = {s: sum(c["status"] == s for c in result["checks"]) for s in ("passed", "skipped")}
    _print_json(output, result)
    return _done(f"smoke: {tag.name} passed ({counts['passed']} checks passed, "
                 f"{counts['skipped']} skipped; image {result['image_id'][:19]})")


def smoke_facts(config: Config, plan: Plan) -> checks.Facts:
    """The patched tree and source date the smoke compares with: the fetch and patch
    stages' cache entries (made again if missing; the smoke only reads them)."""
    settings = host_settings()
    pristine = upstream_tree.fetch(plan.tag.upstream, config.build_dir / "sources" / plan.fetch_key,
                             settings)
    patched = patches.apply(plan, pristine, config.build_dir / "patched" / plan.patch_key,
                            patches.Options(skip_applied=True))
    return checks.Facts(patched, upstream_tree.source_date(plan.tag.upstream, pristine.parent))


def publish(config: Config, tag: Tag, registry_host: str | None, force: bool,
            skip_smoke: bool = False, output: Output = Output()) -> int:
    plan = plan_mod.make(config, tag)
    with display.stage("publish", plan.inputs, stage_log(config, tag, "publish")):
        record = push.publish(connect(), config, plan, registry_host, force,
                                  skip_smoke=skip_smoke)
    _print_json(output, record)
    return _done(f"published {tag.name}: {record['digest']} (smoke: {record['smoke']['result']})")


def releases_report(config: Config, as_json: bool) -> str:
    """The releases index as a table, or as JSON."""
    listed = releases.entries(config.build_dir / "releases")
    if as_json:
        return json.dumps({"releases": listed}, indent=2)
    if not listed:
        return f"no releases in {config.build_dir / 'releases'} yet"
    return "\n".join(releases.render_table(listed))


def diff_releases(config: Config, names: tuple[str, str], as_json: bool) -> str:
    """What changed between two releases, from their records (a tag may be a suffix)."""
    folder = config.build_dir / "releases"
    a, b = (releases.read_record(folder, _release_name(config, folder, n)) for n in names)
    report = releases.diff(a, b)
    return json.dumps(report, indent=2) if as_json else "\n".join(releases.render_diff(report))


def _release_name(config: Config, folder: Path, name: str) -> str:
    """The record's own name if there is one, else the tag versions.yaml resolves it to."""
    if (folder / f"{name}.json").is_file():
        return name
    try:
        return config.tag(name).name
    except ConfigError:
        return name  # read_record names the releases there are


def deploy_tag(config: Config, tag: Tag, hosts: str, stream: bool, gpu: str,
               output: Output = Output()) -> int:
    """The tag's release onto each node, verified there and smoked (the common checks)."""
    nodes = nodes_mod.parse_hosts(hosts)
    plan = plan_mod.make(config, tag)
    with display.stage("deploy", plan.inputs, stage_log(config, tag, "deploy")):
        report = rollout.deploy(config, plan, nodes, lambda: smoke_facts(config, plan),
                               checks.Options(gpu=gpu), stream=stream)
    methods = ", ".join(f"{h['host']} ({h['method']})" for h in report["hosts"])
    _print_json(output, report)
    return _done(f"deployed {tag.name} ({report['image_id'][:19]}) to {methods}; smoke passed "
                 f"on each (report: {report['report']})")


def registry_command(config: Config, action: str, port: int) -> int:
    if action == "start":
        echo(local_registry.start(config, port))
    elif action == "stop":
        echo("registry stopped" if local_registry.stop(config) else "registry was not running")
    else:
        answers, line = local_registry.status(config)
        echo(line)
        return 0 if answers else EngineError.exit_code
    return 0


def _print_json(output: Output, record: dict[str, Any]) -> None:
    """A command's record on stdout (--json), as it is written to build/."""
    if output.json:
        print(json.dumps(record, indent=2))


def _done(message: str) -> int:
    display.result(message)
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


def _wheels_text(tag: Tag) -> str:
    if tag.kernels:
        return f"{tag.sm_arch}: {tag.kernels.wheel} + the series, on this host"
    return f"{tag.sm_arch} on {tag.builder.name}"


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
    pin = plan_mod.upstream_pin(plan.tag.upstream)
    third = plan.stage_inputs["wheels"].get("third-party sources", [])
    extra = f" + {len(third)} third-party sources (locked)" if third else ""
    remote = _remote(plan)
    extra += f" + {len(remote)} remote patch(es)" if remote else ""
    return f"{plan.tag.upstream.key} ({pin['kind']}){extra}"

