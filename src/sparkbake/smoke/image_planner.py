"""check-env --ask-image: a node's KV cache asked of vLLM's own planner in the tag's image.

The memory budget plans the KV cache with the host model of vLLM's planner (images/
kv_plan.py), which the smoke check kv-plan holds to each image's planner on the suite's
layouts. Asked, check-env also runs images/smoke_kv.py in a network-less container of the
tag's image, on the node's model config and layout, with each rank's KV room as the budget
found it, and sets vLLM's figures beside the host model's: the pool's block, one request,
the blocks, the tokens and vLLM's own refusal. About a minute on a native engine; under
emulation (an arm64 image on an x86_64 host) many more.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkbake.console.display import Console
from sparkbake.errors import ConfigError, SmokeError
from sparkbake.oci import docker_engine
from sparkbake.smoke import checks

__all__ = ["ask", "compare", "planner_command"]

SCRIPT = f"{checks.CHECKER_DIR}/smoke_kv.py"
MODEL_DIR = "/model"


def planner_command(figures: list[dict[str, Any]]) -> list[str]:
    """smoke_kv.py's arguments for the file's layout (memory_figures), each rank's room as
    one trial: the head's on rank 0, a worker's on the others."""
    rooms = {numbers["role"]: max(0, int(numbers["kv_room"])) for numbers in figures}
    shape = figures[0]
    ranks = [rooms["head"]] + [rooms.get("worker", rooms["head"])] * (shape["tp_size"] - 1)
    return ["-B", SCRIPT, f"{MODEL_DIR}/config.json", "--tp", str(shape["tp_size"]),
            *(["--dspark"] if shape["dspark"] else []),
            "--max-model-len", str(shape["max_model_len"]),
            "--max-num-batched-tokens", str(shape["max_num_batched_tokens"]),
            "--available", ",".join(map(str, ranks))]


def ask(client: docker_engine.Client, image: str, model_dir: Path, command: list[str],
        log_path: Path, *, console: Console) -> dict[str, Any]:
    """vLLM's plan of the layout, as the image's planner gives it (smoke_kv.py's record)."""
    if not docker_engine.image_exists(client, image):
        raise ConfigError(f"check-env --ask-image: {image} is not on this engine",
                          "build or pull the tag's image first, or leave out --ask-image")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    done = docker_engine.run_container(
        client, image, command, entrypoint=[checks.PYTHON_IN_IMAGE],
        copy_in=checks.checker_files(), network=False, log_path=log_path,
        volumes={str(model_dir): {"bind": MODEL_DIR, "mode": "ro"}})
    lines = done.output.strip().splitlines()
    try:
        record: dict[str, Any] = json.loads(lines[-1]) if done.exit_code == 0 else {}
    except (IndexError, ValueError):
        record = {}
    if not record.get("plans"):
        raise SmokeError(f"vLLM's planner in {image} gave no plan (exit {done.exit_code}): "
                         f"{' / '.join(done.tail(2).splitlines())}", f"see {log_path}")
    return record


def compare(record: dict[str, Any], figures: list[dict[str, Any]]) -> list[str]:
    """vLLM's figures beside the host model's, a line each: what the image's planner gave,
    then each figure of the host model's that differs from it."""
    plan = record["plans"][0]
    trial = plan["trials"][0]
    head = next(numbers for numbers in figures if numbers["role"] == "head")
    starts = all(numbers["starts"] for numbers in figures)
    said = [f"vLLM {record['vllm']}'s planner in the image: a block {plan['block_bytes']:,} B, "
            f"one request {plan['request_bytes']:,} B, " + (
                f"refused: {trial['refused']}" if trial["refused"] else
                f"KV cache size {trial['tokens']:,} tokens, {trial['concurrency']:.2f}x")]
    mine = {"KV cache size": (head["kv_tokens"], None if trial["refused"] else trial["tokens"]),
            "starts": (starts, not trial["refused"])}
    said += [f"the host model differs: {name} {ours} where vLLM's planner gives {theirs}"
             for name, (ours, theirs) in mine.items() if ours != theirs]
    return said
