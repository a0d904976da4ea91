"""sparkbake image entrypoint.

With arguments, it runs exactly them (never adding env-derived flags). Without, it builds
`vllm serve` from the environment. `--print` shows the command instead of running it.
Standard library only: this file is copied into the image.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

MANIFEST = "/opt/sparkbake/manifest.json"

# environment variable -> vllm serve flag; unset variables add nothing
# (the full mapping of the reference deployment, with preflight, is the entrypoint issue's)
FLAGS = (
    ("SERVED_MODEL_NAME", "--served-model-name"),
    ("API_PORT", "--port"),
    ("NNODES", "--nnodes"),
    ("NODE_RANK", "--node-rank"),
    ("MASTER_ADDR", "--master-addr"),
    ("MASTER_PORT", "--master-port"),
    ("TP_SIZE", "--tensor-parallel-size"),
    ("DCP_SIZE", "--decode-context-parallel-size"),
    ("DCP_COMM_BACKEND", "--dcp-comm-backend"),
    ("GPU_MEMORY_UTILIZATION", "--gpu-memory-utilization"),
    ("MAX_MODEL_LEN", "--max-model-len"),
    ("MAX_NUM_SEQS", "--max-num-seqs"),
    ("MAX_NUM_BATCHED_TOKENS", "--max-num-batched-tokens"),
    ("MAX_CUDAGRAPH_CAPTURE_SIZE", "--max-cudagraph-capture-size"),
)


def serve_command(env: dict[str, str]) -> list[str]:
    model = env.get("MODEL") or env.get("MODEL_PATH")
    if not model:
        raise SystemExit("sparkbake: set MODEL (or pass a command); see --print")
    cmd = ["vllm", "serve", model]
    for name, flag in FLAGS:
        if env.get(name):
            cmd += [flag, env[name]]
    return cmd


def main(argv: list[str]) -> int:
    show = bool(argv) and argv[0] == "--print"
    args = argv[1:] if show else argv
    if show and not args and not (os.environ.get("MODEL") or os.environ.get("MODEL_PATH")):
        with open(MANIFEST) as handle:
            manifest = json.load(handle)
        print(f"{manifest['image']} (inputs {manifest['inputs'][:12]}); set MODEL to serve")
        return 0
    cmd = args or serve_command(dict(os.environ))
    if show:
        print(shlex.join(cmd))
        return 0
    os.execvp(cmd[0], cmd)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
