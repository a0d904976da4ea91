"""Command line: `sparkbake [--config FILE] COMMAND TAG [options]`. Errors are caught here once."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from sparkbake.config import versions as config_mod
from sparkbake.config.model import Tag
from sparkbake.config.settings import Settings
from sparkbake.console import display, invocation
from sparkbake.core.gpu_modes import GPU_MODES
from sparkbake.core.stages import BUILD, Stage
from sparkbake.errors import ConfigError, FatalError, UsageError, machine_error
from sparkbake.housekeeping import cachetrim
from sparkbake.lock import pins as lock_mod
from sparkbake.patch.apply import Options as PatchOptions
from sparkbake.pipeline import stage_commands

__all__ = ["main"]

PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a command whose reader left

DESCRIPTION = ("Reproducible vLLM images for DGX Spark: fetch a pinned upstream, apply patch "
               "series, build wheels, bake, smoke-test and publish each tag of versions.yaml.")
# each tag command and what it does (its one-line help)
TAG_COMMANDS = {
    "plan": "each stage's key and state, and what changed since the last build; exit 2 when "
            "a stage is blocked",
    "lock": "resolve the tag's builder and runtime locks (and its CMake sources) with hashes",
    "fetch": "fetch the pinned upstream tree, remote patches and locked third-party sources",
    "patch": "apply the tag's series to the pristine tree",
    "patch-tests": "run the tests the series add or change, on the CPU",
    "wheels": "build the wheels (or assemble them around cached kernels) and check their SASS",
    "build-image": "fetch, patch, wheels and bake the tag's image",
    "smoke": "check the tag's image in the engine: manifest, imports, kernels, entrypoint, GPU",
    "publish": "push the smoked image to its registry and record what went into the digest",
    "verify": "rebuild the tag from clean and compare it with the baked image",
    "deploy": "pull the tag's release onto each node's engine and smoke it there",
}


# what a command does without a tag
TAG_OPTIONAL = {"build-image": "without one: the tags, and exit 2",
                "smoke": "without one: every tag whose image in the engine is current"}
# the build commands: each runs the build stages up to its own (build-image: all of them)
STAGE_COMMANDS = {**{str(stage): stage for stage in BUILD[:-1]}, "build-image": Stage.BAKE}
# the commands whose result is a record they also write to build/, and what it is called
RECORD_COMMANDS = {"smoke": "smoke record", "publish": "release record",
                   "deploy": "deploy report"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, f"run `{self.prog} --help`")


class _Version(argparse.Action):
    """--version, as argparse's own, but the version is looked up only when it is asked for:
    every command builds the parser, and importlib.metadata is slow to import."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[object] | None, option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="sparkbake", description=DESCRIPTION)
    top.add_argument("--config", type=Path, default=Path("versions.yaml"),
                     help="versions.yaml to use (default: ./versions.yaml)")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    loudness = top.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="store_true",
                          help="stream every command's output as it runs (it is always in "
                               "build/logs/TAG/STAGE.log)")
    loudness.add_argument("-q", "--quiet", action="store_true",
                          help="print only errors and the result")
    top.add_argument("--version", action=_Version)
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    tags = commands.add_parser("tags", help="every tag: platform, series, built, smoked, "
                                            "published")
    tags.add_argument("--json", action="store_true", help="print the list as JSON")
    _common(tags)
    for name, what in TAG_COMMANDS.items():
        sub = commands.add_parser(name, help=what, description=what)
        _common(sub)
        optional = name in TAG_OPTIONAL
        sub.add_argument("tag", nargs="?" if optional else None,
                         help="tag name or its suffix, e.g. 3.73-vision"
                         + (f" ({TAG_OPTIONAL[name]})" if optional else ""))
        if name == "plan":
            sub.add_argument("--json", action="store_true", help="print the plan as JSON")
        if name == "smoke":
            _smoke_options(sub)
        if name == "publish":
            sub.add_argument("--registry", help="HOST:PORT to push to instead of the tag's")
            sub.add_argument("--force", action="store_true",
                             help="overwrite a remote tag that points at another digest")
            sub.add_argument("--skip-smoke", action="store_true",
                             help="publish without a passing smoke record (recorded)")
            sub.add_argument("--sign-key", type=Path, metavar="PATH",
                             help="sign the digest with this private key (`keys generate`); "
                                  "default: SPARKBAKE_SIGNING_KEY, else unsigned")
        if name == "deploy":
            _deploy_options(sub)
        if name == "lock":
            sub.add_argument("--patch-tests", action="store_true",
                             help="lock the venv of patch-tests for this host instead")
        if name == "verify":
            sub.add_argument("--against", metavar="DIGEST",
                             help="compare with this manifest digest instead of build/oci's")
        if name in ("patch", "wheels", "build-image"):
            _patch_options(sub, maintainer=name == "patch")
        if name in STAGE_COMMANDS:
            sub.add_argument("--json", action="store_true",
                             help="print the result and each stage's state as JSON on stdout")
        if name in RECORD_COMMANDS:
            sub.add_argument("--json", action="store_true",
                             help=f"print the {RECORD_COMMANDS[name]} as JSON on stdout")
        if name == "build-image":
            sub.add_argument("--metadata-file", type=Path, metavar="FILE",
                             help="also write the result as JSON to FILE (as buildx does)")
        if name in ("wheels", "build-image", "verify"):
            sub.add_argument("--locked", action="store_true",
                             help="refuse a missing lock instead of making it (as CI does)")
    registry = commands.add_parser("registry", help="the embedded local registry")
    registry.add_argument("action", choices=("start", "stop", "status"),
                          help="start it, stop the one started, or say whether it answers")
    registry.add_argument("--port", type=tcp_port, default=5000,
                          help="the port of 127.0.0.1 to start it on (default: 5000)")
    _common(registry)
    _check_env_parser(commands)
    _housekeeping_parsers(commands)
    _series_parsers(commands)
    _release_parsers(commands)
    _signing_parsers(commands)
    return top


