"""Ready means a token: the server-sent events of a streamed completion read as vLLM 0.33.0
sends them (recorded from the cpu-3.73 image serving a tiny model), and the first token
awaited from a real HTTP server on 127.0.0.1 that replays them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkbake.core.smoke_record import CheckFailed
from sparkbake.nodes import serve_stream
from sparkbake.nodes.serve_client import Server

STREAMS = Path(__file__).resolve().parents[1] / "data" / "serve-streams"
RECORDED = (STREAMS / "completion-one-token.txt").read_bytes()  # `data: {...}`, `data: [DONE]`
NOT_FOUND = (STREAMS / "model-not-found.json").read_bytes()  # vLLM's 404 for another model
# vLLM's error event inside a stream (its ErrorResponse as a data line), then [DONE]
FAILED = (b'data: {"error": {"object": "error", "message": "Request failed:\\n  engine '
          b'dead", "type": "InternalServerError", "param": null, "code": 500}}\n\n'
          b"data: [DONE]\n\n")


class Replay(BaseHTTPRequestHandler):
    """/health 200; /v1/completions answers with the stream or body its server holds."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        status, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream" if status == 200
                         else "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def replay() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def server_of(httpd: ThreadingHTTPServer, status: int, body: bytes) -> Server:
    httpd.answer = (status, body)  # type: ignore[attr-defined]
    return Server(f"http://127.0.0.1:{httpd.server_address[1]}", timeout=5)


def test_the_recorded_stream_is_one_token_then_done() -> None:
    events = list(serve_stream.sse_events(RECORDED.splitlines()))
    assert [event["choices"][0]["finish_reason"] for event in events] == ["length"]
    assert serve_stream.token_of(events[0])
    # vLLM's closing event of usage alone (stream_options.include_usage) carries no token
    assert not serve_stream.token_of({"choices": [], "usage": {"completion_tokens": 1}})


def test_nothing_after_done_is_read_and_other_lines_are_skipped() -> None:
    lines = [": keep-alive", "event: message", 'data: {"choices": []}', "data: [DONE]",
             "data: not json"]
    assert list(serve_stream.sse_events(lines)) == [{"choices": []}]
    with pytest.raises(CheckFailed, match=r"^the stream sent a data line that is not JSON: "
                                           r"not json$"):
        list(serve_stream.sse_events(["data: not json"]))


def test_the_first_token_of_the_recorded_stream_makes_the_server_ready(
        replay: ThreadingHTTPServer) -> None:
    server = server_of(replay, 200, RECORDED)
    assert 0 <= serve_stream.first_token(server, "tiny", 5) < 5
    ready = serve_stream.check_ready(server, "tiny", 5, lambda: None, started=0.0)
    assert 0 < ready.health_s <= ready.first_token_s
    assert serve_stream.Ready(41.23, 43.07).describe() == \
        "ready: /health 200 at 41.2 s, first token at 43.1 s after the container started"


@pytest.mark.parametrize(("status", "body", "line"), [
    (404, NOT_FOUND, "the streamed request: HTTP 404: " + NOT_FOUND.decode()[:160]),
    (200, FAILED, "the streamed request failed: Request failed: engine dead"),
    (200, b"data: [DONE]\n\n", "the streamed request ended without a token"),
])
def test_a_health_of_200_without_a_token_is_not_ready(
        replay: ThreadingHTTPServer, status: int, body: bytes, line: str) -> None:
    with pytest.raises(CheckFailed) as caught:
        serve_stream.check_ready(server_of(replay, status, body), "tiny", 5, lambda: None, 0.0)
    assert str(caught.value) == line
