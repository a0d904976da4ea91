"""How a registry is reached, as Docker reaches it: its address, its trust and its scheme.

Address: a repository's first component is its registry host if it has '.' or ':'; else it
is Docker Hub's (`library/` made whole). `--registry HOST[:PORT]` puts another host in.

Trust: Docker's `certs.d/<host[:port]>` folder (every `*.crt` a CA, added to the system's;
`*.cert` with its `*.key` the client's certificate for mutual TLS), the system CAs, or
REQUESTS_CA_BUNDLE / SSL_CERT_FILE (Settings.registry_ca_roots). pip's settings are for
package indexes, not registries.

Scheme: HTTPS first for every registry. A registry Docker calls insecure (loopback, or the
engine's `insecure-registries`) may then be spoken to over HTTPS without verification, or
over plain HTTP, as Docker falls back; and that is said.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.errors import FatalError, PublishError, UsageError
from sparkbake.files import atomic_write
from sparkbake.hashing import data_hash
from sparkbake.oci import distribution
from sparkbake.oci.distribution import Remote, Session
from sparkbake.oci.docker_engine import Client, insecure_registries
from sparkbake.oci.registry_login import registry_login

__all__ = ["DOCKER_DEFAULT", "PROBE_TIMEOUT", "Endpoint", "InsecureRegistries", "Trust",
           "certs_folder", "endpoint", "engine_insecure", "insecure", "locate", "open_session",
           "remote_for", "retarget", "split_repository", "trust"]

PROBE_TIMEOUT = 10  # seconds: a registry that does not answer /v2/ by then is down
LOOPBACK = ("127.0.0.0/8", "::1/128")  # Docker's insecure-registries before any is set
REGISTRY_ARG = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?")


@dataclass(frozen=True)
class Trust:
    """TLS trust for one registry host, as requests takes it."""

    verify: bool | str  # a CA bundle file, or True: requests' own roots
    cert: tuple[str, str] | None  # client certificate and key, for mutual TLS
    source: str  # where it came from, for messages


@dataclass(frozen=True)
class Endpoint:
    """Where the registry API answers and how: base URL, trust, and a note when Docker's
    fallback for an insecure registry was taken (None: verified HTTPS)."""

    base_url: str
    trust: Trust
    note: str | None


def certs_folder(host: str, settings: Settings) -> Path | None:
    """Docker's certs.d folder for the host (`host:port` as written), if there is one."""
    for root in settings.docker_certs_dirs:
        if (root / host).is_dir():
            return root / host
    return None


def trust(host: str, settings: Settings) -> Trust:
    """The host's CAs from certs.d on top of the system's (a bundle kept in the host's
    cache), its client certificate, else the roots the environment or the system gives."""
    roots = settings.registry_ca_roots
    folder = certs_folder(host, settings)
    if folder is None:
        return Trust(roots or True, None, roots or "the system's CAs")
    cas = sorted(folder.glob("*.crt"))
    verify: bool | str = roots or True
    if cas:
        verify = str(_bundle(cas, roots, settings.cache_dir))
    return Trust(verify, _client_pair(folder), str(folder))


def _bundle(cas: Iterable[Path], roots: str | None, cache_dir: Path) -> Path:
    """The system's CAs and the host's in one file, as requests needs one."""
    text = "".join(p.read_text() + "\n" for p in [*([Path(roots)] if roots else []), *cas])
    path = cache_dir / "registry-ca" / f"{data_hash(text)[:16]}.pem"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    return path


def _client_pair(folder: Path) -> tuple[str, str] | None:
    """certs.d's client certificate (`*.cert`) and its key (`*.key` of the same name)."""
    for cert in sorted(folder.glob("*.cert")):
        key = cert.with_suffix(".key")
        if not key.is_file():
            raise PublishError(f"{cert}: a client certificate without its key {key.name}",
                               "put the key beside it, or remove the certificate (as Docker "
                               "requires)")
        _check_pair(cert, key)
        return str(cert), str(key)
    return None


