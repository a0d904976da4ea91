"""The docker SDK's client as sparkbake calls it: protocols over exactly the methods and
attributes the code uses, so that each engine call is checked (the SDK ships no type
information). docker.DockerClient satisfies them; a unit test's fake gives what its code
asks of one.

What the engine answers in JSON (an image's or container's attrs, info, a stream's chunks) is
dict[str, Any]: read where it is used."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, TypedDict, overload

if TYPE_CHECKING:
    import requests

__all__ = ["ApiClient", "Client", "Container", "ContainerCollection", "ContainerExit", "Image",
           "ImageCollection", "Network", "NetworkCollection"]


class ContainerExit(TypedDict):
    """What Container.wait answers."""

    StatusCode: int


class Image(Protocol):
    @property
    def id(self) -> str: ...  # sha256:<hex> of its config

    @property
    def attrs(self) -> dict[str, Any]: ...

    @property
    def labels(self) -> dict[str, str]: ...

    @property
    def tags(self) -> builtins.list[str]: ...  # repository:tag names

    def tag(self, repository: str, tag: str | None = None) -> bool: ...

    def save(self, named: bool = False) -> Iterator[bytes]: ...


class ImageCollection(Protocol):
    def get(self, name: str) -> Image: ...

    def list(self, name: str | None = None, all: bool = False,
             filters: dict[str, str] | None = None) -> builtins.list[Image]: ...

    def remove(self, image: str, force: bool = False, noprune: bool = False) -> None: ...

    def pull(self, repository: str, tag: str | None = None,
             platform: str | None = None) -> Image: ...


class Container(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def short_id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def status(self) -> str: ...  # as of the last reload

    @property
    def attrs(self) -> dict[str, Any]: ...

    @property
    def labels(self) -> dict[str, str]: ...

    @property
    def client(self) -> Client: ...

    def start(self) -> None: ...

    def reload(self) -> None: ...

    def wait(self) -> ContainerExit: ...

    def remove(self, force: bool = False) -> None: ...

    def put_archive(self, path: str, data: bytes) -> bool: ...

    def get_archive(self, path: str) -> tuple[Iterator[bytes], dict[str, Any]]: ...

    def export(self) -> Iterator[bytes]: ...  # the root file system, as a tar stream

    @overload
    def logs(self, *, stream: Literal[True], follow: bool = False) -> Iterator[bytes]: ...

    @overload
    def logs(self, *, tail: int | Literal["all"] = "all") -> bytes: ...


class ContainerCollection(Protocol):
    def create(self, image: str, command: builtins.list[str] | None = None,
               **options: object) -> Container: ...

    @overload
    def run(self, image: str, command: builtins.list[str] | None = None, *,
            detach: Literal[True], **options: object) -> Container: ...

    @overload
    def run(self, image: str, command: builtins.list[str] | None = None, *,
            detach: Literal[False] = False, **options: object) -> bytes: ...  # its output

    def list(self, all: bool = False,
             filters: dict[str, str] | None = None) -> builtins.list[Container]: ...


class Network(Protocol):
    def connect(self, container: Container, aliases: builtins.list[str] | None = None
                ) -> None: ...

    def remove(self) -> None: ...


class NetworkCollection(Protocol):
    def create(self, name: str, driver: str | None = None, internal: bool = False
               ) -> Network: ...


class ApiClient(Protocol):
    """The low-level client (DockerClient.api): the calls whose streams sparkbake reads."""

    @property
    def base_url(self) -> str: ...

    @property
    def api_version(self) -> str: ...

    def get(self, url: str, *, params: dict[str, str], stream: bool, timeout: int,
            headers: dict[str, str]) -> requests.Response: ...

    def build(self, *, path: str, tag: str, rm: bool, forcerm: bool, decode: Literal[True],
              buildargs: dict[str, str]) -> Iterator[dict[str, Any]]: ...

    def load_image(self, data: IO[bytes] | Iterable[bytes],
                   quiet: bool = False) -> Iterator[dict[str, Any] | bytes]: ...

    def pull(self, repository: str, *, stream: Literal[True], decode: Literal[True],
             auth_config: dict[str, str] | None = None) -> Iterator[dict[str, Any]]: ...

    def tag(self, image: str, repository: str, tag: str | None = None,
            force: bool = False) -> bool: ...

    def get_image(self, image: str) -> Iterator[bytes]: ...


class Client(Protocol):
    """docker.DockerClient, as sparkbake uses it."""

    @property
    def images(self) -> ImageCollection: ...

    @property
    def containers(self) -> ContainerCollection: ...

    @property
    def networks(self) -> NetworkCollection: ...

    @property
    def api(self) -> ApiClient: ...

    def info(self) -> dict[str, Any]: ...

    def ping(self) -> bool: ...

    def close(self) -> None: ...
