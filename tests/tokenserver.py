"""A registry token server on 127.0.0.1 for tests, as Docker Hub and GHCR run one: GET
/token?service=..&scope=.. with a Basic login answers a JWT (RS256, its certificate in the
x5c header) that docker-registry's `auth: token:` accepts. It can hand out tokens that are
already expired, and records every scope asked for."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.localserver import serving

ISSUER = "sparkbake-test-issuer"
SERVICE = "sparkbake-test-registry"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Issued:
    """The token server's state: its login, tokens to hand out expired, and what it saw."""

    user: str
    password: str
    cert: Path  # the signing certificate (PEM) and its key
    key: Path
    expired_first: int = 0  # this many tokens go out already expired
    scopes: list[str] = field(default_factory=list)

    def token(self, scope: str) -> str:
        certificate = x509.load_pem_x509_certificate(self.cert.read_bytes())
        key = serialization.load_pem_private_key(self.key.read_bytes(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey)
        now = int(time.time())
        expired = self.expired_first > 0
        self.expired_first -= 1
        _, name, actions = scope.split(":", 2)
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(
            certificate.public_bytes(serialization.Encoding.DER)).decode()]}
        claims = {"iss": ISSUER, "sub": self.user, "aud": SERVICE, "iat": now, "nbf": now - 5,
                  "exp": now - 300 if expired else now + 300, "jti": uuid.uuid4().hex,
                  "access": [{"type": "repository", "name": name,
                              "actions": actions.split(",")}]}
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64(signature)}"


def _handler(issued: Issued) -> type[http.server.BaseHTTPRequestHandler]:
    class Tokens(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlparse(self.path).query)
            login = base64.b64encode(f"{issued.user}:{issued.password}".encode()).decode()
            if self.headers.get("Authorization") != f"Basic {login}":
                self._answer(401, b'{"details":"wrong login"}')
                return
            scope = query.get("scope", [""])[0]
            issued.scopes.append(scope)
            token = issued.token(scope)
            self._answer(200, json.dumps({"token": token, "access_token": token}).encode())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Tokens


def token_server(issued: Issued) -> contextlib.AbstractContextManager[int]:
    """The token server on a free port of 127.0.0.1; its port."""
    return serving(_handler(issued))
