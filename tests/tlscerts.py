"""A private CA and a server certificate made with openssl, and a /v2/ answering HTTP(S)
server on 127.0.0.1 for tests of how registries are reached."""

from __future__ import annotations

import contextlib
import http.server
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.localserver import serving


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA's certificate
    cert: Path  # the server's, signed by the CA
    key: Path


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def make_certs(folder: Path, names: tuple[str, ...] = ("localhost",),
               addresses: tuple[str, ...] = ("127.0.0.1",)) -> Certs:
    """A CA, and a server certificate for the names and addresses it signs."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.crt", folder / "ca.key"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=sparkbake test CA", "-keyout", ca_key, "-out", ca)
    key, request, cert = folder / "server.key", folder / "server.csr", folder / "server.crt"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={names[0]}",
            "-keyout", key, "-out", request)
    alt = ",".join([*(f"DNS:{n}" for n in names), *(f"IP:{a}" for a in addresses)])
    (folder / "ext.cnf").write_text(f"subjectAltName={alt}\n")
    openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-days", "2", "-extfile", folder / "ext.cnf", "-out", cert)
    return Certs(ca, cert, key)


class _V2(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v2/" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def v2_server(certs: Certs | None) -> contextlib.AbstractContextManager[int]:
    """A server answering GET /v2/ on 127.0.0.1 (TLS with certs, else plain); its port."""
    if certs is None:
        return serving(_V2)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.cert, certs.key)
    return serving(_V2, context)
