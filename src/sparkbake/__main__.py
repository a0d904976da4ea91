"""Command line: `sparkbake [--config FILE] COMMAND TAG [options]`, its parser made from the
table of commands (command_table.py). Errors are caught here once."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from sparkbake.command_table import COMMANDS, TAG_HELP, Command, Option, by_name
from sparkbake.config.settings import Settings
from sparkbake.console import display
from sparkbake.console.display import Console
from sparkbake.errors import FatalError, UsageError, machine_error
from sparkbake.run import Run

__all__ = ["dispatch", "main", "parser"]

PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a command whose reader left

DESCRIPTION = ("Reproducible vLLM images for DGX Spark: fetch a pinned upstream, apply patch "
               "series, build wheels, bake, smoke-test and publish each tag of versions.yaml.")


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
    for command in COMMANDS:
        _subparser(commands, command)
    return top


def _subparser(commands: argparse._SubParsersAction[_Parser], command: Command) -> None:
    sub = commands.add_parser(command.name, help=command.help, description=command.help)
    if command.tag in ("argument", "optional"):
        without = f" (without one: {command.without_tag[1]})" if command.without_tag else ""
        sub.add_argument("tag", nargs="?" if command.tag == "optional" else None,
                         help=TAG_HELP + without)
    if command.tag == "option":
        sub.add_argument("--tag", required=True, help="the tag the node will run")
    for option in command.options:
        _add(sub, option)
    # accepted after the command too: `nox -s X -- TAG --config F`
    sub.add_argument("--config", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for flags in (["--debug"], ["-v", "--verbose"], ["-q", "--quiet"]):
        sub.add_argument(*flags, action="store_true", default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS)


def _add(sub: argparse.ArgumentParser, option: Option) -> None:
    """option as argparse takes it: only what the table sets is passed on."""
    given: dict[str, Any] = {"help": option.help}
    if option.flag:
        given["action"] = "store_true"
    for key in ("type", "nargs", "choices", "default", "metavar"):
        if (value := getattr(option, key)) is not None:
            given[key] = value
    if option.name.startswith("-"):
        given |= {"required": True} if option.required else {}
        given |= {"dest": option.dest} if option.dest else {}
    sub.add_argument(option.name, **given)


def _version() -> str:
    import importlib.metadata  # here, for --version alone: it imports the email package, slow

    try:
        return importlib.metadata.version("sparkbake")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _load(where: str) -> Callable[..., int]:
    """A handler by its "module:function": its module is imported only now, when it runs."""
    module, _, name = where.partition(":")
    handler: Callable[..., int] = getattr(importlib.import_module(module), name)
    return handler


def dispatch(args: argparse.Namespace, run: Run) -> int:
    """The command args name, on its tag (a tag by its name or suffix, or a release: each
    platform's tag in turn, the first failure stops, or the command's on_release at once)."""
    command = by_name(args.command)
    if command.tag == "none":
        return _load(command.handler)(args, run)
    if args.tag is None and command.without_tag is not None:
        return _load(command.without_tag[0])(args, run)
    release = run.config.release_name(args.tag)
    if release is None:
        return _load(command.handler)(args, run, run.config.tag(args.tag))
    if command.on_release is not None:
        return _load(command.on_release)(args, run, release)
    for tag in run.config.targets(release):
        run.console.notice(f"{release}: {tag.platform} ({tag.name})")
        if code := _load(command.handler)(args, run, tag):
            return code
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    try:
        args = parser().parse_args(argv)
        settings = Settings.of_process(locked=getattr(args, "locked", False), config=args.config)
        run = Run(settings, Console(settings.environ, _verbosity(args)), args.config)
        code = dispatch(args, run)
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