def _check_pair(cert: Path, key: Path) -> None:
    """The pair loads as TLS will load it: a damaged or mismatched file is named here, not
    mistaken for an answer of the registry."""
    import ssl

    try:
        ssl.create_default_context().load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as exc:
        reason = str(getattr(exc, "reason", None) or "no PEM certificate and key in them")
        raise PublishError(f"{cert} and {key.name}: not a client certificate and its key "
                           f"({reason.lower().replace('_', ' ')})",
                           "put the certificate and key the registry gave you there, or "
                           "remove both") from exc


@dataclass(frozen=True)
class InsecureRegistries:
    """The engine's `insecure-registries`: CIDRs (loopback always among them) and names."""

    cidrs: tuple[str, ...] = LOOPBACK
    names: tuple[str, ...] = ()

    def covers(self, host: str) -> bool:
        return insecure(host, self.cidrs, self.names)


DOCKER_DEFAULT = InsecureRegistries()  # an engine's list before any is set


def insecure(host: str, cidrs: Iterable[str] = LOOPBACK, names: Iterable[str] = ()) -> bool:
    """Would Docker call the registry insecure: named in the engine's insecure-registries,
    or resolving into one of its CIDRs (loopback by default)?"""
    if host in names:
        return True
    try:
        found = {info[4][0] for info in socket.getaddrinfo(_hostname(host), None)}
    except (OSError, UnicodeError):
        return False
    addresses = [ipaddress.ip_address(str(a).split("%")[0]) for a in found]
    networks = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    return any(a.version == n.version and a in n for a in addresses for n in networks)


def _hostname(host: str) -> str:
    """The name or address of `host[:port]` (`[v6]:port` too)."""
    if host.startswith("["):
        return host[1:host.index("]")]
    name, _, port = host.rpartition(":")
    return name if name and port.isdigit() and ":" not in name else host


def endpoint(host: str, api_host: str, settings: Settings, is_insecure: bool,
             error: type[FatalError] = PublishError) -> Endpoint:
    """HTTPS with the host's trust; for an insecure registry, as Docker falls back: HTTPS
    unverified, then plain HTTP. Anything else that fails is the error, naming the cause."""
    # requests and urllib3 are imported where used: they take ~0.1 s to import and most
    # commands never talk to a registry
    import requests
    import urllib3

    host_trust = trust(host, settings)
    https = f"https://{api_host}"
    try:
        return _registry(Endpoint(https, host_trust, None), host, _probe(https, host_trust),
                         error)
    except requests.exceptions.SSLError as exc:
        if not is_insecure:
            raise _tls_error(host, host_trust, exc, error) from exc
        first: requests.RequestException = exc
    except requests.RequestException as exc:
        if not is_insecure or distribution.is_stall(exc):  # a stalled one answers no scheme
            raise _down(host, https, exc, error, settings=settings) from exc
        first = exc
    # an unverified HTTPS registry is said once, as Docker's fallback (Endpoint.note), not
    # per call; every unverified request of a run goes to an endpoint found here
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    unverified = Trust(False, host_trust.cert, "none (insecure registry)")
    try:
        status = _probe(https, unverified)
        return _registry(Endpoint(https, unverified, f"{host}: HTTPS without verification (an "
                                  "insecure registry to Docker)"), host, status, error)
    except requests.RequestException:
        pass
    plain = f"http://{api_host}"
    try:
        status = _probe(plain, host_trust)
    except requests.RequestException as exc:
        raise _down(host, plain, first, error, settings=settings) from exc
    return _registry(Endpoint(plain, host_trust, f"{host}: plain HTTP (no HTTPS there; an "
                              "insecure registry to Docker)"), host, status, error)


def _probe(base_url: str, host_trust: Trust) -> int:
    """GET /v2/: the status of any HTTP answer (checked by the caller)."""
    import requests

    return requests.get(f"{base_url}/v2/", timeout=PROBE_TIMEOUT, verify=host_trust.verify,
                        cert=host_trust.cert, allow_redirects=False).status_code


