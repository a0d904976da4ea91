"""Base images: pinned registry images, or Debian made locally with debootstrap."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import docker.errors

from .cache import scratch_dir
from .config import Base, DebootstrapBase, ImageBase
from .docker_api import Client, image_exists
from .errors import ConfigError, EngineError
from .hashing import data_hash
from .plan import base_identity
from .proc import echo, require_tool, run, step
from .settings import HostSettings

__all__ = ["BaseImage", "ensure", "local_ref"]

MACHINE_TO_PLATFORM = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
PLATFORM_TO_DEBIAN = {"linux/amd64": "amd64", "linux/arm64": "arm64"}


@dataclass(frozen=True)
class BaseImage:
    name: str
    ref: str  # what FROM names
    digest: str  # registry digest, or the image id of a local import


def local_ref(base: DebootstrapBase, platform_name: str) -> str:
    """The engine's name of a debootstrap base made for a platform."""
    key = data_hash({**base_identity(base), "platform": platform_name})
    return f"sparkbake-base/{base.name}:{key[:12]}"


def ensure(client: Client, base: Base, platform_name: str, build_dir: Path,
           settings: HostSettings) -> BaseImage:
    """Make sure the base is in the engine; build (debootstrap) or pull it if not."""
    if isinstance(base, ImageBase):
        if not image_exists(client, base.image):
            _pull(client, base)
        return BaseImage(base.name, base.image, base.digest)
    ref = local_ref(base, platform_name)
    if not image_exists(client, ref):
        _debootstrap(client, base, ref, platform_name, build_dir, settings)
    return BaseImage(base.name, ref, str(client.images.get(ref).id))


def _pull(client: Client, base: ImageBase) -> None:
    name, digest = base.image.split("@", 1)
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    with step(f"pull {base.image}"):
        try:
            client.images.pull(repository, tag=digest)
        except docker.errors.APIError as exc:
            raise EngineError(
                f"base {base.name!r}: cannot pull {base.image}: {exc.explanation or exc}",
                "check registry access, or `docker load` the image and retry",
            ) from exc
        client.images.get(f"{repository}@{digest}").tag(name)


def _debootstrap(client: Client, base: DebootstrapBase, ref: str, platform_name: str,
                 build_dir: Path, settings: HostSettings) -> None:
    host = MACHINE_TO_PLATFORM.get(platform.machine(), platform.machine())
    if platform_name != host:
        raise ConfigError(
            f"base {base.name!r}: debootstrap makes {host} images, the tag wants {platform_name}",
            "use an image base for other platforms, or build on such a host",
        )
    mirror = base.mirror or settings.debian_mirror
    if mirror is None:
        raise ConfigError(f"base {base.name!r}: no Debian mirror configured on this host",
                          "add 'mirror:' to the debootstrap base in versions.yaml")
    debootstrap = require_tool("debootstrap", "debootstrap")
    if os.geteuid() != 0:
        raise EngineError("debootstrap needs root", "run as root, or use an image base")
    with step(f"debootstrap {base.suite} for base {base.name}"), \
            scratch_dir(build_dir / "bases", f"{base.name}.") as work:
        rootfs = work / "rootfs"
        cmd = [debootstrap, f"--variant={base.variant}"]
        if base.packages:
            cmd.append("--include=" + ",".join(base.packages))
        run([*cmd, base.suite, rootfs, mirror], error=EngineError,
            what=f"debootstrap of base {base.name!r}")
        # apt lists and caches differ run to run and are no use inside the image
        run(["tar", "-C", rootfs, "--exclude=./var/cache/apt/*", "--exclude=./var/lib/apt/lists/*",
             "--numeric-owner", "-cf", work / "rootfs.tar", "."], error=EngineError,
            what="packing the rootfs")
        repository, tag = ref.rsplit(":", 1)
        echo(f"import {ref}")
        client.api.import_image_from_file(str(work / "rootfs.tar"), repository=repository, tag=tag)
