"""Command line: `sparkbake [--config FILE] COMMAND TAG [options]`. Errors are caught here once."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from . import config as config_mod
from . import pipeline
from .errors import FatalError, UsageError

__all__ = ["main"]

TAG_COMMANDS = ("plan", "fetch", "patch", "wheels", "build-image", "smoke", "publish")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, f"run `{self.prog} --help`")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="sparkbake", description=__doc__)
    top.add_argument("--config", type=Path, default=Path("versions.yaml"),
                     help="versions.yaml to use (default: ./versions.yaml)")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in TAG_COMMANDS:
        sub = commands.add_parser(name)
        _common(sub)
        sub.add_argument("tag", help="tag name or its suffix, e.g. 3.73-vision")
        if name == "plan":
            sub.add_argument("--json", action="store_true", help="print the plan as JSON")
        if name == "smoke":
            sub.add_argument("--gpu", choices=("auto", "require", "skip"), default="auto",
                             help="GPU checks: run if a GPU is present (auto), fail without")
        if name == "publish":
            sub.add_argument("--registry", help="HOST:PORT to push to instead of the tag's")
            sub.add_argument("--force", action="store_true",
                             help="overwrite a remote tag that points at another digest")
    registry = commands.add_parser("registry", help="the embedded local registry")
    registry.add_argument("action", choices=("start", "stop", "status"))
    registry.add_argument("--port", type=int, default=5000)
    _common(registry)
    return top


def _common(sub: argparse.ArgumentParser) -> None:
    """--config and --debug are accepted after the command too: `nox -s X -- TAG --config F`."""
    sub.add_argument("--config", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help=argparse.SUPPRESS)


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    try:
        args = parser().parse_args(argv)
        return dispatch(args)
    except FatalError as exc:
        if args is not None and args.debug:
            traceback.print_exc()
        print(f"sparkbake: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("sparkbake: interrupted; finished stages stay cached", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug rather than a user error: say so in two lines
        if args is not None and args.debug:
            raise
        print(f"sparkbake: internal error: {type(exc).__name__}: {exc}\n"
              "  -> rerun with --debug for the traceback, and report it", file=sys.stderr)
        return 1


def dispatch(args: argparse.Namespace) -> int:
    config = config_mod.load(args.config)
    if args.command == "registry":
        return pipeline.registry_command(config, args.action, args.port)
    tag = config.tag(args.tag)
    if args.command == "plan":
        print(pipeline.plan_report(config, tag, as_json=args.json))
        return 0
    if args.command == "smoke":
        return pipeline.smoke_tag(config, tag, gpu=args.gpu)
    if args.command == "publish":
        return pipeline.publish(config, tag, registry_host=args.registry, force=args.force)
    return pipeline.run_until(config, tag, stage=args.command)


if __name__ == "__main__":
    sys.exit(main())
