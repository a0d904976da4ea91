"""Base images: pinned registry images, or Debian made locally with debootstrap."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from sparkbake import resources
from sparkbake.config.platforms import PLATFORMS, Platform
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Base, DebootstrapBase, ImageBase
from sparkbake.console.display import Console
from sparkbake.console.tools import require_tool, run, step
from sparkbake.errors import BakeError, ConfigError, EngineError
from sparkbake.files import atomic_write, scratch_dir
from sparkbake.hashing import data_hash
from sparkbake.oci.docker_engine import (
    Client,
    build_image,
    image_attrs,
    image_exists,
    load_image,
    run_container,
    tag_same_key,
)
from sparkbake.planning import base_identity

__all__ = ["BaseImage", "ensure", "local_ref", "with_python"]

PYTHON_TEMPLATE = "runtime-python.Dockerfile.j2"  # a base without python3 -m venv gets it

IMPORT_FORMAT = 2  # raise when _import writes another image for the same rootfs


@dataclass(frozen=True)
class BaseImage:
    name: str
    ref: str  # what FROM names
    digest: str  # registry digest, or the image id of a local import


def local_ref(base: DebootstrapBase, platform: Platform) -> str:
    """The engine's name of a debootstrap base made for a platform: versions.yaml's name,
    and a key of what makes it (the same spec under another name has the same key)."""
    key = data_hash({**base_identity(base), "platform": str(platform), "import": IMPORT_FORMAT})
    return f"sparkbake-base/{base.name}:{key[:12]}"


def ensure(client: Client, base: Base, platform: Platform, build_dir: Path,
           settings: Settings, *, console: Console) -> BaseImage:
    """Make sure the base is in the engine for the platform; build (debootstrap) or pull it
    if not. Containers of it run emulated where the engine's host is another platform."""
    from sparkbake.oci.emulation import require_engine_runs  # a no-op build needs none

    require_engine_runs(client, platform)
    if isinstance(base, ImageBase):
        if not image_exists(client, base.image):
            _pull(client, base, platform, console=console)
        _require_platform(client, base.image, platform)
        return BaseImage(base.name, base.image, base.digest)
    ref = local_ref(base, platform)
    if not image_exists(client, ref):
        same = tag_same_key(client, ref)
        if same is None:
            _debootstrap(client, base, ref, platform, build_dir, settings, console=console)
        else:
            console.detail(f"base {ref}: the image of {same}, the same spec")
    return BaseImage(base.name, ref, str(client.images.get(ref).id))


def _require_platform(client: Client, ref: str, platform: Platform) -> None:
    """The engine's image is the platform's (a multi-arch digest pulled for another one is
    not)."""
    attrs = image_attrs(client, ref)
    found = f"{attrs.get('Os', 'linux')}/{attrs.get('Architecture', '?')}"
    if found != str(platform):
        raise EngineError(f"base {ref} in the engine is {found}, the tag wants {platform}",
                          f"remove it (docker rmi {ref}) and build again to pull "
                          f"{platform}")


def _pull(client: Client, base: ImageBase, platform: Platform, *, console: Console) -> None:
    import docker.errors  # here: the Docker SDK is slow to import and most commands pull nothing

    name, digest = base.image.split("@", 1)
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    with step(console, f"pull {base.image} ({platform})"):
        try:
            client.images.pull(repository, tag=digest, platform=str(platform))
        except docker.errors.APIError as exc:
            raise EngineError(
                f"base {base.name!r}: cannot pull {base.image}: {exc.explanation or exc}",
                "check registry access, or `docker load` the image and retry",
            ) from exc
        client.images.get(f"{repository}@{digest}").tag(name)


