"""Ready means a token: a server counts as ready when /health answers 200 and then one
streamed completion (server-sent events, `"stream": true`, one token) returns its first
token; a /health of 200 does not show that the model can generate. Both are timed from the
container's start."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sparkbake.core.smoke_record import CheckFailed
from sparkbake.nodes import serve_client
from sparkbake.nodes.serve_client import Server

__all__ = ["Ready", "check_ready", "first_token", "sse_events"]

DONE = "[DONE]"
LEAST = 30.0  # seconds the streamed request may take at least, whatever is left of a timeout


@dataclass(frozen=True)
class Ready:
    """Seconds from the container's start to /health's 200 and to the first streamed token."""

    health_s: float
    first_token_s: float

    def describe(self) -> str:
        return (f"ready: /health 200 at {self.health_s:.1f} s, first token at "
                f"{self.first_token_s:.1f} s after the container started")


def sse_events(lines: Iterable[bytes | str]) -> Iterator[dict[str, Any]]:
    """The JSON of each `data:` line of a server-sent event stream, until `data: [DONE]`;
    other lines (blank, comments, `event:`) are skipped."""
    for raw in lines:
        line = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == DONE:
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise CheckFailed(f"the stream sent a data line that is not JSON: {data[:120]}") \
                from exc
        if isinstance(event, dict):
            yield event


def token_of(event: dict[str, Any]) -> bool:
    """Whether an event carries a generated token: a choice with text (a completion) or a
    delta (a chat); vLLM's last event of usage alone has no choice."""
    if isinstance(event.get("error"), dict):
        raise CheckFailed(f"the streamed request failed: "
                          f"{' '.join(str(event['error'].get('message')).split())[:160]}")
    choices = event.get("choices") or []
    return any(isinstance(c, dict) and ("text" in c or "delta" in c) for c in choices)


def first_token(server: Server, model: str, timeout: float) -> float:
    """Seconds until a streamed one-token completion of serve_client.PROMPT sends its token."""
    import requests

    start = time.monotonic()
    body = {"model": model, "prompt": serve_client.PROMPT, "max_tokens": 1, "temperature": 0,
            "stream": True}
    try:
        with server.session.post(server.base_url + "/v1/completions", json=body, stream=True,
                                 timeout=timeout) as response:
            if response.status_code != 200:
                raise CheckFailed(f"the streamed request: HTTP {response.status_code}: "
                                  f"{' '.join(response.text.split())[:160]}")
            if any(token_of(event) for event in sse_events(response.iter_lines())):
                return time.monotonic() - start
    except requests.RequestException as exc:
        raise CheckFailed(f"the streamed request got no token within {timeout:.0f} s: "
                          f"{type(exc).__name__}") from exc
    raise CheckFailed("the streamed request ended without a token")


def check_ready(server: Server, model: str, timeout: float, exited: Callable[[], str | None],
                started: float) -> Ready:
    """/health polled (check_health) until 200, then the first streamed token; started is
    the monotonic time the container started."""
    serve_client.check_health(server, timeout, exited)
    health = time.monotonic() - started
    first_token(server, model, max(timeout - health, LEAST))
    return Ready(health, time.monotonic() - started)
