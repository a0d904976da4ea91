"""The image entrypoint, run on the host: arguments are run exactly, env builds vllm serve."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

import pytest

from sparkbake import resources

SCRIPT = resources.path("entrypoint.py")


def load_entrypoint() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sparkbake_entrypoint", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env or {"PATH": "/usr/bin:/bin"}, check=False)


def test_given_arguments_are_run_exactly_without_env_flags() -> None:
    result = run("--print", "vllm", "serve", "/m", "--port", "1",
                 env={"PATH": "/usr/bin:/bin", "API_PORT": "8300", "MODEL": "/other"})
    assert result.stdout.strip() == "vllm serve /m --port 1"


def test_without_arguments_the_command_comes_from_the_environment() -> None:
    entrypoint = load_entrypoint()
    cmd = entrypoint.serve_command({"MODEL": "/models/x", "API_PORT": "8300", "TP_SIZE": "4",
                                    "DCP_SIZE": "2", "UNRELATED": "y"})
    assert cmd == ["vllm", "serve", "/models/x", "--port", "8300",
                   "--tensor-parallel-size", "4", "--decode-context-parallel-size", "2"]


def test_no_model_and_no_arguments_is_an_error_that_says_what_to_set() -> None:
    entrypoint = load_entrypoint()
    with pytest.raises(SystemExit, match="set MODEL"):
        entrypoint.serve_command({})


def test_arguments_are_executed_not_just_printed() -> None:
    result = run("sh", "-c", "echo ran $0", "x y")
    assert (result.returncode, result.stdout.strip()) == (0, "ran x y")
