"""The OCI distribution API with requests: an image's blobs and manifest into a registry by
digest, then its tags; and an image out of a registry into a layout (for verify).

The bytes go as they are in the layout, so the registry serves the digest the bake wrote.
A registry that asks for a login (WWW-Authenticate) gets the one Docker's client keeps, if
any (registry_login): as Basic auth, or to fetch a Bearer token from the realm
it names (an identity token as OAuth2's refresh token; else an anonymous token). How the
registry is reached (scheme, TLS trust) is registry_access's.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from sparkbake.config.settings import Settings
from sparkbake.console.display import Console
from sparkbake.errors import FatalError, PublishError
from sparkbake.oci import image_layout, transfer
from sparkbake.oci.registry_login import RegistryLogin

if TYPE_CHECKING:
    # imported where used at run time: requests takes ~0.1 s to import and most commands
    # never talk to a registry
    import requests

__all__ = ["HTTP_TIMEOUT", "MANIFEST_TYPES", "Remote", "Session", "is_stall", "stalled",
           "unreachable"]

# seconds to connect, then without a byte: a stalled registry (stopped, hung, a dead link) is
# noticed in seconds. The registry hashes an upload as it arrives, so even a large layer's
# answer comes soon after its last byte.
HTTP_TIMEOUT = (5, 10)
UPLOAD_TIMEOUT = (5, 60)
CHUNK = 1 << 20
RETRY_DELAYS = (1.0, 2.0, 4.0)  # seconds before each new upload of a blob
MANIFEST_TYPES = ", ".join((
    image_layout.INDEX_TYPE, image_layout.MANIFEST_TYPE,
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
PUSH_REMEDY = ("check that the registry takes pushes (not read-only) and, if it needs a "
               "login, `docker login` to it")


@dataclass(frozen=True)
class Remote:
    """A repository as the registry HTTP API sees it."""

    host: str  # as written in the image name, e.g. 127.0.0.1:5000
    path: str  # the repository inside the registry, e.g. sparkbake-demo
    base_url: str  # http(s)://host of the API
    verify: bool | str  # TLS trust for requests
    cert: tuple[str, str] | None = None  # client certificate and key (mutual TLS)


class Session:
    """Requests to one repository of a registry, with the token it asked for, if any."""

    def __init__(self, remote: Remote, settings: Settings, console: Console,
                 error: type[FatalError] = PublishError,
                 login: RegistryLogin | None = None) -> None:
        self.remote, self.error, self.login = remote, error, login
        self.settings, self.console = settings, console
        self.authorization = ""
        self.challenge = ""  # the Bearer challenge the token answers (realm, service, scope)

    def url(self, kind: str, reference: str) -> str:
        return f"{self.remote.base_url}/v2/{self.remote.path}/{kind}/{reference}"

    def request(self, method: str, url: str, body: Callable[[], Any] | None = None, *,
                headers: Mapping[str, str] | None = None,
                timeout: float | tuple[float, float] = HTTP_TIMEOUT,
                stream: bool = False) -> requests.Response:
        """One API call; on 401 a login or token is got and the call made again (twice at
        most: a token, then a fresh one if the registry says it expired). body makes the
        request body anew for each attempt (bytes, or a file it closes)."""
        call = functools.partial(self._send, method, url, body, headers or {}, timeout, stream)
        response = call()
        for _ in range(2):
            if response.status_code != 401 or not self._login(response):
                break
            response = call()
        return response

    def _send(self, method: str, url: str, body: Callable[[], Any] | None,
              headers: Mapping[str, str], timeout: float | tuple[float, float],
              stream: bool) -> requests.Response:
        import requests

        data = body() if body else None
        try:
            return requests.request(method, url, data=data, verify=self.remote.verify,
                                    cert=self.remote.cert, headers={**headers, **self._auth()},
                                    timeout=timeout, stream=stream)
        except (requests.RequestException, ValueError) as exc:
            raise unreachable(self.remote, exc, self.error, settings=self.settings) from exc
        finally:
            if data is not None and hasattr(data, "close"):
                data.close()

    def manifest_digest(self, reference: str) -> str | None:
        """The digest of the manifest the registry serves for reference; None if none."""
        url = self.url("manifests", reference)
        response = self.request("GET", url, headers={"Accept": MANIFEST_TYPES})
        if response.status_code == 404:
            return None
        self._check(response, "reading", f"the manifest of {reference}", 200)
        header = response.headers.get("Docker-Content-Digest")
        return header or "sha256:" + hashlib.sha256(response.content).hexdigest()

    def push(self, layout: image_layout.Layout, image: image_layout.Descriptor,
             tags: list[str]) -> tuple[str, transfer.Sent]:
        """The blobs of the image the registry lacks (HEAD first), then the manifest by its
        digest and each tag to set (none: the tags already name it, and no manifest goes);
        returns the digest the registry reports and which blobs were sent."""
        manifest = layout.read_manifest(image.digest)
        blobs = list(dict.fromkeys([manifest.config, *manifest.layers]))
        missing = {blob for blob in blobs if not self._has_blob(blob)}
        for blob in blobs:
            if blob in missing:
                self._push_blob(layout, blob)
        sent = transfer.Sent(tuple(b for b in blobs if b in missing),
                             tuple(b for b in blobs if b not in missing))
        if not tags:
            return image.digest, sent
        digest = self._put_manifest(layout.read(image.digest), image, image.digest)
        for tag in tags:
            self._put_manifest(layout.read(image.digest), image, tag)
        return digest, sent

    def set_tag(self, layout: image_layout.Layout, image: image_layout.Descriptor,
                tag: str) -> None:
        """Point tag at the image, whose blobs and manifest the registry has."""
        self._put_manifest(layout.read(image.digest), image, tag)

    def put_index(self, data: bytes, index: image_layout.Descriptor, reference: str) -> str:
        """An image index whose manifests the registry has, under reference (a tag or its
        digest); the digest the registry reports."""
        return self._put_manifest(data, index, reference)

    def pull(self, digest: str, layout: image_layout.Layout) -> image_layout.Descriptor:
        """The image manifest digest and its blobs, from the registry into layout."""
        response = self.request("GET", self.url("manifests", digest),
                                headers={"Accept": MANIFEST_TYPES})
        self._check(response, "reading", f"the manifest {digest}", 200)
        kind = response.headers.get("Content-Type", image_layout.MANIFEST_TYPE).split(";")[0]
        image = layout.add_bytes(response.content, kind)
        if image.digest != digest:
            raise self.error(f"{self.remote.host} served {image.digest} for {digest}",
                             "check the registry")
        manifest = layout.read_manifest(digest)
        for blob in [manifest.config, *manifest.layers]:
            if not layout.intact(blob.digest, blob.size):
                self._pull_blob(blob, layout)
        return image

    def _has_blob(self, blob: image_layout.Descriptor) -> bool:
        """HEAD on the blob: 200 when the registry has it (by digest, so the same bytes)."""
        return self.request("HEAD", self.url("blobs", blob.digest)).status_code == 200

    def _push_blob(self, layout: image_layout.Layout, blob: image_layout.Descriptor) -> None:
        """One blob, uploaded anew after a 5xx answer or a dropped connection (a few times,
        waiting longer each time); a registry that stops answering is not waited for."""
        import requests

        for delay in (*RETRY_DELAYS, None):
            try:
                response, step, expected = self._upload(layout, blob)
            except FatalError as exc:
                cause = exc.__cause__
                transient = isinstance(cause, requests.ConnectionError) and \
                    not isinstance(cause, requests.Timeout)
                if delay is None or not transient:
                    raise
                step, reason = f"the upload of {blob.digest[:19]}", "the connection dropped"
            else:
                if response.status_code < 500 or delay is None:
                    self._check(response, "pushing", step, expected)
                    return
                reason = f"HTTP {response.status_code}"
            self.console.notice(f"publish: {step} failed ({reason}); again in {delay:g} s")
            time.sleep(delay)

    def _upload(self, layout: image_layout.Layout,
                blob: image_layout.Descriptor) -> tuple[requests.Response, str, int]:
        """A monolithic upload: (the last answer, its step, the status it should have)."""
        start = self.request("POST", self.url("blobs", "uploads/"))
        if start.status_code != 202:
            return start, f"the start of the upload of {blob.digest[:19]}", 202
        location = urljoin(self.remote.base_url + "/", start.headers["Location"])
        sep = "&" if "?" in location else "?"
        path = layout.blob(blob.digest)
        done = self.request("PUT", f"{location}{sep}digest={blob.digest}",
                            body=lambda: path.open("rb"), timeout=UPLOAD_TIMEOUT,
                            headers={"Content-Type": "application/octet-stream",
                                     "Content-Length": str(blob.size)})
        return done, f"the upload of {blob.digest[:19]} ({blob.size} bytes)", 201

    def _put_manifest(self, data: bytes, image: image_layout.Descriptor, reference: str) -> str:
        response = self.request("PUT", self.url("manifests", reference), body=lambda: data,
                                headers={"Content-Type": image.media_type})
        self._check(response, "pushing", f"the manifest as {reference[:19]}", 201)
        return response.headers.get("Docker-Content-Digest") or image.digest

    def _pull_blob(self, blob: image_layout.Descriptor, layout: image_layout.Layout) -> None:
        import requests

        response = self.request("GET", self.url("blobs", blob.digest), stream=True,
                                timeout=UPLOAD_TIMEOUT)
        self._check(response, "reading", f"the blob {blob.digest[:19]}", 200)
        sha = hashlib.sha256()
        with tempfile.NamedTemporaryFile(dir=layout.root, prefix=".pull.") as out:
            try:
                for chunk in response.iter_content(CHUNK):
                    sha.update(chunk)
                    out.write(chunk)
            except requests.RequestException as exc:  # it stalled or broke off mid-blob
                raise unreachable(self.remote, exc, self.error, settings=self.settings) from exc
            out.flush()
            if "sha256:" + sha.hexdigest() != blob.digest:
                raise self.error(f"{self.remote.host} served other bytes for {blob.digest}",
                                 "check the registry")
            layout.add_file(Path(out.name), blob.digest, blob.media_type)

    def _check(self, response: requests.Response, action: str, step: str,
               expected: int) -> None:
        """Raise unless the response has the expected status; name the action and step."""
        if response.status_code == expected:
            return
        if response.status_code == 401:
            who = f"the login of {self.login.username or 'its token'}" if self.login \
                else "an anonymous request"
            raise self.error(f"{self.remote.host} refused {who} at {step} (HTTP 401)",
                             f"log in with `docker login {self.remote.host}` (sparkbake uses "
                             "the login Docker's client keeps, credential helpers too)")
        errors = re.findall(r'"message":\s*"([^"]*)"', response.text[:2000])
        detail = f": {'; '.join(errors)}" if errors else ""
        remedy = PUSH_REMEDY if action == "pushing" else "check the digest and the registry"
        raise self.error(f"{action} {self.remote.host}/{self.remote.path} failed at {step}: "
                         f"HTTP {response.status_code} {response.reason}{detail}", remedy)

    def _auth(self) -> dict[str, str]:
        return {"Authorization": self.authorization} if self.authorization else {}

    def _login(self, challenge: requests.Response) -> bool:
        """Answer a 401: Basic with the stored login, or a Bearer token from the realm it
        names (with the login, else anonymous). A token is fetched again when the challenge
        asks for another scope (a push after a pull) or says the token expired. False when
        there is nothing new to try."""
        header = challenge.headers.get("WWW-Authenticate", "")
        scheme = header.split(" ", 1)[0].lower()
        if scheme == "basic":
            if self.authorization or not self.login or self.login.identity_token:
                return False
            self.authorization = f"Basic {_basic(self.login)}"
            return True
        params = dict(re.findall(r'(\w+)="([^"]*)"', header))
        realm, expired = params.pop("realm", None), params.pop("error", "") == "invalid_token"
        asked = json.dumps(params, sort_keys=True)
        if scheme != "bearer" or realm is None or (asked == self.challenge and not expired):
            return False
        token = self._token(realm, params)
        self.authorization, self.challenge = (f"Bearer {token}", asked) if token else ("", "")
        return bool(token)

    def _token(self, realm: str, params: dict[str, str]) -> str:
        """A token from the realm: with an identity token by OAuth2 (POST, refresh_token),
        else a GET with the Basic login or none."""
        import requests

        login = self.login
        try:
            if login and login.identity_token:
                form = {**params, "grant_type": "refresh_token", "client_id": "sparkbake",
                        "refresh_token": login.secret}
                answer = requests.post(realm, data=form, verify=self.remote.verify,
                                       cert=self.remote.cert, timeout=HTTP_TIMEOUT)
            else:
                basic = {"Authorization": f"Basic {_basic(login)}"} if login else {}
                answer = requests.get(realm, params=params, headers=basic,
                                      verify=self.remote.verify, cert=self.remote.cert,
                                      timeout=HTTP_TIMEOUT)
            body = answer.json() if answer.status_code == 200 else {}
        except (requests.RequestException, ValueError) as exc:
            raise unreachable(self.remote, exc, self.error, settings=self.settings) from exc
        return str(body.get("token") or body.get("access_token") or "")


def _basic(login: RegistryLogin) -> str:
    return base64.b64encode(f"{login.username}:{login.secret}".encode()).decode()


def unreachable(remote: Remote, exc: Exception,
                error: type[FatalError] = PublishError, *, settings: Settings) -> FatalError:
    """The error for a registry that does not answer, with how to start a local one."""
    import requests

    if is_stall(exc):
        return stalled(remote, exc, error)
    if isinstance(exc, requests.exceptions.SSLError):
        reason = "TLS verification failed"
    else:
        errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))
        reason = errno.group(0) if errno else f"{type(exc).__name__}: {str(exc)[:160]}"
    if remote.base_url.startswith("http://"):
        port = remote.host.rsplit(":", 1)[1] if ":" in remote.host else "80"
        start = ("registry", "start") + (() if port == "5000" else ("--port", port))
        remedy = f"start it with `{settings.command(*start)}`"
    else:
        remedy = (f"check the address, the network and TLS trust (as Docker's: "
                  f"/etc/docker/certs.d/{remote.host}/ca.crt)")
    return error(f"registry {remote.host} does not answer ({reason})", remedy)


def is_stall(exc: Exception) -> bool:
    """The registry took the connection, or was being connected to, and then said nothing."""
    import requests

    return isinstance(exc, requests.exceptions.Timeout) or "timed out" in str(exc)


def stalled(remote: Remote, exc: Exception, error: type[FatalError]) -> FatalError:
    """The error for a registry that took a connection or a request and then went silent."""
    return error(f"registry {remote.host} stopped answering: nothing came back "
                 f"{_waited(exc)} (a stopped or hung registry, or a dead link)",
                 "check that the registry runs and is reachable, then run the command again: "
                 "a publish sends only what the registry lacks")


def _waited(exc: Exception) -> str:
    """How long the request waited, as requests' message says (`read timeout=10`)."""
    found = re.search(r"timeout=([0-9.]+)", str(exc))
    return f"within {found[1]} s" if found else "in time"