def _registry(found: Endpoint, host: str, status: int, error: type[FatalError]) -> Endpoint:
    """The endpoint, if /v2/ answered as a registry does (200, or 401 asking for a login)."""
    if status not in (200, 401):
        raise error(f"{host} answers, but not as a registry (HTTP {status} on /v2/ at "
                    f"{found.base_url})", "check the --registry address or the tag's repository")
    return found


def _tls_error(host: str, host_trust: Trust, exc: Exception,
               error: type[FatalError]) -> FatalError:
    if "wrong version number" in str(exc).lower():  # a TLS hello answered in plain HTTP
        return error(f"registry {host} answers plain HTTP, and Docker speaks HTTP only to "
                     "insecure registries",
                     "give it TLS, or list it in the engine's insecure-registries "
                     "(/etc/docker/daemon.json) if plain HTTP is meant")
    reason = str(exc).split("(Caused by ")[-1].rstrip(")")[:200]
    return error(f"registry {host}: TLS verification failed with the trust of "
                 f"{host_trust.source} ({reason})",
                 f"give Docker's trust for it: its CA as /etc/docker/certs.d/{host}/ca.crt "
                 "(or REQUESTS_CA_BUNDLE), or list it in the engine's insecure-registries")


def _down(host: str, base_url: str, exc: Exception, error: type[FatalError], *,
          settings: Settings) -> FatalError:
    """Nothing answers: the reason, and how to start a local registry where one is meant."""
    return distribution.unreachable(distribution.Remote(host, "", base_url, True), exc, error,
                                    settings=settings)


def retarget(repository: str, registry: str | None) -> str:
    """Put `registry` (HOST[:PORT]) in place of the registry host of `repository`."""
    if registry is None:
        return repository
    if not REGISTRY_ARG.fullmatch(registry):
        raise UsageError(f"--registry {registry!r} is not HOST[:PORT]",
                         "e.g. --registry 127.0.0.1:5000")
    return f"{registry}/{split_repository(repository)[1]}"


def split_repository(repository: str) -> tuple[str | None, str]:
    """(registry host or None, path): the first component is a host if it has '.' or ':'."""
    first, sep, rest = repository.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, repository


def locate(repository: str) -> tuple[str, str, str]:
    """(host as written, the API's host, path): Docker Hub's names made whole."""
    host, path = split_repository(repository)
    host = host or "docker.io"
    if host == "docker.io":
        return host, "registry-1.docker.io", path if "/" in path else f"library/{path}"
    return host, host, path


def remote_for(repository: str, settings: Settings, error: type[FatalError] = PublishError,
               insecure: InsecureRegistries = DOCKER_DEFAULT, *, console: Console) -> Remote:
    """The repository's registry, reached as Docker reaches it (registry_access): HTTPS with
    Docker's certs.d trust first; its fallback for insecure registries, said."""
    host, api_host, path = locate(repository)
    found = endpoint(host, api_host, settings, insecure.covers(host), error)
    if found.note:
        console.notice(f"registry {found.note}")
    return Remote(host=host, path=path, base_url=found.base_url, verify=found.trust.verify,
                  cert=found.trust.cert)


def open_session(repository: str, settings: Settings, error: type[FatalError] = PublishError,
                 insecure: InsecureRegistries = DOCKER_DEFAULT, *, console: Console) -> Session:
    """A session with the repository's registry and the login Docker's client keeps for it."""
    remote = remote_for(repository, settings, error, insecure, console=console)
    return Session(remote, settings, console, error,
                   login=registry_login(remote.host, settings))


def engine_insecure(client: Client) -> InsecureRegistries:
    cidrs, names = insecure_registries(client)
    return InsecureRegistries(cidrs or DOCKER_DEFAULT.cidrs, names)
