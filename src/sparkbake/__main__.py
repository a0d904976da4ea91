"""Command line: `sparkbake [--config FILE] COMMAND TAG [options]`. Errors are caught here once."""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from sparkbake.config import versions as config_mod
from sparkbake.config.model import Config, Tag
from sparkbake.config.settings import Settings
from sparkbake.console import display
from sparkbake.console.display import Console
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

# A command's handler, which its parser sets (set_defaults) and dispatch calls: the command's
# arguments, the run's settings and its console in, its exit code out.
Handler = Callable[[argparse.Namespace, Settings, Console], int]
# what _with_config and _on_tag make a handler of: work on versions.yaml, on one tag (of one
# platform), or on a release of several platforms (publish, deploy: all of them at once)
OnConfig = Callable[[argparse.Namespace, Settings, Console, Config], int]
OnTag = Callable[[argparse.Namespace, Settings, Console, Config, Tag], int]
OnRelease = Callable[[argparse.Namespace, Settings, Console, Config, str], int]


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
    for add in (_tags_parser, _build_parsers, _image_parsers, _registry_parser, _check_env_parser,
                _cluster_parsers, _housekeeping_parsers, _series_parsers, _release_parsers,
                _signing_parsers):
        add(commands)  # in this order, the order of --help
    return top


def _version() -> str:
    import importlib.metadata  # here, for --version alone: it imports the email package, slow

    try:
        return importlib.metadata.version("sparkbake")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


# The build's commands are imported with this module; the others' modules only when their
# command runs (in their handler), so that a build (most of all one with nothing to do)
# starts in less time.


def dispatch(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    """The command args name, with the run's settings and console (made once, in main)."""
    handler: Handler = args.handler
    return handler(args, settings, console)


def _command(commands: argparse._SubParsersAction[_Parser], name: str, what: str,
             handler: Handler, description: str | None = None) -> _Parser:
    """A subcommand with its one-line help and its handler; _common, once its options are in."""
    sub = commands.add_parser(name, help=what, description=description)
    sub.set_defaults(handler=handler)
    return sub


def _common(sub: argparse.ArgumentParser) -> None:
    """--config and --debug are accepted after the command too: `nox -s X -- TAG --config F`."""
    sub.add_argument("--config", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)
    sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)
    sub.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)


