"""The OCI distribution API with requests: an image's blobs and manifest into a registry by
digest, then its tags; and an image out of a registry into a layout (for verify).

The bytes go as they are in the layout, so the registry serves the digest the bake wrote.
A registry that asks for a login (WWW-Authenticate) gets the one `docker login` stored, if
any: as Basic auth, or to fetch a Bearer token from the realm it names (else an anonymous
token).
"""

from __future__ import annotations

import functools
import hashlib
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests

from sparkbake.console.invocation import command
from sparkbake.errors import FatalError, PublishError
from sparkbake.oci import ocilayout, transfer

__all__ = ["MANIFEST_TYPES", "Remote", "Session", "unreachable"]

HTTP_TIMEOUT = 30
UPLOAD_TIMEOUT = (30, 600)  # connect, read: a large layer takes a while to be checked
CHUNK = 1 << 20
MANIFEST_TYPES = ", ".join((
    ocilayout.INDEX_TYPE, ocilayout.MANIFEST_TYPE,
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
PUSH_REMEDY = ("check that the registry takes pushes (not read-only) and, if it needs a "
               "login, `docker login` to it (sparkbake reads ~/.docker/config.json's auths)")


@dataclass(frozen=True)
class Remote:
    """A repository as the registry HTTP API sees it."""

    host: str  # as written in the image name, e.g. 127.0.0.1:5000
    path: str  # the repository inside the registry, e.g. sparkbake-demo
    base_url: str  # http(s)://host of the API
    verify: bool | str  # TLS trust for requests


class Session:
    """Requests to one repository of a registry, with the token it asked for, if any."""

    def __init__(self, remote: Remote, error: type[FatalError] = PublishError,
                 login: str | None = None) -> None:
        self.remote, self.error, self.login = remote, error, login  # login: base64 user:pass
        self.authorization = ""

    def url(self, kind: str, reference: str) -> str:
        return f"{self.remote.base_url}/v2/{self.remote.path}/{kind}/{reference}"

    def request(self, method: str, url: str, body: Callable[[], Any] | None = None, *,
                headers: Mapping[str, str] | None = None,
                timeout: float | tuple[float, float] = HTTP_TIMEOUT,
                stream: bool = False) -> requests.Response:
        """One API call; on 401 an anonymous token is fetched and the call made again.
        body makes the request body anew for each attempt (bytes, or a file it closes)."""
        call = functools.partial(self._send, method, url, body, headers or {}, timeout, stream)
        response = call()
        if response.status_code == 401 and self._login(response):
            response = call()
        return response

    def _send(self, method: str, url: str, body: Callable[[], Any] | None,
              headers: Mapping[str, str], timeout: float | tuple[float, float],
              stream: bool) -> requests.Response:
        data = body() if body else None
        try:
            return requests.request(method, url, data=data, verify=self.remote.verify,
                                    headers={**headers, **self._auth()}, timeout=timeout,
                                    stream=stream)
        except (requests.RequestException, ValueError) as exc:
            raise unreachable(self.remote, exc, self.error) from exc
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

    def push(self, layout: ocilayout.Layout, image: ocilayout.Descriptor,
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

    def pull(self, digest: str, layout: ocilayout.Layout) -> ocilayout.Descriptor:
        """The image manifest digest and its blobs, from the registry into layout."""
        response = self.request("GET", self.url("manifests", digest),
                                headers={"Accept": MANIFEST_TYPES})
        self._check(response, "reading", f"the manifest {digest}", 200)
        kind = response.headers.get("Content-Type", ocilayout.MANIFEST_TYPE).split(";")[0]
        image = layout.add_bytes(response.content, kind)
        if image.digest != digest:
            raise self.error(f"{self.remote.host} served {image.digest} for {digest}",
                             "check the registry")
        manifest = layout.read_manifest(digest)
        for blob in [manifest.config, *manifest.layers]:
            if not layout.intact(blob.digest, blob.size):
                self._pull_blob(blob, layout)
        return image

    def _has_blob(self, blob: ocilayout.Descriptor) -> bool:
        """HEAD on the blob: 200 when the registry has it (by digest, so the same bytes)."""
        return self.request("HEAD", self.url("blobs", blob.digest)).status_code == 200

    def _push_blob(self, layout: ocilayout.Layout, blob: ocilayout.Descriptor) -> None:
        start = self.request("POST", self.url("blobs", "uploads/"))
        self._check(start, "pushing", f"the start of the upload of {blob.digest[:19]}", 202)
        location = urljoin(self.remote.base_url + "/", start.headers["Location"])
        sep = "&" if "?" in location else "?"
        path = layout.blob(blob.digest)
        done = self.request("PUT", f"{location}{sep}digest={blob.digest}",
                            body=lambda: path.open("rb"), timeout=UPLOAD_TIMEOUT,
                            headers={"Content-Type": "application/octet-stream",
                                     "Content-Length": str(blob.size)})
        self._check(done, "pushing", f"the upload of {blob.digest[:19]} ({blob.size} bytes)",
                    201)

    def _put_manifest(self, data: bytes, image: ocilayout.Descriptor, reference: str) -> str:
        response = self.request("PUT", self.url("manifests", reference), body=lambda: data,
                                headers={"Content-Type": image.media_type})
        self._check(response, "pushing", f"the manifest as {reference[:19]}", 201)
        return response.headers.get("Docker-Content-Digest") or image.digest

    def _pull_blob(self, blob: ocilayout.Descriptor, layout: ocilayout.Layout) -> None:
        response = self.request("GET", self.url("blobs", blob.digest), stream=True,
                                timeout=UPLOAD_TIMEOUT)
        self._check(response, "reading", f"the blob {blob.digest[:19]}", 200)
        sha = hashlib.sha256()
        with tempfile.NamedTemporaryFile(dir=layout.root, prefix=".pull.") as out:
            for chunk in response.iter_content(CHUNK):
                sha.update(chunk)
                out.write(chunk)
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
        errors = re.findall(r'"message":\s*"([^"]*)"', response.text[:2000])
        detail = f": {'; '.join(errors)}" if errors else ""
        remedy = PUSH_REMEDY if action == "pushing" else "check the digest and the registry"
        raise self.error(f"{action} {self.remote.host}/{self.remote.path} failed at {step}: "
                         f"HTTP {response.status_code} {response.reason}{detail}", remedy)

    def _auth(self) -> dict[str, str]:
        return {"Authorization": self.authorization} if self.authorization else {}

    def _login(self, challenge: requests.Response) -> bool:
        """Answer a 401: Basic with the stored login, or a Bearer token from the realm it
        names (with the login, else anonymous). False when there is nothing new to try."""
        header = challenge.headers.get("WWW-Authenticate", "")
        scheme = header.split(" ", 1)[0].lower()
        if self.authorization:
            return False
        if scheme == "basic" and self.login:
            self.authorization = f"Basic {self.login}"
            return True
        params = dict(re.findall(r'(\w+)="([^"]*)"', header))
        realm = params.pop("realm", None)
        if scheme != "bearer" or realm is None:
            return False
        basic = {"Authorization": f"Basic {self.login}"} if self.login else {}
        try:
            answer = requests.get(realm, params=params, headers=basic, timeout=HTTP_TIMEOUT,
                                  verify=self.remote.verify)
            body = answer.json() if answer.status_code == 200 else {}
        except (requests.RequestException, ValueError) as exc:
            raise unreachable(self.remote, exc, self.error) from exc
        token = str(body.get("token") or body.get("access_token") or "")
        self.authorization = f"Bearer {token}" if token else ""
        return bool(token)


def unreachable(remote: Remote, exc: Exception,
                error: type[FatalError] = PublishError) -> FatalError:
    """The error for a registry that does not answer, with how to start a local one."""
    if isinstance(exc, requests.exceptions.SSLError):
        reason = "TLS verification failed"
    else:
        errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))
        reason = errno.group(0) if errno else f"{type(exc).__name__}: {str(exc)[:160]}"
    if remote.base_url.startswith("http://"):
        port = remote.host.rsplit(":", 1)[1] if ":" in remote.host else "80"
        start = ("registry", "start") + (() if port == "5000" else ("--port", port))
        remedy = f"start it with `{command(*start)}`"
    else:
        remedy = "check the address, the network and TLS trust (PIP_CERT / REQUESTS_CA_BUNDLE)"
    return error(f"registry {remote.host} does not answer ({reason})", remedy)