def _debootstrap(client: Client, base: DebootstrapBase, ref: str, platform: Platform,
                 build_dir: Path, settings: Settings, *, console: Console) -> None:
    if platform.debian is None:
        raise ConfigError(f"base {base.name!r}: debootstrap has no architecture for "
                          f"{platform}", f"use one of {', '.join(map(str, PLATFORMS))}")
    from sparkbake.oci.emulation import require_binfmt

    require_binfmt(platform)  # the second stage runs the platform's programs
    mirror = base.mirror or settings.debian_mirror
    if mirror is None:
        raise ConfigError(f"base {base.name!r}: no Debian mirror configured on this host",
                          "add 'mirror:' to the debootstrap base in versions.yaml")
    debootstrap = require_tool("debootstrap", "debootstrap")
    if os.geteuid() != 0:
        raise EngineError("debootstrap needs root", "run as root, or use an image base")
    with step(console, f"debootstrap {base.suite} ({platform}) for base {base.name}"), \
            scratch_dir(build_dir / "bases", f"{base.name}.") as work:
        rootfs = work / "rootfs"
        cmd = [debootstrap, f"--variant={base.variant}", f"--arch={platform.debian}"]
        if base.packages:
            cmd.append("--include=" + ",".join(base.packages))
        run(console, [*cmd, base.suite, rootfs, mirror], error=EngineError,
            what=f"debootstrap of base {base.name!r}")
        # apt lists and caches differ run to run and are no use inside the image
        run(console, ["tar", "-C", rootfs, "--exclude=./var/cache/apt/*",
                      "--exclude=./var/lib/apt/lists/*",
             "--numeric-owner", "-cf", work / "rootfs.tar", "."], error=EngineError,
            what="packing the rootfs")
        console.detail(f"import {ref}")
        _import(client, work / "rootfs.tar", ref, platform, work / "image.tar")


def _import(client: Client, rootfs: Path, ref: str, platform: Platform, archive: Path) -> None:
    """docker load a one-layer image of rootfs whose config names its platform (`docker
    import --platform` of Docker 20.10 records the engine's architecture instead)."""
    digest = hashlib.sha256()
    with rootfs.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    config = json.dumps({
        "architecture": platform.architecture, "os": platform.os, "config": {},
        "created": created,
        "history": [{"created": created, "created_by": f"sparkbake: debootstrap {ref}"}],
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest.hexdigest()}"]},
    }, sort_keys=True).encode()
    manifest = json.dumps([{"Config": "config.json", "RepoTags": [ref],
                            "Layers": ["rootfs/layer.tar"]}]).encode()
    with tarfile.open(archive, "w") as out:
        out.add(rootfs, "rootfs/layer.tar")
        for name, data in (("config.json", config), ("manifest.json", manifest)):
            entry = tarfile.TarInfo(name)
            entry.size = len(data)
            out.addfile(entry, io.BytesIO(data))
    load_image(client, archive, error=EngineError)


def with_python(client: Client, base: BaseImage, scratch: Path, probes: Path, *,
                console: Console) -> BaseImage:
    """The base itself if it has python3 -m venv; else the base + Python from its package
    manager, built once per engine (the one layer not made reproducibly: see README)."""
    if _has_venv(client, base, probes):
        return base
    key = data_hash({"base": base.digest, "template": resources.digest(PYTHON_TEMPLATE)})
    ref = f"sparkbake-runtime/{base.name}:{key[:12]}"
    if not image_exists(client, ref):
        console.detail(f"bake: {base.ref} has no python3 -m venv; adding Python from its packages")
        with scratch_dir(scratch, "runtime-python.") as context:
            (context / "Dockerfile").write_text(resources.render(PYTHON_TEMPLATE,
                                                                 base_image=base.ref))
            build_image(client, console, context, ref, error=BakeError)
    return BaseImage(base.name, ref, str(client.images.get(ref).id))


def _has_venv(client: Client, base: BaseImage, probes: Path) -> bool:
    """Whether the base runs python3 -m venv: asked of a container once per image id (the
    answer kept under probes, the host's cache, as `yes` or `no`), since starting one takes
    seconds of every bake."""
    image_id = str(client.images.get(base.ref).id)
    kept = probes / image_id.replace(":", "-")
    answer = kept.read_text().strip() if kept.is_file() else None
    if answer in ("yes", "no"):
        return answer == "yes"
    probe = run_container(client, base.ref, ["python3 -m venv --help >/dev/null 2>&1"],
                          entrypoint=["/bin/sh", "-c"], network=False)
    with contextlib.suppress(OSError):  # a cache that cannot be written keeps nothing
        atomic_write(kept, "yes\n" if probe.exit_code == 0 else "no\n")
    return probe.exit_code == 0
