"""The CLI's handlers, one per command of command_table.py: the command's arguments and the
run in (and its tag), an exit code out. Each imports the modules of its command only when
it runs, so that a build (most of all one with nothing to do) starts in less time."""

from __future__ import annotations

import argparse

from sparkbake.config.model import Tag
from sparkbake.core.stages import BUILD, Stage
from sparkbake.errors import ConfigError, UsageError
from sparkbake.patch.apply import Options as PatchOptions
from sparkbake.pipeline import stage_commands
from sparkbake.pipeline.stage_commands import Output
from sparkbake.run import Run

# the build commands: each runs the build stages up to its own (build-image: all of them)
STAGE_COMMANDS = {**{str(stage): stage for stage in BUILD[:-1]}, "build-image": Stage.BAKE}


def tags(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import tags as tag_rows
    print(tag_rows.report(run, as_json=args.json))
    return 0


def plan(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    text, blocked = commands.plan_report(run, tag, as_json=args.json)
    print(text)
    return ConfigError.exit_code if blocked else 0


def lock(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.lock_tag(run, tag, for_patch_tests=args.patch_tests)


def stages(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    """fetch, patch, wheels, build-image: the stages up to the command's."""
    options = PatchOptions(skip_applied=getattr(args, "skip_applied", False),
                           keep=getattr(args, "keep", False),
                           checkout=getattr(args, "checkout", None))
    output = Output(json=args.json, metadata_file=getattr(args, "metadata_file", None))
    return stage_commands.run_until(run, tag, STAGE_COMMANDS[args.command], options=options,
                                    output=output)


def tags_to_build(args: argparse.Namespace, run: Run) -> int:
    """build-image without a tag: the tags to pick from, and exit 2."""
    from sparkbake.pipeline import tags as tag_rows
    listed = tag_rows.rows(run)
    print(tag_rows.report(run))
    raise UsageError("build-image needs a tag", "name one of the tags above, e.g. "
                     f"`{run.settings.command('build-image', listed[0].tag)}`")


def patch_tests(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.patch_tests(run, tag)


def smoke(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    from sparkbake.smoke.checks import Options as SmokeOptions
    return commands.smoke_tag(run, tag, SmokeOptions(
        gpu=args.gpu, model=args.model, serve_env=args.serve_env,
        serve_timeout=args.serve_timeout), output=Output(json=args.json))


def smoke_current(args: argparse.Namespace, run: Run) -> int:
    """smoke without a tag: every tag whose image is current in the engine, said first."""
    from sparkbake.pipeline import tags as tag_rows
    current = [row.tag for row in tag_rows.rows(run) if row.built == "yes"]
    if not current:
        raise UsageError("no tag has a current image in the engine to smoke",
                         "build one first: `sparkbake build-image TAG`")
    run.console.notice(f"smoke: the tags whose image is current: {', '.join(current)}")
    for name in current:
        if code := smoke(args, run, run.config.tag(name)):
            return code
    return 0


def device_bundle(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.device_bundle(run, tag, args.out)


def publish(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.publish(run, tag, registry_host=args.registry, force=args.force,
                            skip_smoke=args.skip_smoke, output=Output(json=args.json),
                            sign_key=args.sign_key)


def publish_release(args: argparse.Namespace, run: Run, release: str) -> int:
    from sparkbake.pipeline import commands
    return commands.publish_release(run, release, registry_host=args.registry,
                                    force=args.force, skip_smoke=args.skip_smoke,
                                    output=Output(json=args.json), sign_key=args.sign_key)


def verify(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.verify_tag(run, tag, against=args.against)


def deploy(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.deploy_tag(run, tag, args.hosts, stream=args.stream, gpu=args.gpu,
                               output=Output(json=args.json),
                               require_signature=args.require_signature)


def deploy_release(args: argparse.Namespace, run: Run, release: str) -> int:
    from sparkbake.pipeline import commands
    return commands.deploy_release(run, release, args.hosts, stream=args.stream, gpu=args.gpu,
                                   output=Output(json=args.json),
                                   require_signature=args.require_signature)


def registry(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import commands
    return commands.registry_command(run, args.action, args.port)


def check_env(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.lock import pins
    from sparkbake.pipeline import commands
    ask = commands.image_plan_asker(run, tag) if args.ask_image else None
    check = commands.check_env if len(args.env_files) == 1 else commands.check_env_files
    files = args.env_files[0] if len(args.env_files) == 1 else args.env_files
    return check(tag, files, args.host_root, show=args.show,
                 runtime_lock=pins.runtime_lock_path(run.config, tag), console=run.console,
                 json_out=args.json, measured=commands.measured_share(run, tag),
                 ask_image=ask)


def patch_lint(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import commands
    return commands.patch_lint(run)


def export_series(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import commands
    return commands.export_series(run, args.work, args.series, args.commits,
                                  upstream=args.upstream, drop=args.drop)


def import_series(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import commands
    return commands.import_series(run, args.source, args.commits, args.series,
                                  upstream=args.upstream)


def rebase_check(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.rebase_check(run, tag, args.to)


def releases(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import commands
    print(commands.releases_report(run, as_json=args.json))
    return 0


def diff(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import commands
    print(commands.diff_releases(run, (args.tags[0], args.tags[1]), as_json=args.json))
    return 0


def keys(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import release_checks
    return release_checks.keys_generate(run, args.path)


def verify_release(args: argparse.Namespace, run: Run) -> int:
    from sparkbake.pipeline import release_checks
    return release_checks.verify_release(run, args.reference, args.key, args.against,
                                         as_json=args.json, rebuild=args.rebuild,
                                         hosts=args.hosts, image=args.image)
