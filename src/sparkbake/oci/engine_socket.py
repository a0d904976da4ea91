"""An image's attributes from a local engine, over its Unix socket with the standard library
alone: what a build whose image is current asks, without the Docker SDK's start-up (a fifth
of a second, most of a no-op build's time)."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["inspect_image", "local_socket"]

DEFAULT_SOCKET = Path("/var/run/docker.sock")
TIMEOUT = 10.0  # seconds: an inspect answers at once, or the engine is not well
READ_SIZE = 65536
OK, NOT_FOUND = 200, 404


def local_socket(environ: Mapping[str, str]) -> Path | None:
    """The engine's socket as the Docker SDK finds it (DOCKER_HOST, else the default one);
    None for an engine reached otherwise (tcp://, ssh://), which only the SDK asks."""
    host = environ.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_SOCKET
    if not host.startswith("unix://"):
        return None
    return Path("/", host.removeprefix("unix://"))  # unix://var/run/x.sock is /var/run/x.sock


def inspect_image(path: Path, ref: str) -> dict[str, Any] | None:
    """The engine's attributes of the image ref (the API's image inspect, as
    `docker image inspect` prints them); None when it has no such image. OSError when no
    engine answers on path, or it answers something else."""
    status, body = _get(path, f"/images/{quote(ref, safe='/:@')}/json")
    if status == NOT_FOUND:
        return None
    if status != OK:
        raise OSError(f"the engine on {path} answered {status} for {ref}")
    try:
        attrs = json.loads(body)
    except ValueError:
        attrs = None
    if not isinstance(attrs, dict):
        raise OSError(f"the engine on {path} answered no image for {ref}")
    return attrs


def _get(path: Path, target: str) -> tuple[int, bytes]:
    """One GET as HTTP/1.0, which the engine answers with the whole body and then closes:
    no chunks and no keep-alive to handle, so no http.client to import."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(str(path))
        sock.sendall(f"GET {target} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode("ascii"))
        chunks = []
        while chunk := sock.recv(READ_SIZE):
            chunks.append(chunk)
    head, blank, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *headers = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    if not blank or not version.startswith("HTTP/1.") or not rest[:3].isdigit():
        raise OSError(f"the engine on {path} answered no HTTP ({status_line[:80]!r})")
    if any(h.lower().replace(" ", "") == "transfer-encoding:chunked" for h in headers):
        raise OSError(f"the engine on {path} answered HTTP/1.0 in chunks")
    return int(rest[:3]), body
