"""Multi-platform tags: `platforms: {linux/arm64: "12.1a", linux/amd64: "12.0a"}`.

Such a tag NAME becomes one ordinary tag per platform, NAME-<architecture> (NAME-arm64,
NAME-amd64), each of one platform and its CUDA arch, built, smoked and recorded on its own;
NAME is the release of them all, which `publish` pushes as one OCI image index. `platforms`
is inherited through `extends` like any key, and takes the place of `platform`/`cuda_arch`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from sparkbake.config.model import CUDA_ARCH, Tag
from sparkbake.config.yamlsource import LocatedDict, Where
from sparkbake.errors import ConfigError

__all__ = ["PLATFORM", "expand", "platform_name", "read"]

PLATFORM = re.compile(r"linux/[a-z0-9]+")


def read(where: Where, origin: dict[str, LocatedDict], merged: dict[str, Any],
         name: str) -> tuple[tuple[str, str], ...]:
    """The tag's (platform, CUDA arch) pairs, in the order written; () without `platforms`."""
    if "platforms" not in merged:
        return ()
    written = origin["platforms"]
    for key in ("platform", "cuda_arch"):
        if key in merged:
            raise ConfigError(f"{where(origin[key], key)}: tag {name!r} has `platforms` "
                              f"({where(written, 'platforms')}) and `{key}`",
                              "give each platform its CUDA arch under `platforms:` only")
    spec = where.mapping(written["platforms"], "platforms", parent=written, key="platforms")
    if not spec:
        raise ConfigError(f"{where(written, 'platforms')}: tag {name!r} names no platform",
                          'write e.g. platforms: {linux/arm64: "12.1a"}')
    pairs = []
    for platform in spec:
        arch = spec[platform]
        if not PLATFORM.fullmatch(platform) or not isinstance(arch, str) \
                or not CUDA_ARCH.fullmatch(arch):
            raise ConfigError(f"{where(spec, platform)}: platforms wants <linux/ARCH>: "
                              f"<CUDA arch>, not {platform}: {arch!r}",
                              'write e.g. linux/arm64: "12.1a"')
        pairs.append((platform, arch))
    return tuple(pairs)


def platform_name(release: str, platform: str) -> str:
    """The tag of one platform of a release: NAME-<architecture>."""
    return f"{release}-{platform.split('/', 1)[1]}"


def expand(tag: Tag, pairs: tuple[tuple[str, str], ...]) -> tuple[Tag, ...]:
    """One tag per platform of a multi-platform tag, each naming the release it belongs to."""
    return tuple(replace(tag, name=platform_name(tag.name, platform), platform=platform,
                         cuda_arch=arch, release=tag.name) for platform, arch in pairs)
