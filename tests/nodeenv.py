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


def write_sysctls(root: Path, **overrides: int) -> Path:
    """A /proc/sys with the reference's host memory floor, some values overridden."""
    values = {"min_free_kbytes": 1048576, "dirty_bytes": 536870912,
              "dirty_background_bytes": 134217728, "dirty_expire_centisecs": 500,
              "dirty_writeback_centisecs": 100, "swappiness": 10, **overrides}
    (root / "vm").mkdir(parents=True, exist_ok=True)
    for name, number in values.items():
        (root / "vm" / name).write_text(f"{number}\n")
    return root
