"""The dsv4-4node suite's serve command against the real vLLM 0.33.0: the command the serve
checks build for DeepSeek-V4-Flash-Vision cut to a few layers with dummy weights goes
through `vllm serve`'s own argument parser and `AsyncEngineArgs.from_cli_args` in the
patched tree of production-3.73-vision (pure Python, nothing compiled), in the venv of its
patch-tests lock. The tree and the venv are the cached ones of
`sparkbake patch-tests 3.73-vision`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from sparkbake.config import versions
from sparkbake.nodes import sample_envs, serve_checks

REPO = Path(__file__).parents[2]
MODEL = REPO / "tests" / "data" / "models" / "dsv4-flash-vision"

# `vllm serve ARGV` parsed as vllm/entrypoints/cli/serve.py parses it; prints the engine
# arguments the test looks at. Without a GPU vLLM's platform is unspecified: parse as on a
# CPU, as `vllm bench` does.
PARSE = """
import json, sys
from vllm import platforms
if platforms.current_platform.is_unspecified():
    from vllm.platforms.cpu import CpuPlatform
    platforms.current_platform = CpuPlatform()
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser(prog="vllm")
serve = ServeSubcommand()
serve.subparser_init(parser.add_subparsers(dest="subparser"))
args = parser.parse_args(json.loads(sys.argv[1])[1:])
serve.validate(args)
engine_args = AsyncEngineArgs.from_cli_args(args)
print(json.dumps({"hf_overrides": engine_args.hf_overrides,
                  "load_format": engine_args.load_format}))
"""


def engine_args(python: Path, tree: Path, command: list[str]) -> dict[str, Any]:
    done = subprocess.run([str(python), "-B", "-c", PARSE, json.dumps(command)],
                          capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    assert done.returncode == 0, done.stderr[-2000:]
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def test_vllm_reads_the_dummy_weights_and_the_cut_from_the_suites_command(
        real_vllm: tuple[Path, Path]) -> None:
    python, tree = real_vllm
    loaded = versions.load(REPO / "versions.yaml")
    tag = loaded.tag("3.73-vision")
    served = serve_checks.prepare(tag, sample_envs.load(loaded, tag), None, MODEL)
    assert served.cut is not None
    parsed = engine_args(python, tree, served.command)
    assert parsed == {"load_format": "dummy", "hf_overrides": served.cut.overrides}
    assert parsed["hf_overrides"] == {"num_hidden_layers": 4,
                                      "compress_ratios": [0, 0, 4, 128, 0, 0, 0]}
