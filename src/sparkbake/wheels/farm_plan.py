"""farm_plan: the compile farm's files and commands as data (docs/how-to/compile-farm.md).

The farm is sccache-dist: one scheduler beside the build and one server per node, every
address on loopback (a server's heartbeat must come from its `public_addr`, and the offline
builder can only dial its own loopback). The tokens are made here, per farm: the scheduler
signs each server's token (JWT, HS256) and the client shows a shared token. Nothing here
starts a process; farm_local does, and the remote path is the ssh commands below.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import shlex
from dataclasses import dataclass

__all__ = ["FarmTokens", "Server", "client_config", "make_tokens", "remote_commands",
           "scheduler_config", "server_config", "server_token", "slots_for", "split_cores",
           "systemd_unit"]

REMOTE_DIR = "/etc/sparkbake-farm"  # on a node: its server's config, 0700
REMOTE_UNIT = "sparkbake-farm-server.service"
REMOTE_BINARY = "/usr/local/bin/sccache-dist"


@dataclass(frozen=True)
class FarmTokens:
    """A farm's secrets: the key that signs server tokens and the client's token. Whoever
    holds the client token runs code as root in every server's sandbox: a deploy key."""

    jwt_key: str  # base64url of 32 random bytes, as `sccache-dist auth generate-jwt-hs256-key`
    client: str


@dataclass(frozen=True)
class Server:
    """One sccache-dist server: where it listens (loopback) and the CPUs it may use."""

    name: str  # "local-1", or the node's ssh host
    port: int
    cores: tuple[int, ...]  # its CPU affinity: sccache takes one slot per CPU it may use
    memory_gib: float  # its share of the node's memory (the slots follow it)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def slots(self) -> int:
        return len(self.cores)


def make_tokens() -> FarmTokens:
    return FarmTokens(_b64(secrets.token_bytes(32)), secrets.token_urlsafe(32))


def server_token(jwt_key: str, address: str) -> str:
    """The scheduler's token for the server at address: what `sccache-dist auth
    generate-jwt-hs256-server-token` writes (same header, claims and signature)."""
    header = _b64(json.dumps({"typ": "JWT", "alg": "HS256"}, separators=(",", ":")).encode())
    claims = _b64(json.dumps({"exp": 0, "server_id": address}, separators=(",", ":")).encode())
    key = base64.urlsafe_b64decode(jwt_key + "=" * (-len(jwt_key) % 4))
    signature = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{_b64(signature)}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def slots_for(cpus: int, memory_gib: float, gib_per_job: float) -> int:
    """A server's slots as the local job count takes them: one per gib_per_job of its
    memory, at most one per CPU, at least one."""
    return max(1, min(cpus, int(memory_gib // gib_per_job)))


def split_cores(cores: tuple[int, ...], count: int) -> list[tuple[int, ...]]:
    """This machine's CPUs shared among count servers, in turn; with fewer CPUs than
    servers, servers share them."""
    return [tuple(cores[i::count]) or (cores[i % len(cores)],) for i in range(count)]


def scheduler_config(port: int, tokens: FarmTokens) -> str:
    return _toml({"public_addr": f"127.0.0.1:{port}"},
                 ("client_auth", {"type": "token", "token": tokens.client}),
                 ("server_auth", {"type": "jwt_hs256", "secret_key": tokens.jwt_key}))


def server_config(server: Server, scheduler_port: int, tokens: FarmTokens, folder: str,
                  bwrap: str = "/usr/bin/bwrap") -> str:
    """A server's config: the overlay builder (root and bubblewrap), its token, loopback."""
    return _toml({"cache_dir": f"{folder}/toolchains", "public_addr": server.address,
                  "scheduler_url": f"http://127.0.0.1:{scheduler_port}"},
                 ("builder", {"type": "overlay", "build_dir": f"{folder}/build",
                              "bwrap_path": bwrap}),
                 ("scheduler_auth", {"type": "jwt_token",
                                     "token": server_token(tokens.jwt_key, server.address)}))


def client_config(scheduler_port: int, tokens: FarmTokens) -> str:
    """The builder's sccache client: `toolchains = []` (sccache packages each compiler)."""
    return _toml({}, ("dist", {"scheduler_url": f"http://127.0.0.1:{scheduler_port}",
                               "toolchains": []}),
                 ("dist.auth", {"type": "token", "token": tokens.client}))


def _toml(top: dict[str, object], *tables: tuple[str, dict[str, object]]) -> str:
    """TOML of strings and empty lists (all these configs hold); JSON strings are TOML's."""
    def lines(values: dict[str, object]) -> list[str]:
        return [f"{key} = {json.dumps(value)}" for key, value in values.items()]

    parts = lines(top)
    for name, values in tables:
        parts += ["", f"[{name}]", *lines(values)]
    return "\n".join(parts).lstrip("\n") + "\n"


def systemd_unit(server: Server) -> str:
    """The node's service: root (bubblewrap needs it), its CPUs and memory bounded so that
    sccache's slots follow the node's memory as the local job count does."""
    cores = ",".join(str(core) for core in server.cores)
    return "\n".join([
        "[Unit]", "Description=sparkbake compile farm: sccache-dist server",
        "After=network.target", "", "[Service]", "User=root",
        f"ExecStart={REMOTE_BINARY} server --config {REMOTE_DIR}/server.toml",
        f"CPUAffinity={cores}", f"MemoryMax={int(server.memory_gib * 1024)}M",
        "Environment=SCCACHE_LOG=info", "Restart=no", "", "[Install]",
        "WantedBy=multi-user.target", ""])


def remote_commands(host: str, server: Server, scheduler_port: int) -> list[list[str]]:
    """Install and start a node's server over ssh, and the head's one tunnel to it: the
    server's port forwarded to the head's loopback (-L) and the scheduler's to the node's
    (-R), so that both sides see 127.0.0.1. The config and unit reach the node on stdin
    (ssh ... 'cat > FILE'), never on a command line."""
    quoted = shlex.quote
    return [
        ["ssh", host, f"install -d -m 0700 {REMOTE_DIR} && umask 077 && "
                      f"cat > {REMOTE_DIR}/server.toml"],
        ["ssh", host, f"cat > /etc/systemd/system/{REMOTE_UNIT}"],
        ["ssh", host, f"systemctl daemon-reload && systemctl restart {quoted(REMOTE_UNIT)}"],
        ["ssh", "-N", "-o", "ExitOnForwardFailure=yes",
         "-L", f"127.0.0.1:{server.port}:127.0.0.1:{server.port}",
         "-R", f"127.0.0.1:{scheduler_port}:127.0.0.1:{scheduler_port}", host],
    ]
