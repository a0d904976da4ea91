"""A serve container that exits at start-up: the serve checks name the error line of its log
(vLLM's, Python's or the preflight's), not only that the server did not become healthy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sparkbake.core.smoke_record import CheckFailed
from sparkbake.nodes import serve_checks, serve_client, serve_log

LOGS = Path(__file__).parents[1] / "data" / "serve-logs"
TOO_LONG = ("Value error, User-specified max_model_len (8192) is greater than the derived "
            "max_model_len (max_position_embeddings=4096.0")


def test_vllms_refusal_of_a_long_max_model_len_is_its_value_error() -> None:
    line = serve_log.error_line((LOGS / "max-model-len.log").read_text())
    assert line is not None and line.startswith(TOO_LONG)
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in line
    assert "input_value" not in line and len(line) <= serve_log.LONGEST  # no echo of args


def test_an_engine_core_that_died_is_named_by_its_cause_not_the_api_servers_pointer() -> None:
    line = serve_log.error_line((LOGS / "engine-core-died.log").read_text())
    assert line == ("ValueError: To serve at least one request with the models's max seq len "
                    "(8192), (0.38 GiB KV cache is needed, which is larger than the available "
                    "KV cache memory (0.12 GiB).")


def test_a_preflight_refusal_is_its_error_line() -> None:
    assert serve_log.error_line((LOGS / "preflight-refused.log").read_text()) == (
        "sparkbake preflight: error: MAX_MODEL_LEN=8192 is above the 4096 tokens vLLM takes "
        "for the model in /model (n_positions 4096) [max-model-len-above-model]")


@pytest.mark.parametrize(("log", "line"), [
    ("vllm serve: error: argument --max-model-len: invalid value\n",
     "vllm serve: error: argument --max-model-len: invalid value"),
    ("(APIServer pid=1) \x1b[1;31mERROR\x1b[0m 12-05 10:00:00 [launcher.py:9] bind failed\n"
     "INFO shutting down\n", "bind failed"),
    ("INFO 12-05 10:00:00 [api_server.py:1] vLLM API server version 0.33.0\n", None),
    ("", None),
])
def test_other_error_lines(log: str, line: str | None) -> None:
    assert serve_log.error_line(log) == line


@dataclass
class ExitedBox:
    """A container that has exited, as the Docker SDK shows it."""

    log: bytes
    code: int = 1
    status: str = "exited"
    attrs: dict[str, Any] = field(default_factory=dict)

    def reload(self) -> None:
        self.attrs = {"State": {"ExitCode": self.code}}

    def logs(self, tail: int | None = None) -> bytes:
        return self.log


def test_the_health_check_fails_with_vllms_own_line() -> None:
    box = ExitedBox((LOGS / "max-model-len.log").read_bytes())
    server = serve_client.Server("http://127.0.0.1:9")  # never asked: the box has exited
    with pytest.raises(CheckFailed) as caught:
        serve_client.check_health(server, 10, serve_checks.exited(box), poll=0.01)
    assert str(caught.value).startswith(
        f"the server stopped before it was healthy: container exited with 1: {TOO_LONG}")


def test_a_log_without_an_error_line_gives_its_last_line() -> None:
    box = ExitedBox(b"starting\nKilled\n", code=137)
    assert serve_checks.exited(box)() == "container exited with 137: Killed"
    assert serve_checks.exited(ExitedBox(b""))() == "container exited with 1: no output"


def test_a_process_prefix_is_dropped() -> None:
    assert serve_log.error_line("(APIServer pid=1) OSError: [Errno 98] Address in use\n"
                                "(APIServer pid=1)   shutting down\n") == \
        "OSError: [Errno 98] Address in use"
