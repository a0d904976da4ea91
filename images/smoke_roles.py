"""node-roles: each multi-node sample's command taken where the image's own vLLM sends it.

For every accept sample of the tag's smoke suite with more than one node, the command goes
through `vllm serve`'s parser and validation (smoke_vllm.Serve), then through the serve
subcommand's own dispatch, `ServeSubcommand.cmd`, with the entry points it can reach (the API
server, the headless engine, several API servers, the data-parallel supervisor) replaced by
recorders. The head (rank 0) must reach the one API server, every other rank the headless
path; and a worker must build the same engine arguments as the head but for its rank, since
each node makes its own engine configuration. Mounted beside smoke_check.py, never baked.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from smoke_common import CheckFailed, CheckSkipped, Image, one_line
from smoke_entry import entrypoint
from smoke_vllm import Serve, installed_vllm

# vllm/entrypoints/cli/serve.py's names for what a node runs
API_SERVER, HEADLESS = "api-server", "headless"
ENTRY_POINTS = {"run_server": API_SERVER, "run_headless": HEADLESS,
                "run_multi_api_server": "api-servers", "run_dp_supervisor": "dp-supervisor"}
PER_NODE = {"node_rank"}  # engine arguments that differ between the nodes of one deployment


@contextlib.contextmanager
def recorded(reached: list[str]) -> Iterator[None]:
    """serve.py's entry points replaced by recorders of their names, for the block."""
    from vllm.entrypoints.cli import serve

    def recorder(name: str) -> Callable[..., Any]:
        def record(*_: Any, **__: Any) -> None:
            reached.append(name)

        async def record_server(*_: Any, **__: Any) -> None:  # serve.py runs it in uvloop
            reached.append(name)
        return record_server if name == API_SERVER else record

    saved = {attr: getattr(serve, attr) for attr in ENTRY_POINTS}
    try:
        for attr, name in ENTRY_POINTS.items():
            setattr(serve, attr, recorder(name))
        yield
    finally:
        for attr, original in saved.items():
            setattr(serve, attr, original)


def dispatched(serve: Serve, args: argparse.Namespace) -> str:
    """What vLLM's serve subcommand starts for these arguments."""
    if getattr(args, "grpc", False):  # serve.py starts the gRPC server before any role
        return "grpc-server"
    reached: list[str] = []
    with recorded(reached):
        serve.command.cmd(args)
    return " then ".join(reached) or "nothing"


def wanted(args: argparse.Namespace) -> str:
    return HEADLESS if (args.nnodes or 1) > 1 and (args.node_rank or 0) > 0 else API_SERVER


def engine_fields(serve: Serve, args: argparse.Namespace) -> dict[str, Any]:
    engine = serve.engine_args.from_cli_args(args)
    return {name: value for name, value in vars(engine).items() if name not in PER_NODE}


def differences(worker: dict[str, Any], head: dict[str, Any]) -> list[str]:
    return sorted(name for name in head.keys() | worker.keys()
                  if worker.get(name) != head.get(name))


def node_problems(serve: Serve, samples: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(problems, one line per node checked)."""
    problems, seen, heads = [], [], {}
    parsed = []
    for sample in samples:
        try:
            args = serve.parse(str(sample["command"]))
        except Exception as exc:  # vllm-serve-args reports it in full
            problems.append(f"{sample['name']}: vllm serve refuses it: {one_line(exc)}")
            continue
        if (args.nnodes or 1) > 1:
            parsed.append((sample["name"], args))
            if (args.node_rank or 0) == 0:
                heads[args.nnodes] = engine_fields(serve, args)
    for name, args in parsed:
        want, engine = wanted(args), engine_fields(serve, args)
        try:
            got = dispatched(serve, args)
        except Exception as exc:  # serve.py refused the combination: the finding
            got = f"an error: {one_line(exc)}"
        seen.append(f"{name} (rank {args.node_rank}) -> {got}")
        if got != want:
            problems.append(f"{name} (rank {args.node_rank} of {args.nnodes}) reaches "
                            f"{got}, not the {want} path")
        head = heads.get(args.nnodes)
        if want == HEADLESS and head is not None and differences(engine, head):
            problems.append(f"{name}: its engine arguments differ from the head's in "
                            f"{', '.join(differences(engine, head))}")
    return problems, seen


def check_node_roles(image: Image, expected: dict[str, Any]) -> str:
    spec, _ = entrypoint(expected)
    installed_vllm()
    samples: list[dict[str, Any]] = spec.get("accept", [])
    serve = Serve()
    problems, seen = node_problems(serve, samples)
    if problems:
        raise CheckFailed("; ".join(problems))
    if not seen:
        raise CheckSkipped(f"smoke suite {spec.get('suite')!r} has no multi-node accept sample")
    return f"vLLM's serve dispatch: {'; '.join(seen)}"