def _json_option(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout")


def _locked_option(*subs: argparse.ArgumentParser) -> None:
    for sub in subs:
        sub.add_argument("--locked", action="store_true",
                         help="refuse a missing lock instead of making it (as CI does)")


def _with_config(run: OnConfig) -> Handler:
    """run, with versions.yaml (--config) loaded."""
    def handler(args: argparse.Namespace, settings: Settings, console: Console) -> int:
        return run(args, settings, console, config_mod.load(args.config))
    return handler


def _on_tag(run: OnTag, on_release: OnRelease | None = None,
            without_tag: OnConfig | None = None) -> Handler:
    """run on TAG: a tag by its name or suffix, or a release: run on each platform's tag in
    turn (the first failure stops), or on_release on all at once. No TAG: without_tag."""
    def on_config(args: argparse.Namespace, settings: Settings, console: Console,
                  config: Config) -> int:
        if without_tag is not None and args.tag is None:
            return without_tag(args, settings, console, config)
        release = config.release_name(args.tag)
        if release is None:
            return run(args, settings, console, config, config.tag(args.tag))
        if on_release is not None:
            return on_release(args, settings, console, config, release)
        for tag in config.targets(release):
            console.notice(f"{release}: {tag.platform} ({tag.name})")
            if code := run(args, settings, console, config, tag):
                return code
        return 0
    return _with_config(on_config)


def _tag_command(commands: argparse._SubParsersAction[_Parser], name: str,
                handler: Handler) -> _Parser:
    """A command on TAG, with TAG_COMMANDS' help; TAG_OPTIONAL says what it does without."""
    sub = _command(commands, name, TAG_COMMANDS[name], handler, TAG_COMMANDS[name])
    _common(sub)
    optional = TAG_OPTIONAL.get(name)
    sub.add_argument("tag", nargs="?" if optional else None,
                     help="tag name or its suffix, e.g. 3.73-vision"
                     + (f" ({optional})" if optional else ""))
    return sub


def _tags_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _command(commands, "tags", "every tag: platform, series, built, smoked, published",
                   _with_config(_tags))
    sub.add_argument("--json", action="store_true", help="print the list as JSON")
    _common(sub)


def _tags(args: argparse.Namespace, settings: Settings, console: Console, config: Config) -> int:
    from sparkbake.pipeline import tags
    print(tags.report(config, as_json=args.json, console=console, settings=settings))
    return 0


def _build_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    """plan, lock, and the commands that build: fetch, patch, patch-tests, wheels, build-image."""
    plan = _tag_command(commands, "plan", _on_tag(_plan))
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    lock = _tag_command(commands, "lock", _on_tag(_lock))
    lock.add_argument("--patch-tests", action="store_true",
                      help="lock the venv of patch-tests for this host instead")
    fetch = _tag_command(commands, "fetch", _on_tag(_stages))
    patch = _tag_command(commands, "patch", _on_tag(_stages))
    _tag_command(commands, "patch-tests", _on_tag(_patch_tests))
    wheels = _tag_command(commands, "wheels", _on_tag(_stages))
    build = _tag_command(commands, "build-image", _on_tag(_stages, without_tag=_tags_to_build))
    for sub in (patch, wheels, build):
        sub.add_argument("--skip-applied", action="store_true",
                         help="skip patches already in upstream (recorded) instead of stopping")
    patch.add_argument("--keep", action="store_true",
                       help="on a conflict, keep the three-way conflict markers in the tree")
    patch.add_argument("--checkout", type=Path, metavar="DIR",
                       help="also write a git work tree: upstream commit + one per patch")
    for sub in (fetch, patch, wheels, build):
        _json_option(sub, "the result and each stage's state")
    build.add_argument("--metadata-file", type=Path, metavar="FILE",
                       help="also write the result as JSON to FILE (as buildx does)")
    _locked_option(wheels, build)


def _plan(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
          tag: Tag) -> int:
    from sparkbake.pipeline import commands
    text, blocked = commands.plan_report(config, tag, as_json=args.json, console=console,
                                         settings=settings)
    print(text)
    return ConfigError.exit_code if blocked else 0


def _lock(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
          tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.lock_tag(config, settings, tag, for_patch_tests=args.patch_tests,
                             console=console)


def _stages(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
            tag: Tag) -> int:
    """fetch, patch, wheels, build-image: the stages up to the command's."""
    options = PatchOptions(skip_applied=getattr(args, "skip_applied", False),
                           keep=getattr(args, "keep", False),
                           checkout=getattr(args, "checkout", None))
    output = stage_commands.Output(json=args.json,
                                   metadata_file=getattr(args, "metadata_file", None))
    return stage_commands.run_until(config, settings, tag, STAGE_COMMANDS[args.command],
                                    options=options, output=output, console=console)


def _tags_to_build(args: argparse.Namespace, settings: Settings, console: Console,
                   config: Config) -> int:
    """build-image without a tag: the tags to pick from, and exit 2."""
    from sparkbake.pipeline import tags
    listed = tags.rows(config, console=console, settings=settings)
    print(tags.report(config, as_json=False, console=console, settings=settings))
    raise UsageError("build-image needs a tag", "name one of the tags above, e.g. "
                     f"`{settings.command('build-image', listed[0].tag)}`")


def _patch_tests(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
                 tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.patch_tests(config, settings, tag, console=console)


def _image_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    """The commands on the tag's image: smoke, publish, verify, deploy."""
    smoke = _tag_command(commands, "smoke", _on_tag(_smoke, without_tag=_smoke_current))
    smoke.add_argument("--gpu", choices=GPU_MODES, default="auto",
                       help="GPU checks: run if a GPU is present (auto), fail without")
    smoke.add_argument("--model", type=Path, metavar="PATH",
                       help="serve this model folder (mounted at /model) and probe the server")
    smoke.add_argument("--serve-env", type=Path, metavar="FILE",
                       help="the serve checks' node .env instead of the suite's serve.env")
    smoke.add_argument("--serve-timeout", type=float, default=1800.0, metavar="SECONDS",
                       help="how long the server may take to answer /health (default 1800)")
    publish = _tag_command(commands, "publish", _on_tag(_publish, _publish_release))
    _publish_options(publish)
    verify = _tag_command(commands, "verify", _on_tag(_verify))
    verify.add_argument("--against", metavar="DIGEST",
                        help="compare with this manifest digest instead of build/oci's")
    _locked_option(verify)
    deploy = _tag_command(commands, "deploy", _on_tag(_deploy, _deploy_release))
    _deploy_options(deploy)
    for sub, record in ((smoke, "smoke record"), (publish, "release record"),
                        (deploy, "deploy report")):
        _json_option(sub, f"the {record}")


def _smoke(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
           tag: Tag) -> int:
    from sparkbake.pipeline import commands
    from sparkbake.smoke.checks import Options as SmokeOptions
    return commands.smoke_tag(config, settings, tag, SmokeOptions(
        gpu=args.gpu, model=args.model, serve_env=args.serve_env,
        serve_timeout=args.serve_timeout), output=stage_commands.Output(json=args.json),
        console=console)


def _smoke_current(args: argparse.Namespace, settings: Settings, console: Console,
                   config: Config) -> int:
    """smoke without a tag: every tag whose image is current in the engine, said first."""
    from sparkbake.pipeline import tags
    current = [row.tag for row in tags.rows(config, console=console,
                                            settings=settings) if row.built == "yes"]
    if not current:
        raise UsageError("no tag has a current image in the engine to smoke",
                         "build one first: `sparkbake build-image TAG`")
    console.notice(f"smoke: the tags whose image is current: {', '.join(current)}")
    for name in current:
        if code := _smoke(args, settings, console, config, config.tag(name)):
            return code
    return 0


def _publish_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--registry", help="HOST:PORT to push to instead of the tag's")
    sub.add_argument("--force", action="store_true",
                     help="overwrite a remote tag that points at another digest")
    sub.add_argument("--skip-smoke", action="store_true",
                     help="publish without a passing smoke record (recorded)")
    sub.add_argument("--sign-key", type=Path, metavar="PATH",
                     help="sign the digest with this private key (`keys generate`); "
                          "default: SPARKBAKE_SIGNING_KEY, else unsigned")


def _publish(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
             tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.publish(config, settings, tag, registry_host=args.registry,
                            force=args.force, skip_smoke=args.skip_smoke,
                            output=stage_commands.Output(json=args.json),
                            sign_key=args.sign_key, console=console)


def _publish_release(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
                     release: str) -> int:
    from sparkbake.pipeline import commands
    return commands.publish_release(config, settings, release, registry_host=args.registry,
                                    force=args.force, skip_smoke=args.skip_smoke,
                                    output=stage_commands.Output(json=args.json),
                                    sign_key=args.sign_key, console=console)


def _verify(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
            tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.verify_tag(config, settings, tag, against=args.against, console=console)


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


def _deploy(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
            tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.deploy_tag(config, settings, tag, args.hosts, stream=args.stream,
                               gpu=args.gpu, output=stage_commands.Output(json=args.json),
                               require_signature=args.require_signature, console=console)


def _deploy_release(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
                    release: str) -> int:
    from sparkbake.pipeline import commands
    return commands.deploy_release(config, settings, release, args.hosts, stream=args.stream,
                                   gpu=args.gpu, output=stage_commands.Output(json=args.json),
                                   require_signature=args.require_signature, console=console)


def _registry_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _command(commands, "registry", "the embedded local registry",
                   _with_config(_registry))
    sub.add_argument("action", choices=("start", "stop", "status"),
                     help="start it, stop the one started, or say whether it answers")
    sub.add_argument("--port", type=tcp_port, default=5000,
                     help="the port of 127.0.0.1 to start it on (default: 5000)")
    _common(sub)


def shm_size(text: str) -> str:
    """A size as docker takes it: digits and b, k, m or g; else argparse's usage error."""
    if not re.fullmatch(r"[1-9][0-9]*[bkmg]?", text.lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 2g, 512m)")
    return text.lower()


def tcp_port(text: str) -> int:
    """A TCP port, 1 to 65535; else argparse's usage error (exit 2) with this message."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def _registry(args: argparse.Namespace, settings: Settings, console: Console,
              config: Config) -> int:
    from sparkbake.pipeline import commands
    return commands.registry_command(config, args.action, args.port, console=console)


def _check_env_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    sub = _command(commands, "check-env", "preflight a node's .env for a tag (several: "
                   "the nodes of one deployment, also checked against each other)",
                   _on_tag(_check_env))
    sub.add_argument("env_files", type=Path, nargs="+", metavar="NODE.env",
                     help="the node's .env file; several: every node's, the head's among them")
    sub.add_argument("--tag", required=True, help="the tag the node will run")
    sub.add_argument("--print", action="store_true", dest="show",
                     help="also print the vllm serve command the image would run")
    sub.add_argument("--proc-sys", type=Path, default=Path("/proc/sys"), metavar="DIR",
                     help="where to read the host's sysctls (default: /proc/sys)")
    _json_option(sub, "each file's findings and memory figures")
    sub.add_argument("--ask-image", action="store_true",
                     help="also ask vLLM's planner in the tag's image on the engine (about a "
                          "minute natively, much more under emulation)")
    _common(sub)


def _check_env(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
               tag: Tag) -> int:
    from sparkbake.pipeline import commands
    lock = lock_mod.runtime_lock_path(config, tag)
    measured = commands.measured_share(config, tag)
    ask = commands.image_plan_asker(config, settings, tag, console=console) \
        if args.ask_image else None
    if len(args.env_files) == 1:
        return commands.check_env(tag, args.env_files[0], args.proc_sys, show=args.show,
                                  runtime_lock=lock, console=console, json_out=args.json,
                                  measured=measured, ask_image=ask)
    return commands.check_env_files(tag, args.env_files, args.proc_sys, show=args.show,
                                    runtime_lock=lock, console=console, json_out=args.json,
                                    measured=measured, ask_image=ask)


# the commands of a deployment's nodes and what each does (its one-line help)
CLUSTER_COMMANDS = {
    "node-files": "write one .env per node from the nodes' addresses, and check them together",
    "up": "bring the tag up on the nodes of its .env files: workers, then the head; serve "
          "checks and the KV-cache and acceptance readout",
    "down": "remove the containers up started, on every node",
    "status": "each node's container and the head's /health",
    "logs": "the last lines of each node's engine log",
}


def _cluster_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    handlers: dict[str, OnTag] = {"node-files": _node_files, "up": _up, "down": _down,
                                  "status": _status, "logs": _logs}
    subs = {}
    for name, run in handlers.items():
        subs[name] = _command(commands, name, CLUSTER_COMMANDS[name], _on_tag(run))
        subs[name].add_argument("tag", help="tag name or its suffix, e.g. 3.73-vision")
    files = subs["node-files"]
    files.add_argument("--nodes", required=True, metavar="ADDR,ADDR",
                       help="each node's fabric address, the head's (rank 0) first")
    files.add_argument("--iface", metavar="NAME", help="the fabric's network interface")
    files.add_argument("--from", dest="template", type=Path, metavar="FILE",
                       help="the .env to start from (default: the tag's smoke suite's head)")
    files.add_argument("--out", type=Path, required=True, metavar="DIR",
                       help="where to write head.env, worker-1.env, ...")
    files.add_argument("--force", action="store_true", help="write over files already there")
    bring = subs["up"]
    bring.add_argument("env_files", type=Path, nargs="+", metavar="NODE.env",
                       help="every node's .env, the head's among them")
    bring.add_argument("--hosts", metavar="URL,URL",
                       help="each file's Docker engine, in the files' order (default: all on "
                            "the local engine)")
    bring.add_argument("--image", metavar="REF",
                       help="run this image (a release by digest) instead of the tag's")
    bring.add_argument("--timeout", type=float, default=1800, metavar="S",
                       help="seconds for the head to answer /health (default: 1800)")
    bring.add_argument("--print", action="store_true", dest="show",
                       help="print the commands that bring the nodes up by hand; start nothing")
    bring.add_argument("--shm-size", type=shm_size, metavar="SIZE",
                       help="for nodes that share a host: each container's own /dev/shm of "
                            "this size (e.g. 2g) instead of the host's IPC")
    subs["logs"].add_argument("--rank", type=int, help="only this node's log")
    subs["logs"].add_argument("--tail", type=int, default=50, metavar="N",
                              help="lines of each log (default: 50)")
    for sub in subs.values():
        _common(sub)


def _node_files(args: argparse.Namespace, settings: Settings, console: Console,
                config: Config, tag: Tag) -> int:
    from sparkbake.nodes import cluster_commands
    return cluster_commands.write_node_files(config, tag, args.nodes, args.iface,
                                             args.template, args.out, args.force,
                                             console=console)


def _up(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
        tag: Tag) -> int:
    from sparkbake.nodes import cluster_commands
    return cluster_commands.up(config, settings, tag, args.env_files, args.hosts, args.image,
                               args.timeout, args.show, args.shm_size, console=console)


def _down(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
          tag: Tag) -> int:
    from sparkbake.nodes import cluster_commands
    return cluster_commands.down(config, tag.name, console=console)


def _status(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
            tag: Tag) -> int:
    from sparkbake.nodes import cluster_commands
    return cluster_commands.status(config, tag.name, console=console)


def _logs(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
          tag: Tag) -> int:
    from sparkbake.nodes import cluster_commands
    return cluster_commands.logs(config, tag.name, args.rank, args.tail, console=console)


def _housekeeping_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    clean = _command(commands, "clean", "remove a tag's build trees, wheels and records "
                                        "(or, with --all, build/ and wheels/)",
                     _with_config(_clean))
    clean.add_argument("tag", nargs="?", help="tag name or its suffix; keys other tags use stay")
    clean.add_argument("--all", action="store_true", dest="everything",
                       help="everything in build/ and wheels/ but release records and locks")
    gc = _command(commands, "gc", "remove what no tag uses now: stale cache entries, "
                                  "leftovers, stale sparkbake images, old compile cache",
                  _with_config(_gc))
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


def _clean(args: argparse.Namespace, settings: Settings, console: Console, config: Config) -> int:
    from sparkbake.housekeeping import tidy
    return tidy.clean(config, args.tag, args.everything, args.dry_run)


def _gc(args: argparse.Namespace, settings: Settings, console: Console, config: Config) -> int:
    from sparkbake.housekeeping import tidy
    return tidy.gc(config, settings, args.dry_run, args.max_cache_size, args.check, console=console)


def _series_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    lint = _command(commands, "patch-lint", "check every series folder and patch",
                    _with_config(_patch_lint))
    export = _command(commands, "export-series", "commits of a checkout -> a series",
                      _with_config(_export_series))
    export.add_argument("work", type=Path, metavar="DIR", help="a `patch --checkout` tree")
    export.add_argument("series", help="the series to write, patches/SERIES/")
    export.add_argument("--range", dest="commits", metavar="A..B",
                        help="export these commits instead of the series' own")
    export.add_argument("--drop", action="store_true",
                        help="write the series without the patches the checkout has no "
                             "commit of (refused otherwise)")
    _variant_option(export)
    imp = _command(commands, "import-series", "a commit range of a fork -> a series",
                   _with_config(_import_series))
    imp.add_argument("--from", dest="source", required=True, metavar="GIT_URL_OR_DIR",
                     help="the fork to take the commits from: a git URL or a checkout")
    imp.add_argument("--range", dest="commits", required=True, metavar="A..B",
                     help="the commits to import, oldest first, as git log takes them")
    imp.add_argument("series", help="the series to write, patches/SERIES/")
    _variant_option(imp)
    rebase = _command(commands, "rebase-check", "would the series apply to UPSTREAM?",
                      _on_tag(_rebase_check))
    rebase.add_argument("tag", help="tag name or its suffix")
    rebase.add_argument("--to", required=True, metavar="UPSTREAM_KEY",
                        help="an upstream of versions.yaml")
    for sub in (lint, export, imp, rebase):
        _common(sub)


def _variant_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream", metavar="UPSTREAM_KEY",
                        help="write the series' variant for this upstream, "
                             "patches/SERIES/UPSTREAM_KEY/")


def _patch_lint(args: argparse.Namespace, settings: Settings, console: Console,
                config: Config) -> int:
    from sparkbake.pipeline import commands
    return commands.patch_lint(config, console=console)


def _export_series(args: argparse.Namespace, settings: Settings, console: Console,
                   config: Config) -> int:
    from sparkbake.pipeline import commands
    return commands.export_series(config, args.work, args.series, args.commits,
                                  upstream=args.upstream, drop=args.drop, console=console)


def _import_series(args: argparse.Namespace, settings: Settings, console: Console,
                   config: Config) -> int:
    from sparkbake.pipeline import commands
    return commands.import_series(config, args.source, args.commits, args.series,
                                  upstream=args.upstream, console=console)


def _rebase_check(args: argparse.Namespace, settings: Settings, console: Console, config: Config,
                  tag: Tag) -> int:
    from sparkbake.pipeline import commands
    return commands.rebase_check(config, settings, tag, args.to, console=console)


def _release_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    listing = _command(commands, "releases", "the published releases (build/releases)",
                       _with_config(_releases))
    listing.add_argument("--json", action="store_true", help="print the index as JSON")
    diff = _command(commands, "diff", "what changed between two releases",
                    _with_config(_diff))
    diff.add_argument("tags", nargs=2, metavar="TAG", help="two released tags (or suffixes)")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    for sub in (listing, diff):
        _common(sub)


def _releases(args: argparse.Namespace, settings: Settings, console: Console,
              config: Config) -> int:
    from sparkbake.pipeline import commands
    print(commands.releases_report(config, as_json=args.json))
    return 0


def _diff(args: argparse.Namespace, settings: Settings, console: Console, config: Config) -> int:
    from sparkbake.pipeline import commands
    print(commands.diff_releases(config, (args.tags[0], args.tags[1]), as_json=args.json,
                                 settings=settings))
    return 0


# keys and verify-release read no versions.yaml: anyone can check a release
def _signing_parsers(commands: argparse._SubParsersAction[_Parser]) -> None:
    keys = _command(commands, "keys", "the key pair publish signs with", _keys)
    keys.add_argument("action", choices=("generate",), help="write PATH and PATH.pub")
    keys.add_argument("path", type=Path, metavar="PATH", help="the private key's file")
    verify = _command(commands, "verify-release", "check a published image's signature, "
                      "statements and SBOM in its registry; print what it is made of",
                      _verify_release)
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
    _json_option(verify, "the statements")
    for sub in (keys, verify):
        _common(sub)


def _keys(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    from sparkbake.pipeline import release_checks
    return release_checks.keys_generate(args.path, settings, console=console)


def _verify_release(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    from sparkbake.pipeline import release_checks
    return release_checks.verify_release(args.reference, args.key, args.against, settings,
                                          args.json, args.rebuild, console=console)


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    try:
        args = parser().parse_args(argv)
        settings = Settings.of_process(locked=getattr(args, "locked", False), config=args.config)
        console = Console(settings.environ, _verbosity(args))  # the run's one console
        code = dispatch(args, settings, console)
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



def run() -> NoReturn:
    """The `sparkbake` program: main in a process of its own."""
    # what the imports made lives as long as the process: no collection needs to look at it
    # again, the one at exit included (a tenth of a no-op build's time, nox -s bench-noop)
    gc.freeze()
    sys.exit(main())


if __name__ == "__main__":
    run()
