"""An HTTP server of the tests' own on a free port of 127.0.0.1, served from a thread."""

from __future__ import annotations

import contextlib
import http.server
import ssl
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler],
            tls: ssl.SSLContext | None = None) -> Iterator[int]:
    """The handler served (over TLS with a server context) until the block ends; its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