def _version() -> str:
    import importlib.metadata  # here, for --version alone: it imports the email package, slow

    try:
        return importlib.metadata.version("sparkbake")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _smoke_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--gpu", choices=GPU_MODES, default="auto",
                     help="GPU checks: run if a GPU is present (auto), fail without")
    sub.add_argument("--model", type=Path, metavar="PATH",
                     help="serve this model folder (mounted at /model) and probe the server")
    sub.add_argument("--serve-env", type=Path, metavar="FILE",
                     help="the serve checks' node .env instead of the suite's serve.env")
    sub.add_argument("--serve-timeout", type=float, default=1800.0, metavar="SECONDS",
                     help="how long the server may take to answer /health (default 1800)")


def _deploy_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--hosts", required=True, metavar="URL,URL",
                     help="the nodes' Docker hosts: ssh://[USER@]HOST, tcp://HOST:PORT, "
                          "unix:///PATH (a bare HOST means ssh://HOST)")
    sub.add_argument("--stream", action="store_true",
                     help="send the image from the local engine instead of pulling it")
    sub.add_argument("--gpu", choices=GPU_MODES, default="auto",
                     help="GPU checks of the smoke run on each node")
    sub.add_argument("--require-signature", type=Path, metavar="PUB",
                     help="refuse, before any node runs anything, a release whose digest "
                          "this public key did not sign")


def _release_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    listing = commands.add_parser("releases", help="the published releases (build/releases)")
    listing.add_argument("--json", action="store_true", help="print the index as JSON")
    diff = commands.add_parser("diff", help="what changed between two releases")
    diff.add_argument("tags", nargs=2, metavar="TAG", help="two released tags (or suffixes)")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    for sub in (listing, diff):
        _common(sub)


def _signing_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    keys = commands.add_parser("keys", help="the key pair publish signs with")
    keys.add_argument("action", choices=("generate",), help="write PATH and PATH.pub")
    keys.add_argument("path", type=Path, metavar="PATH", help="the private key's file")
    verify = commands.add_parser("verify-release", help="check a published image's signature, "
                                 "statements and SBOM in its registry; print what it is made of")
    verify.add_argument("reference", help="HOST/PATH:TAG or HOST/PATH@sha256:<hex>")
    verify.add_argument("--key", type=Path, required=True, metavar="PUB",
                        help="the publisher's public key (PATH.pub of `keys generate`)")
    verify.add_argument("--against", type=Path, metavar="VERSIONS_YAML",
                        help="also check the provenance against this versions.yaml's pins "
                             "and locks for the image's tag")
    verify.add_argument("--rebuild", action="store_true",
                        help="then build that tag from clean (each platform's image of a "
                             "release) and require the registry's digest, bit for bit; needs "
                             "--against")
    verify.add_argument("--json", action="store_true",
                        help="print the statements as JSON on stdout")
    for sub in (keys, verify):
        _common(sub)


