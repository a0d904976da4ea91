"""The node-roles check against the real vLLM 0.33.0 (tests/smoke/realvllm.py): each node of
the reference layout goes where vLLM's own serve dispatch sends it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from tests.nodeenv import API_SERVER_OPTIONS
from tests.smoke.realvllm import fake_root, run_check, suite_expected


def node_roles(root: Path, expected: dict[str, Any], real_vllm: tuple[Path, Path]
               ) -> dict[str, Any]:
    python, tree = real_vllm
    return run_check("node-roles", fake_root(root), expected, python, str(tree))


def test_the_head_serves_the_api_and_every_worker_runs_headless(
        real_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    check = node_roles(tmp_path, suite_expected(), real_vllm)
    assert (check["status"], check["detail"]) == ("passed", (
        "vLLM's serve dispatch: accept/head.env (rank 0) -> api-server; "
        "accept/worker-1.env (rank 1) -> headless; accept/worker-2.env (rank 2) -> headless; "
        "accept/worker-3.env (rank 3) -> headless"))


def without_headless(command: str) -> str:
    return shlex.join(word for word in shlex.split(command) if word != "--headless")


def test_a_worker_without_headless_reaches_an_api_server_and_fails(
        real_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    """The command every node got before node roles: the head's, with the worker's rank."""
    expected = suite_expected()
    for sample in expected["entrypoint"]["accept"]:
        sample["command"] = without_headless(sample["command"])
    check = node_roles(tmp_path, expected, real_vllm)
    assert check["status"] == "failed"
    assert check["detail"].split("; ") == [
        f"accept/worker-{rank}.env (rank {rank} of 4) reaches api-server, not the headless path"
        for rank in (1, 2, 3)]


def test_a_head_made_headless_fails(real_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    expected = suite_expected()
    head = expected["entrypoint"]["accept"][0]
    assert head["name"] == "accept/head.env"
    head["command"] += " --headless"
    check = node_roles(tmp_path, expected, real_vllm)
    assert check["detail"].split("; ")[0] == (
        "accept/head.env (rank 0 of 4) reaches headless, not the api-server path")


def test_a_worker_whose_engine_differs_from_the_heads_fails(
        real_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    expected = suite_expected()
    worker = expected["entrypoint"]["accept"][1]
    worker["command"] = worker["command"].replace("--max-num-seqs 8", "--max-num-seqs 4")
    check = node_roles(tmp_path, expected, real_vllm)
    assert check["status"] == "failed"
    assert check["detail"] == ("accept/worker-1.env: its engine arguments differ from the "
                               "head's in max_num_seqs")


def test_api_server_options_forced_on_a_worker_are_refused_by_vllm(
        real_vllm: tuple[Path, Path], tmp_path: Path) -> None:
    expected = suite_expected()
    worker = expected["entrypoint"]["accept"][1]
    worker["command"] += " --api-server-count 2"
    check = node_roles(tmp_path, expected, real_vllm)
    assert check["status"] == "failed"
    assert check["detail"].startswith(
        "accept/worker-1.env (rank 1 of 4) reaches an error: ValueError: "
        "--api-server-count=2 cannot be used with --headless")


def test_the_options_a_worker_drops_are_the_api_servers_of_vllm(
        real_vllm: tuple[Path, Path]) -> None:
    """What tests/nodeenv.py drops from a worker's command is vLLM's FrontendArgs."""
    import subprocess
    python, tree = real_vllm
    program = ("import dataclasses; from vllm.entrypoints.common.cli_args import FrontendArgs;"
               "print(' '.join(f.name for f in dataclasses.fields(FrontendArgs)))")
    done = subprocess.run([str(python), "-c", program], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tree)}, check=True, timeout=300)
    frontend = set(done.stdout.split())
    dropped = {option.removeprefix("--").split(".")[0].split("=")[0].replace("-", "_")
               for option in API_SERVER_OPTIONS}
    assert dropped <= frontend
