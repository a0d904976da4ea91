"""An HTTP proxy on 127.0.0.1 in front of a real registry that injects faults: the next
request matching a method and path answers 503 or 415, or loses its connection, once each."""

from __future__ import annotations

import contextlib
import http.server
import re
import threading
from dataclasses import dataclass, field
from typing import Literal

import requests

from tests.localserver import serving

Fault = Literal["503", "415", "drop"]  # an answer of that status, or a lost connection
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass
class Faults:
    """Faults still to inject, in order: (method, path pattern, fault); and what was done."""

    pending: list[tuple[str, str, Fault]]
    done: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for index, (want, pattern, fault) in enumerate(self.pending):
                if want == method and re.search(pattern, path):
                    del self.pending[index]
                    self.done.append(f"{fault} {method} {path.split('?')[0]}")
                    return fault
        return None


def _handler(target: str, faults: Faults,
             verify: bool | str) -> type[http.server.BaseHTTPRequestHandler]:
    class Forward(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            fault = faults.take(self.command, self.path)
            if fault == "drop":
                self.close_connection = True
                self.connection.close()
                return
            if fault in ("503", "415"):
                refusal = b'{"errors":[{"code":"UNSUPPORTED","message":"not here"}]}'
                self.send_response(int(fault))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(refusal)))
                self.end_headers()
                self.wfile.write(refusal)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            answer = requests.request(self.command, target + self.path, data=body,
                                      headers=headers, allow_redirects=False, timeout=60,
                                      verify=verify)
            self.send_response(answer.status_code)
            for key, value in answer.headers.items():
                if key.lower() == "location":  # the registry's own scheme: the proxy's is http
                    value = value.replace("https://", "http://", 1)
                if key.lower() not in HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer.content)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Forward


def fault_proxy(target: str, faults: Faults,
                verify: bool | str = True) -> contextlib.AbstractContextManager[int]:
    """A proxy to target (http(s)://host:port, TLS trusted by verify) on a free port of
    127.0.0.1, in plain HTTP; its port."""
    return serving(_handler(target, faults, verify))