def _patch_options(sub: argparse.ArgumentParser, maintainer: bool) -> None:
    sub.add_argument("--skip-applied", action="store_true",
                     help="skip patches already in upstream (recorded) instead of stopping")
    if maintainer:
        sub.add_argument("--keep", action="store_true",
                         help="on a conflict, keep the three-way conflict markers in the tree")
        sub.add_argument("--checkout", type=Path, metavar="DIR",
                         help="also write a git work tree: upstream commit + one per patch")


def _housekeeping_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    clean = commands.add_parser("clean", help="remove a tag's build trees, wheels and records "
                                              "(or, with --all, build/ and wheels/)")
    clean.add_argument("tag", nargs="?", help="tag name or its suffix; keys other tags use stay")
    clean.add_argument("--all", action="store_true", dest="everything",
                       help="everything in build/ and wheels/ but release records and locks")
    gc = commands.add_parser("gc", help="remove what no tag uses now: stale cache entries, "
                                        "leftovers, stale sparkbake images, old compile cache")
    gc.add_argument("--max-cache-size", default=cachetrim.DEFAULT_MAX_SIZE, metavar="SIZE",
                    help="trim the compile cache and the bytecode cache to SIZE each, oldest "
                         "files first (default: "
                         f"{cachetrim.DEFAULT_MAX_SIZE}; K, M, G, T: powers of 1000)")
    gc.add_argument("--check", action="store_true",
                    help="also hash every cache entry (layer blobs, base layers, wheels, "
                         "records) and remove those that are not their digest's bytes")
    for sub in (clean, gc):
        sub.add_argument("--dry-run", action="store_true",
                         help="print what would be removed and its size; remove nothing")
        _common(sub)


def _series_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    lint = commands.add_parser("patch-lint", help="check every series folder and patch")
    export = commands.add_parser("export-series", help="commits of a checkout -> a series")
    export.add_argument("work", type=Path, metavar="DIR", help="a `patch --checkout` tree")
    export.add_argument("series", help="the series to write, patches/SERIES/")
    export.add_argument("--range", dest="commits", metavar="A..B",
                        help="export these commits instead of the series' own")
    imp = commands.add_parser("import-series", help="a commit range of a fork -> a series")
    imp.add_argument("--from", dest="source", required=True, metavar="GIT_URL_OR_DIR",
                     help="the fork to take the commits from: a git URL or a checkout")
    imp.add_argument("--range", dest="commits", required=True, metavar="A..B",
                     help="the commits to import, oldest first, as git log takes them")
    imp.add_argument("series", help="the series to write, patches/SERIES/")
    rebase = commands.add_parser("rebase-check", help="would the series apply to UPSTREAM?")
    rebase.add_argument("tag", help="tag name or its suffix")
    rebase.add_argument("--to", required=True, metavar="UPSTREAM_KEY",
                        help="an upstream of versions.yaml")
    for sub in (lint, export, imp, rebase):
        _common(sub)


