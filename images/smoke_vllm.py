"""vllm-serve-args: the commands the entrypoint builds, checked by the image's own vLLM.

For each accept sample of the tag's smoke suite, the command (the host's, which
entrypoint-print shows the image prints too) goes through `vllm serve`'s own argument parser,
built as vllm/entrypoints/cli/serve.py builds it, then through the serve subcommand's
validation and `AsyncEngineArgs.from_cli_args`; each backend it names must resolve in vLLM's
registries and its class import. preflight.json's backend names for the installed version must
be the registries'. One process for every sample; skipped without vLLM. Standard library plus
the image's vLLM; mounted beside smoke_check.py, never baked.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import json
import shlex
import typing
from typing import Any

from smoke_common import CheckFailed, CheckSkipped, Image, one_line, public_version
from smoke_entry import entrypoint

PREFLIGHT_RULES = "opt/sparkbake/preflight.json"
KINDS = ("attention", "moe", "linear")  # the backend registries, as preflight.json names them


class Serve:
    """vLLM's serve parser and registries, loaded once."""

    def __init__(self) -> None:
        from vllm import platforms

        if platforms.current_platform.is_unspecified():  # no GPU here: parse as on a CPU,
            from vllm.platforms.cpu import CpuPlatform  # as `vllm bench` does

            platforms.current_platform = CpuPlatform()
        from vllm.config.kernel import LinearBackend, MoEBackend
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.cli.serve import ServeSubcommand
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        self.parser = FlexibleArgumentParser(prog="vllm")
        self.command = ServeSubcommand()
        self.command.subparser_init(self.parser.add_subparsers(dest="subparser"))
        self.engine_args = AsyncEngineArgs
        self.attention = AttentionBackendEnum
        self.names = {"attention": list(AttentionBackendEnum.__members__),
                      "moe": list(typing.get_args(MoEBackend)),
                      "linear": list(typing.get_args(LinearBackend))}

    def parse(self, command: str) -> Any:
        """The namespace vLLM makes of `vllm serve ...`; CheckFailed with its error."""
        argv = shlex.split(command)
        if argv[:2] != ["vllm", "serve"]:
            raise CheckFailed(f"not a vllm serve command: {command[:60]}")
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                args = self.parser.parse_args(argv[1:])
        except SystemExit:
            raise CheckFailed(last(errors.getvalue()) or "vllm serve refused it") from None
        self.command.validate(args)
        self.engine_args.from_cli_args(args)
        return args

    def backend(self, kind: str, name: str | None, modules: dict[str, str]) -> str:
        """'' when vLLM resolves the name (an attention backend's class imports too) and the
        module it needs (preflight.json's `modules`: vLLM's b12x extra) is there."""
        if name is None or name.lower() == "auto":
            return ""
        if kind != "attention" and name not in self.names[kind]:
            return f"{kind} backend {name!r} unknown"
        if kind == "attention":
            try:
                self.attention[name.upper()].get_class()
            except Exception as exc:  # unknown, or its module does not import: the finding
                return f"attention backend {name!r}: {one_line(exc)}"
        package = modules.get(name.upper() if kind == "attention" else name)
        if package and importlib.util.find_spec(package) is None:
            return f"{kind} backend {name!r} needs the module {package}, which is not there"
        return ""


def last(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def installed_vllm() -> str:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        raise CheckSkipped("no vLLM in this image: nothing parses its commands") from None


def backend_data(image: Image) -> dict[str, Any]:
    """preflight.json's `backends`: names per vLLM version, modules per backend."""
    data: dict[str, Any] = json.loads((image.root / PREFLIGHT_RULES).read_text())
    return dict(data.get("backends", {}))


def data_problems(data: dict[str, Any], version: str, serve: Serve) -> list[str]:
    """preflight.json's backend names for this vLLM against its registries."""
    listed = data.get("vllm", {}).get(version)
    if listed is None:
        return [f"{PREFLIGHT_RULES} has no backend names for vLLM {version}: add them"]
    problems = []
    for kind in KINDS:
        extra = sorted(set(listed.get(kind, [])) - set(serve.names[kind]))
        missing = sorted(set(serve.names[kind]) - set(listed.get(kind, [])))
        if extra or missing:
            problems.append(f"{PREFLIGHT_RULES} {kind} backends of vLLM {version}: "
                            f"not in vLLM {extra}, not listed {missing}")
    return problems


def sample_problems(serve: Serve, sample: dict[str, Any],
                    modules: dict[str, dict[str, str]]) -> list[str]:
    try:
        args = serve.parse(str(sample["command"]))
    except CheckFailed as exc:
        return [f"{sample['name']}: {exc}"]
    except Exception as exc:  # vLLM's validation refused it
        return [f"{sample['name']}: {one_line(exc)}"]
    found = [serve.backend(kind, getattr(args, f"{kind}_backend", None), modules.get(kind, {}))
             for kind in KINDS]
    return [f"{sample['name']}: {problem}" for problem in found if problem]


def check_vllm_serve_args(image: Image, expected: dict[str, Any]) -> str:
    spec, _ = entrypoint(expected)
    version = public_version(installed_vllm())
    samples: list[dict[str, Any]] = spec.get("accept", [])
    if not samples:
        raise CheckSkipped(f"smoke suite {spec.get('suite')!r} has no accept/*.env sample")
    serve, data = Serve(), backend_data(image)
    problems = data_problems(data, version, serve)
    for sample in samples:
        problems += sample_problems(serve, sample, data.get("modules", {}))
    if problems:
        raise CheckFailed("; ".join(problems))
    return (f"vLLM {version} parses the command of {len(samples)} sample(s) of suite "
            f"{spec.get('suite')}, and resolves their backends: "
            f"{', '.join(s['name'] for s in samples)}")
