"""Shared by the entrypoint, preflight and check-env tests: the reference node files and a
/proc/sys with the reference's host memory floor."""

from __future__ import annotations

import shlex
import string
from pathlib import Path

ENV_DIR = Path(__file__).parent / "data" / "env"
HEAD_IP = "192.168.100.11"  # MASTER_ADDR and the head's VLLM_HOST_IP in head.env/worker.env


def reference_command(rank: int) -> list[str]:
    """The reference deployment's `vllm serve` line for the node of this rank."""
    text = (ENV_DIR / "reference-serve.sh").read_text().replace("\\\n", " ")
    filled = string.Template(text).substitute(RANK=str(rank), HEAD_IP=HEAD_IP)
    return shlex.split(filled, comments=True)


# The API server's options of the reference command (vLLM's FrontendArgs): with the value
# each takes, if any. A headless worker starts no server, so its command has none of them.
API_SERVER_OPTIONS = {"--host": 1, "--port": 1, "--tool-call-parser": 1,
                      "--enable-auto-tool-choice": 0,
                      "--default-chat-template-kwargs.thinking=true": 0}


def node_command(rank: int) -> list[str]:
    """The reference command as the node of this rank must run it under vLLM 0.33.0: the
    head's as written; a worker's with --headless after its rank and without the API
    server's options (vllm/entrypoints/cli/serve.py starts an API server on any node
    without --headless)."""
    cmd = reference_command(rank)
    if rank == 0:
        return cmd
    kept: list[str] = []
    words = iter(cmd)
    for word in words:
        if word in API_SERVER_OPTIONS:
            for _ in range(API_SERVER_OPTIONS[word]):
                next(words)
            continue
        kept.append(word)
    at = kept.index("--node-rank") + 2
    return [*kept[:at], "--headless", *kept[at:]]


def write_sysctls(root: Path, **overrides: int) -> Path:
    """A host root whose proc/sys has the reference's host memory floor, some values
    overridden; the root is returned (check-env --host-root)."""
    values = {"min_free_kbytes": 1048576, "dirty_bytes": 536870912,
              "dirty_background_bytes": 134217728, "dirty_expire_centisecs": 500,
              "dirty_writeback_centisecs": 100, "swappiness": 10, **overrides}
    vm = root / "proc" / "sys" / "vm"
    vm.mkdir(parents=True, exist_ok=True)
    for name, number in values.items():
        (vm / name).write_text(f"{number}\n")
    return root


# What production-3.73-vision's image has (versions.yaml env): the reference file with these
# backends and DCP 1 is what that image can serve.
IMAGE_BACKENDS = ("ATTENTION_BACKEND=FLASHINFER_MLA_SPARSE_DSV4  MOE_BACKEND=b12x  "
                  "LINEAR_BACKEND=deep_gemm")


def at_dcp_1(text: str) -> str:
    """A reference node file with DCP_SIZE=1 and the image's backends, nothing else changed."""
    lines = [("DCP_SIZE=1" if line.startswith("DCP_SIZE=") else
              IMAGE_BACKENDS if line.startswith("ATTENTION_BACKEND=") else line)
             for line in text.splitlines()]
    assert "DCP_SIZE=1" in lines and IMAGE_BACKENDS in lines
    return "\n".join(lines) + "\n"


def image_command(rank: int) -> list[str]:
    """The reference command as production-3.73-vision serves it from at_dcp_1's file
    without the gather and VISION_MHC (images/smoke/dsv4-4node/accept): DCP 1, no DCP comm
    backend, the image's backends."""
    cmd = node_command(rank)
    at = cmd.index("--decode-context-parallel-size")
    assert cmd[at:at + 10] == [
        "--decode-context-parallel-size", "2", "--dcp-comm-backend", "ag_rs",
        "--attention-backend", "B12X_MLA_SPARSE", "--moe-backend", "b12x",
        "--linear-backend", "b12x"]
    cmd[at:at + 10] = ["--decode-context-parallel-size", "1", *(
        word for pair in IMAGE_BACKENDS.split() for word in (
            "--" + pair.split("=")[0].lower().replace("_", "-"), pair.split("=")[1]))]
    return cmd