def tcp_port(text: str) -> int:
    """A TCP port, 1 to 65535; else argparse's usage error (exit 2) with this message."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def _check_env_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = commands.add_parser("check-env", help="preflight a node's .env for a tag")
    sub.add_argument("env_file", type=Path, metavar="NODE.env", help="the node's .env file")
    sub.add_argument("--tag", required=True, help="the tag the node will run")
    sub.add_argument("--print", action="store_true", dest="show",
                     help="also print the vllm serve command the image would run")
    sub.add_argument("--proc-sys", type=Path, default=Path("/proc/sys"), metavar="DIR",
                     help="where to read the host's sysctls (default: /proc/sys)")
    _common(sub)


def _common(sub: argparse.ArgumentParser) -> None:
    """--config and --debug are accepted after the command too: `nox -s X -- TAG --config F`."""
    sub.add_argument("--config", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)
    sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)
    sub.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    try:
        args = parser().parse_args(argv)
        settings = Settings.of_process(locked=getattr(args, "locked", False))
        display.configure(_verbosity(args), settings.environ)
        code = dispatch(args, settings)
        sys.stdout.flush()  # a closed pipe shows here, not at exit where it can't be caught
        return code
    except BrokenPipeError:
        return _pipe_closed()
    except FatalError as exc:
        _traceback_if_debug(args)
        print(f"sparkbake: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("sparkbake: interrupted; finished stages stay cached", file=sys.stderr)
        return 130
    except OSError as exc:
        if (refused := machine_error(exc)) is None:
            return _internal(args, exc)
        _traceback_if_debug(args)
        print(f"sparkbake: error: {refused}", file=sys.stderr)
        return refused.exit_code
    except Exception as exc:  # a bug rather than a user error: say so in two lines
        return _internal(args, exc)


def _traceback_if_debug(args: argparse.Namespace | None) -> None:
    if args is not None and args.debug:
        import traceback  # here: only --debug needs it, and every command starts here

        traceback.print_exc()


def _internal(args: argparse.Namespace | None, exc: Exception) -> int:
    """A bug rather than a user error: say so in two lines (--debug: the traceback)."""
    if args is not None and args.debug:
        raise exc
    print(f"sparkbake: internal error: {type(exc).__name__}: {exc}\n"
          "  -> rerun with --debug for the traceback, and report it", file=sys.stderr)
    return 1


def _verbosity(args: argparse.Namespace) -> display.Verbosity:
    if getattr(args, "verbose", False) and getattr(args, "quiet", False):
        raise UsageError("-v and -q say opposite things", "give one of them")
    if getattr(args, "verbose", False):
        return display.Verbosity.VERBOSE
    return display.Verbosity.QUIET if getattr(args, "quiet", False) else display.Verbosity.NORMAL


def _pipe_closed() -> int:
    """The reader of the output left (`sparkbake plan TAG | head -1`): stop quietly with the
    status of a process ended by SIGPIPE, as cat or grep would. The standard streams point at
    /dev/null so that Python's flush at exit finds no closed pipe (the Python docs' recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        os.dup2(devnull, stream.fileno())
    return PIPE_CLOSED


# The build's commands are imported with this module; the others' modules only when their
# command runs, so that a build (most of all one with nothing to do) starts in less time.


def dispatch(args: argparse.Namespace, settings: Settings) -> int:
    """The command args name, with the run's settings (made once, in main)."""
    invocation.remember_config(args.config, settings)  # remedies repeat the user's --config
    if args.command in ("keys", "verify-release"):  # no versions.yaml: anyone can check
        return _release_check(args, settings)
    config = config_mod.load(args.config)
    if args.command in ("tags", "gc", "clean"):
        return _housekeeping_command(config, settings, args)
    if args.command in ("patch-lint", "export-series", "import-series"):
        return _series_command(config, args)
    if args.command in ("registry", "releases", "diff"):
        return _release_command(config, args)
    if args.tag is None:
        return _without_tag(config, settings, args)
    release = config.release_name(args.tag)
    if release is None:
        return _tag_command(config, settings, config.tag(args.tag), args)
    if args.command in ("publish", "deploy"):
        return _release_rollout(config, settings, release, args)
    for tag in config.targets(release):  # each platform in turn; the first failure stops
        display.notice(f"{release}: {tag.platform} ({tag.name})")
        if code := _tag_command(config, settings, tag, args):
            return code
    return 0


def _release_command(config: config_mod.Config, args: argparse.Namespace) -> int:
    from sparkbake.pipeline import commands
    if args.command == "registry":
        return commands.registry_command(config, args.action, args.port)
    if args.command == "releases":
        print(commands.releases_report(config, as_json=args.json))
        return 0
    print(commands.diff_releases(config, (args.tags[0], args.tags[1]), as_json=args.json))
    return 0


def _release_rollout(config: config_mod.Config, settings: Settings, release: str,
                     args: argparse.Namespace) -> int:
    """publish or deploy of a multi-platform release: all its platforms at once."""
    from sparkbake.pipeline import commands
    output = stage_commands.Output(json=args.json)
    if args.command == "publish":
        return commands.publish_release(config, settings, release, registry_host=args.registry,
                                        force=args.force, skip_smoke=args.skip_smoke,
                                        output=output, sign_key=args.sign_key)
    return commands.deploy_release(config, settings, release, args.hosts, stream=args.stream,
                                   gpu=args.gpu, output=output,
                                   require_signature=args.require_signature)


def _release_check(args: argparse.Namespace, settings: Settings) -> int:
    from sparkbake.pipeline import release_checks
    if args.command == "keys":
        return release_checks.keys_generate(args.path, settings)
    return release_checks.verify_release(args.reference, args.key, args.against, settings,
                                          args.json, args.rebuild)


