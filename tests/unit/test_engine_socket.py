"""The image inspect over a local engine's socket, against a server on a Unix socket that
answers as the engine's API does (the real engine's answer is compared with the SDK's in
tests/integration/test_pipeline.py)."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from socketserver import StreamRequestHandler

import pytest

from sparkbake.oci.engine_socket import DEFAULT_SOCKET, inspect_image, local_socket

IMAGE = "localhost:5000/sparkbake-demo:demo"
ATTRS = {"Id": "sha256:" + "a" * 64, "Config": {"Labels": {"dev.sparkbake.tag": "demo"}}}


class _Engine(BaseHTTPRequestHandler):
    asked: list[str]
    answer: tuple[int, bytes]

    def do_GET(self) -> None:
        self.asked.append(f"{self.request_version} {self.path}")
        status, body = self.answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        request, _ = super().get_request()
        return request, ("local", 0)  # http.server logs a client address


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[tuple[Path, type[_Engine]]]:
    answer = (200, json.dumps(ATTRS).encode())
    handler = type("Handler", (_Engine,), {"asked": [], "answer": answer})
    path = tmp_path / "docker.sock"
    server = _UnixServer(str(path), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield path, handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("host", "expected"), [
    (None, DEFAULT_SOCKET),
    ("", DEFAULT_SOCKET),
    ("unix:///run/user/1000/docker.sock", Path("/run/user/1000/docker.sock")),
    ("unix://var/run/docker.sock", Path("/var/run/docker.sock")),  # as the SDK reads it
    ("tcp://127.0.0.1:2376", None),
    ("ssh://node1", None),
])
def test_the_socket_is_the_one_the_sdk_would_use(host: str | None, expected: Path | None) -> None:
    environ = {} if host is None else {"DOCKER_HOST": host}
    assert local_socket(environ) == expected


def test_an_image_s_attributes_come_back_as_the_engine_sent_them(
        engine: tuple[Path, type[_Engine]]) -> None:
    path, handler = engine
    assert inspect_image(path, IMAGE) == ATTRS
    # the name's / and : as written; HTTP/1.0, so the answer comes whole, never in chunks
    assert handler.asked == [f"HTTP/1.0 /images/{IMAGE}/json"]


def test_an_image_the_engine_does_not_have_is_none(engine: tuple[Path, type[_Engine]]) -> None:
    path, handler = engine
    handler.answer = (404, b'{"message": "No such image: x"}')
    assert inspect_image(path, "x:y") is None


@pytest.mark.parametrize("answer", [(500, b'{"message": "boom"}'), (200, b"not json"),
                                    (200, b"[1, 2]")])
def test_any_other_answer_is_an_os_error(engine: tuple[Path, type[_Engine]],
                                         answer: tuple[int, bytes]) -> None:
    path, handler = engine
    handler.answer = answer
    with pytest.raises(OSError, match=str(path)):
        inspect_image(path, IMAGE)


def test_no_engine_on_the_socket_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        inspect_image(tmp_path / "absent.sock", IMAGE)


@pytest.mark.parametrize("answer", [
    b"",  # closed at once
    b"SSH-2.0-OpenSSH_9.2\r\n",  # not HTTP
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json",  # cut before the body
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
])
def test_an_answer_that_is_not_whole_http_is_an_os_error(tmp_path: Path, answer: bytes) -> None:
    class Raw(StreamRequestHandler):
        def handle(self) -> None:
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
            self.wfile.write(answer)

    path = tmp_path / "docker.sock"
    server = _UnixServer(str(path), Raw)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(OSError, match=str(path)):
            inspect_image(path, IMAGE)
    finally:
        server.shutdown()
        server.server_close()