def _housekeeping_command(config: config_mod.Config, settings: Settings,
                          args: argparse.Namespace) -> int:
    if args.command == "tags":
        from sparkbake.pipeline import tags
        print(tags.report(config, as_json=args.json))
        return 0
    from sparkbake.housekeeping import tidy
    if args.command == "gc":
        return tidy.gc(config, settings, args.dry_run, args.max_cache_size, args.check)
    return tidy.clean(config, args.tag, args.everything, args.dry_run)


def _without_tag(config: config_mod.Config, settings: Settings, args: argparse.Namespace) -> int:
    """build-image: the tags to pick from (exit 2); smoke: every tag whose image is current
    in the engine, said first."""
    from sparkbake.pipeline import tags
    listed = tags.rows(config)
    if args.command == "build-image":
        print(tags.report(config, as_json=False))
        raise UsageError("build-image needs a tag", "name one of the tags above, e.g. "
                         f"`{invocation.command('build-image', listed[0].tag)}`")
    current = [row.tag for row in listed if row.built == "yes"]
    if not current:
        raise UsageError("no tag has a current image in the engine to smoke",
                         "build one first: `sparkbake build-image TAG`")
    display.notice(f"smoke: the tags whose image is current: {', '.join(current)}")
    for name in current:
        if code := _tag_command(config, settings, config.tag(name), args):
            return code
    return 0


def _tag_command(config: config_mod.Config, settings: Settings, tag: Tag,
                 args: argparse.Namespace) -> int:
    """A command on one tag (of one platform)."""
    if args.command in STAGE_COMMANDS:
        return _stages(config, settings, tag, args)
    from sparkbake.pipeline import commands
    if args.command == "rebase-check":
        return commands.rebase_check(config, settings, tag, args.to)
    if args.command == "check-env":
        return commands.check_env(tag, args.env_file, args.proc_sys, show=args.show,
                                  runtime_lock=lock_mod.runtime_lock_path(config, tag))
    if args.command == "plan":
        text, blocked = commands.plan_report(config, tag, as_json=args.json)
        print(text)
        return ConfigError.exit_code if blocked else 0
    if args.command == "lock":
        return commands.lock_tag(config, settings, tag, for_patch_tests=args.patch_tests)
    if args.command == "patch-tests":
        return commands.patch_tests(config, settings, tag)
    if args.command == "verify":
        return commands.verify_tag(config, settings, tag, against=args.against)
    if args.command == "smoke":
        from sparkbake.smoke.checks import Options as SmokeOptions
        return commands.smoke_tag(config, settings, tag, SmokeOptions(
            gpu=args.gpu, model=args.model, serve_env=args.serve_env,
            serve_timeout=args.serve_timeout), output=stage_commands.Output(json=args.json))
    if args.command == "publish":
        return commands.publish(config, settings, tag, registry_host=args.registry,
                                force=args.force, skip_smoke=args.skip_smoke,
                                output=stage_commands.Output(json=args.json),
                                sign_key=args.sign_key)
    if args.command == "deploy":
        return commands.deploy_tag(config, settings, tag, args.hosts, stream=args.stream,
                                   gpu=args.gpu, output=stage_commands.Output(json=args.json),
                                   require_signature=args.require_signature)
    raise AssertionError(f"no dispatch for {args.command}")


def _stages(config: config_mod.Config, settings: Settings, tag: Tag,
            args: argparse.Namespace) -> int:
    """fetch, patch, wheels, build-image: the stages up to the command's."""
    options = PatchOptions(skip_applied=getattr(args, "skip_applied", False),
                           keep=getattr(args, "keep", False),
                           checkout=getattr(args, "checkout", None))
    output = stage_commands.Output(json=args.json,
                                   metadata_file=getattr(args, "metadata_file", None))
    return stage_commands.run_until(config, settings, tag, STAGE_COMMANDS[args.command],
                                    options=options, output=output)


def _series_command(config: config_mod.Config, args: argparse.Namespace) -> int:
    from sparkbake.pipeline import commands
    if args.command == "patch-lint":
        return commands.patch_lint(config)
    if args.command == "export-series":
        return commands.export_series(config, args.work, args.series, args.commits)
    return commands.import_series(config, args.source, args.commits, args.series)


def run() -> NoReturn:
    """The `sparkbake` program: main in a process of its own."""
    # what the imports made lives as long as the process: no collection needs to look at it
    # again, the one at exit included (a tenth of a no-op build's time, nox -s bench-noop)
    gc.freeze()
    sys.exit(main())


if __name__ == "__main__":
    run()
