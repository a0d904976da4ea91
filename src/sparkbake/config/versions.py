"""versions.yaml (schema 1) parsed once into frozen dataclasses.

No other module reads YAML; the process environment is read by `settings` alone.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, TypedDict, TypeVar

from sparkbake.config import platforms, yamlsource
from sparkbake.config.model import (
    CAPABILITY_KEYS,
    CUDA_ARCH,
    DEFAULT_SMOKE_SUITE,
    Base,
    Capabilities,
    CompileCache,
    Config,
    DebootstrapBase,
    DirUpstream,
    GitUpstream,
    ImageBase,
    KernelSeed,
    Listed,
    PypiUpstream,
    Tag,
    Upstream,
)
from sparkbake.config.platforms import Platform
from sparkbake.config.yamlsource import LocatedDict, Where, did_you_mean
from sparkbake.errors import ConfigError

__all__ = [
    "Base",
    "Capabilities",
    "CompileCache",
    "Config",
    "DebootstrapBase",
    "DirUpstream",
    "GitUpstream",
    "ImageBase",
    "KernelSeed",
    "PypiUpstream",
    "Tag",
    "Upstream",
    "load",
]

SHA256 = re.compile(r"[0-9a-f]{64}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
COMMIT = re.compile(r"[0-9a-f]{40}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
TAG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # Docker's image tag grammar
# Docker's repository grammar (distribution's reference): an optional HOST[:PORT]/, then
# lower-case path components joined by '/', each separated inside by '.', '_', '__' or '-'s
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"(?:(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9a-fA-F:]+\])"
                        rf"(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*")
MODEL_FAMILY = re.compile(r"[a-z][a-z0-9_]*")  # a Python package name: vllm/models/NAME
PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]*")
PYTHON = re.compile(r"3\.\d+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
IMAGE_REF = re.compile(r"[^@\s]+@sha256:([0-9a-f]{64})")
# SOURCE_DATE_EPOCH bounds: a zip (a wheel) stores no time before 1980; 2100 as a sanity bound
EPOCH_MIN, EPOCH_MAX = 315532800, 4102444800
UPSTREAM_KINDS = ("pypi", "git", "dir")
# files in the tree; Final keeps each name a literal key of _UpstreamOptions
REQUIREMENTS_KEYS: Final = ("build_requirements", "runtime_requirements")
KERNEL_REUSE = re.compile(r"assemble|builder")  # how a wheel reuses cached kernels
DEVICE = re.compile(r"cuda|cpu")  # what an upstream is built for (VLLM_TARGET_DEVICE)
# a wheel file name: project-version(-build)?-python-abi-platform.whl
WHEEL = re.compile(r"([A-Za-z0-9_.]+)-([^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl")
TREE_PATH = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9._/-]+")
# a cmake_skip key: a file of the tree or a glob of files (* ?), and optionally :LINE, the
# line of one declaration in it
CMAKE_SKIP = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9._/*?-]+(:[1-9][0-9]*)?")

TOP_KEYS = ("schema", "defaults", "bases", "upstreams", "tags")
DEFAULT_KEYS = ("repository", "platform", "cuda_arch", "builder", "runtime")
TAG_KEYS = ("extends", "upstream", "series", "env", "smoke", "kernels", "capabilities",
            "extras", "pins", "platforms", *DEFAULT_KEYS)
# a pin over the upstream's runtime requirements: an exact version (README: versions.yaml)
PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!_-]*")
DCP_SIZES = (1, 2, 4, 8)  # the decode-context-parallel sizes a capability may name
DEBOOTSTRAP_KEYS = ("suite", "mirror", "variant", "packages")
# the compile cache's Redis: redis://[user:password@]host[:port][/db], rediss:// for TLS
REDIS_URL = re.compile(r"rediss?://(?:[^@/\s]+@)?(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])"
                       r"(?::\d{1,5})?(?:/\d{1,2})?")


def load(path: Path) -> Config:
    """Parse and validate a versions.yaml; every error names file:line."""
    path = path.resolve()
    doc = yamlsource.read(path)
    where = Where(path)
    if isinstance(doc, LocatedDict) and "schema" in doc:
        _check_schema(where, doc)
    top = where.mapping(doc, "the file", (*TOP_KEYS, "cache"), required=TOP_KEYS)
    raw_bases = where.mapping(top["bases"], "bases", parent=top, key="bases")
    bases = {name: _base(where, name, raw_bases) for name in raw_bases}
    raw_upstreams = where.mapping(top["upstreams"], "upstreams", parent=top, key="upstreams")
    upstreams = {key: _upstream(where, key, raw_upstreams) for key in raw_upstreams}
    defaults = where.mapping(top["defaults"], "defaults", DEFAULT_KEYS, required=DEFAULT_KEYS,
                             parent=top, key="defaults")
    raw_tags = where.mapping(top["tags"], "tags", parent=top, key="tags")
    for name in raw_tags:
        _check_tag_name(where, raw_tags, name)
    cache = _compile_cache(where, top)
    tags: dict[str, Tag] = {}
    releases: dict[str, tuple[str, ...]] = {}
    for name in raw_tags:
        tag, pairs = _tag(where, name, raw_tags, defaults, bases, upstreams)
        made = _expand(replace(tag, cache=cache), pairs) if pairs else \
            (replace(tag, cache=cache),)
        for one in made:
            if one.name in raw_tags and one.release is not None:
                raise ConfigError(f"{where(raw_tags, one.name)}: tag {one.name!r} is also the "
                                  f"{one.platform} tag of the multi-platform tag {name!r}",
                                  "rename one of them")
            tags[one.name] = one
        if pairs:
            releases[name] = tuple(one.name for one in made)
    return Config(path=path, tags=tags, upstreams=upstreams, releases=releases)


def _check_tag_name(where: Where, raw_tags: LocatedDict, name: str) -> None:
    """A tag names an image tag and folders under build/: Docker's tag grammar, so never a
    path such as `..`."""
    if not TAG_NAME.fullmatch(name):
        raise ConfigError(f"{where(raw_tags, name)}: tag name {name!r} is not an image tag",
                          "use letters, digits, '_', '.' and '-', not starting with '.' or '-', "
                          "at most 128 characters")


def _compile_cache(where: Where, top: LocatedDict) -> CompileCache:
    """`cache: {redis: URL}`: the compile cache builders share; without it a local folder."""
    if "cache" not in top:
        return CompileCache()
    spec = where.mapping(top["cache"], "cache", ("redis",), parent=top, key="cache")
    if "redis" not in spec:
        return CompileCache()
    return CompileCache(redis=where.string(spec, "redis", REDIS_URL,
                                           "a Redis URL such as redis://cache.lan:6379/0"))


def _check_schema(where: Where, doc: LocatedDict) -> None:
    # bool is an int in Python: `schema: true` must not pass for 1
    if type(doc["schema"]) is not int or doc["schema"] != 1:
        raise ConfigError(
            f"{where(doc, 'schema')}: schema {doc['schema']!r} is not supported",
            "this sparkbake reads 'schema: 1'",
        )


def _base(where: Where, name: str, raw_bases: LocatedDict) -> Base:
    spec = where.mapping(raw_bases[name], f"base {name!r}", ("image", "debootstrap", "python"),
                         parent=raw_bases, key=name)
    python = None
    if "python" in spec:
        python = where.string(spec, "python", PYTHON, 'a version like "3.12"')
    if len({"image", "debootstrap"} & set(spec)) != 1:
        raise ConfigError(f"{where(spec)}: base {name!r} needs exactly one of image, debootstrap",
                          "keep one of them")
    if "image" in spec:
        image = where.string(spec, "image", IMAGE_REF,
                             "an image pinned by digest (name@sha256:<64 hex>)")
        return ImageBase(name=name, image=image, python=python)
    boot = where.mapping(spec["debootstrap"], f"base {name!r} debootstrap", DEBOOTSTRAP_KEYS,
                         required=("suite",), parent=spec, key="debootstrap")
    return DebootstrapBase(
        name=name,
        suite=where.string(boot, "suite", NAME, "a Debian suite name"),
        mirror=where.string(boot, "mirror") if "mirror" in boot else None,
        variant=where.string(boot, "variant", NAME, "a debootstrap variant")
        if "variant" in boot else "minbase",
        packages=where.strings(boot, "packages", PACKAGE) if "packages" in boot else (),
        python=python,
    )


class _UpstreamOptions(TypedDict, total=False):
    """The keys every kind of upstream may have, as the model's keyword arguments (an absent
    one keeps the model's default)."""

    build_requirements: str
    runtime_requirements: str
    cmake_skip: tuple[tuple[str, str], ...]
    kernel_reuse: str
    device: str
    overrides: tuple[str, ...]


def _upstream(where: Where, key: str, raw_upstreams: LocatedDict) -> Upstream:
    spec = where.mapping(raw_upstreams[key], f"upstream {key!r}",
                         (*UPSTREAM_KINDS, "source_date_epoch", *REQUIREMENTS_KEYS,
                          "cmake_skip", "kernel_reuse", "device", "overrides"),
                         parent=raw_upstreams, key=key)
    if len(set(UPSTREAM_KINDS) & set(spec)) != 1:
        raise ConfigError(f"{where(spec)}: upstream {key!r} needs exactly one of pypi, git, dir",
                          "keep one of them")
    date = _source_date(where, spec)
    options = _UpstreamOptions(cmake_skip=_cmake_skip(where, spec))
    for name in REQUIREMENTS_KEYS:
        if name in spec:
            options[name] = where.string(spec, name, TREE_PATH, "a relative path inside the tree")
    if "kernel_reuse" in spec:
        options["kernel_reuse"] = where.string(
            spec, "kernel_reuse", KERNEL_REUSE, "assemble (on this host) or builder")
    if "device" in spec:
        options["device"] = where.string(spec, "device", DEVICE, "cuda or cpu")
    if "overrides" in spec:
        options["overrides"] = where.strings(spec, "overrides", PIN)
    if "dir" in spec:
        rel = where.string(spec, "dir")
        return DirUpstream(key=key, path=(where.path.parent / rel).resolve(),
                           source_date_epoch=date, **options)
    if "git" in spec:
        git = where.mapping(spec["git"], f"upstream {key!r} git", ("url", "commit"),
                            required=("url", "commit"), parent=spec, key="git")
        url = where.string(git, "url")
        return GitUpstream(key=key, url=url, source=_git_source(where.path.parent, url),
                           commit=where.string(git, "commit", COMMIT, "a full 40-hex commit"),
                           source_date_epoch=date, **options)
    pypi = where.mapping(spec["pypi"], f"upstream {key!r} pypi", ("name", "version", "sha256"),
                         required=("name", "version", "sha256"), parent=spec, key="pypi")
    return PypiUpstream(
        key=key,
        name=where.string(pypi, "name", NAME, "a package name"),
        version=where.string(pypi, "version", NAME, "a version"),
        sha256=where.string(pypi, "sha256", SHA256, "64 lowercase hex digits"),
        source_date_epoch=date, **options,
    )


def _cmake_skip(where: Where, spec: LocatedDict) -> tuple[tuple[str, str], ...]:
    """cmake_skip: {<CMake file, glob of files, or file:line of one declaration>: <why this
    build never reaches it>}."""
    if "cmake_skip" not in spec:
        return ()
    skip = where.mapping(spec["cmake_skip"], "cmake_skip", parent=spec, key="cmake_skip")
    for name in skip:
        if not CMAKE_SKIP.fullmatch(name) or not isinstance(skip[name], str):
            raise ConfigError(f"{where(skip, name)}: cmake_skip wants <path in the tree, a glob "
                              "or path:line>: <reason>",
                              'write e.g. cmake/cpu_extension.cmake: "CPU build"')
    return tuple(sorted((name, str(skip[name])) for name in skip))


def _source_date(where: Where, spec: LocatedDict) -> int | None:
    """The declared SOURCE_DATE_EPOCH of an upstream: whole seconds, 1980 to 2100."""
    if "source_date_epoch" not in spec:
        return None
    value = spec["source_date_epoch"]
    if type(value) is not int or not EPOCH_MIN <= value < EPOCH_MAX:
        raise ConfigError(
            f"{where(spec, 'source_date_epoch')}: source_date_epoch {value!r} is not a Unix "
            "time in seconds between 1980 and 2100",
            "write an integer, e.g. source_date_epoch: 1735689600 (2025-01-01T00:00:00Z)",
        )
    return value


Named = TypeVar("Named", Base, Upstream)  # what a tag names by key: a base, an upstream


def _tag(where: Where, name: str, raw_tags: LocatedDict, defaults: LocatedDict,
         bases: dict[str, Base], upstreams: dict[str, Upstream],
         ) -> tuple[Tag, tuple[tuple[Platform, str], ...]]:
    """The tag, and its (platform, CUDA arch) pairs if it is a multi-platform tag."""
    merged, origin = _resolve_extends(where, name, raw_tags)
    pairs = _platforms(where, origin, merged, name)
    for key in DEFAULT_KEYS:
        if key not in merged:
            merged[key], origin[key] = defaults[key], defaults
    for key in ("upstream", "series"):
        if key not in merged:
            raise ConfigError(f"{where(raw_tags, name)}: tag {name!r} lacks the key {key!r}",
                              f"add '{key}:' to the tag or to the tag it extends")

    def ref(key: str, table: dict[str, Named], what: str) -> Named:
        value = where.string(origin[key], key)
        if value not in table:
            raise ConfigError(
                f"{where(origin[key], key)}: unknown {what} {value!r}{did_you_mean(value, table)}",
                f"define it under '{what}s:' or pick one of: {', '.join(sorted(table))}",
            )
        return table[value]

    series = where.strings(origin["series"], "series", NAME)
    if len(set(series)) != len(series):
        raise ConfigError(f"{where(origin['series'], 'series')}: tag {name!r} lists a series twice",
                          "list each series once")
    tag = Tag(
        name=name,
        upstream=ref("upstream", upstreams, "upstream"),
        series=series,
        env=_env(where, merged["env"]),
        repository=where.string(origin["repository"], "repository", REPOSITORY,
                                "a repository such as localhost:5000/name (lower case)"),
        platform=platforms.parse(where.string(origin["platform"], "platform", platforms.PLATFORM,
                                              "a platform such as linux/arm64")),
        cuda_arch=where.string(origin["cuda_arch"], "cuda_arch", CUDA_ARCH,
                               "a CUDA arch such as \"12.1a\""),
        builder=ref("builder", bases, "base"),
        runtime=ref("runtime", bases, "base"),
        smoke=where.string(origin["smoke"], "smoke", NAME, "a smoke suite name")
        if "smoke" in merged else DEFAULT_SMOKE_SUITE,
        kernels=_kernel_seed(where, origin["kernels"]) if "kernels" in merged else None,
        capabilities=_capabilities(where, origin["capabilities"])
        if "capabilities" in merged else None,
        extras=_listed(where, origin, merged, "extras", NAME),
        pins=_listed(where, origin, merged, "pins", PIN),
    )
    return tag, pairs


def _platforms(where: Where, origin: dict[str, LocatedDict], merged: dict[str, Any],
               name: str) -> tuple[tuple[Platform, str], ...]:
    """`platforms: {linux/arm64: "12.1a", ...}`: the tag's (platform, CUDA arch) pairs, in the
    order written; () without it. Inherited through `extends` like any key, it takes the
    place of `platform` and `cuda_arch`."""
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
        if not platforms.PLATFORM.fullmatch(platform) or not isinstance(arch, str) \
                or not CUDA_ARCH.fullmatch(arch):
            raise ConfigError(f"{where(spec, platform)}: platforms wants <linux/ARCH>: "
                              f"<CUDA arch>, not {platform}: {arch!r}",
                              'write e.g. linux/arm64: "12.1a"')
        pairs.append((platforms.parse(platform), arch))
    return tuple(pairs)


def _expand(tag: Tag, pairs: tuple[tuple[Platform, str], ...]) -> tuple[Tag, ...]:
    """One tag per platform of a multi-platform tag, each naming the release it belongs to."""
    return tuple(replace(tag, name=platforms.platform_name(tag.name, platform),
                         platform=platform, cuda_arch=arch, release=tag.name)
                 for platform, arch in pairs)


def _listed(where: Where, origin: dict[str, LocatedDict], merged: dict[str, Any], key: str,
            pattern: re.Pattern[str]) -> Listed:
    """extras: / pins: with where they are written, for the lock's errors."""
    if key not in merged:
        return Listed()
    items = where.strings(origin[key], key, pattern)
    if len({item.split("==")[0].lower() for item in items}) != len(items):
        raise ConfigError(f"{where(origin[key], key)}: {key} names a package twice",
                          "list each once")
    return Listed(items, where(origin[key], key))


def _capabilities(where: Where, tag: LocatedDict) -> Capabilities:
    """`capabilities:` what the image can run; an absent key is the cautious default."""
    spec = where.mapping(tag["capabilities"], "capabilities", (*CAPABILITY_KEYS, "because"),
                         parent=tag, key="capabilities")
    flags = {key: _flag(where, spec, key) for key in
             ("images_under_dcp", "prefix_cache_under_dcp", "ckv_gather", "vision_mhc")
             if key in spec}
    return Capabilities(
        dcp_sizes=_dcp_sizes(where, spec) if "dcp_sizes" in spec else (1,),
        speculative=where.strings(spec, "speculative", NAME) if "speculative" in spec else (),
        because=_because(where, spec) if "because" in spec else (),
        model=_model(where, spec) if "model" in spec else None,
        device_memory_gib=_memory(where, spec) if "device_memory_gib" in spec else None,
        **flags,
    )


def _model(where: Where, spec: LocatedDict) -> str:
    model = spec["model"]
    if not isinstance(model, str) or not MODEL_FAMILY.fullmatch(model):
        raise ConfigError(f"{where(spec, 'model')}: capabilities model must name a model "
                          f"family as vLLM's package does (vllm/models/NAME), not {model!r}",
                          "write e.g. 'model: deepseek_v4'")
    return model


def _memory(where: Where, spec: LocatedDict) -> float:
    memory = spec["device_memory_gib"]
    if type(memory) not in (int, float) or not 0 < memory < 100000:
        raise ConfigError(f"{where(spec, 'device_memory_gib')}: capabilities device_memory_gib "
                          f"must be the GPU's total memory in GiB as cudaMemGetInfo reports "
                          f"it, not {memory!r}",
                          "write e.g. 'device_memory_gib: 121.7' (a GB10)")
    return float(memory)


def _flag(where: Where, spec: LocatedDict, key: str) -> bool:
    if not isinstance(spec[key], bool):
        raise ConfigError(f"{where(spec, key)}: capabilities {key} must be true or false, "
                          f"not {spec[key]!r}", f"write '{key}: false' or '{key}: true'")
    return bool(spec[key])


def _dcp_sizes(where: Where, spec: LocatedDict) -> tuple[int, ...]:
    sizes = spec["dcp_sizes"]
    if not isinstance(sizes, list) or not sizes or 1 not in sizes or any(
            type(size) is not int or size not in DCP_SIZES for size in sizes):
        raise ConfigError(f"{where(spec, 'dcp_sizes')}: capabilities dcp_sizes must list DCP "
                          f"sizes from {', '.join(map(str, DCP_SIZES))}, 1 among them, not "
                          f"{sizes!r}", "write e.g. 'dcp_sizes: [1]' or 'dcp_sizes: [1, 2]'")
    return tuple(sorted(set(sizes)))


def _because(where: Where, spec: LocatedDict) -> tuple[tuple[str, str], ...]:
    because = where.mapping(spec["because"], "capabilities because", CAPABILITY_KEYS,
                            parent=spec, key="because")
    for key in because:
        if not isinstance(because[key], str) or not because[key].strip():
            raise ConfigError(f"{where(because, key)}: capabilities because {key} must be a "
                              "sentence saying why the image cannot do more",
                              "quote it, e.g. dcp_sizes: \"vLLM 0.33.0 asserts ...\"")
    return tuple(sorted((key, " ".join(str(because[key]).split())) for key in because))


def _kernel_seed(where: Where, tag: LocatedDict) -> KernelSeed:
    seed = where.mapping(tag["kernels"], "kernels", ("wheel", "sha256", "other_arch"),
                         required=("wheel", "sha256"), parent=tag, key="kernels")
    return KernelSeed(
        wheel=where.string(seed, "wheel", WHEEL, "a wheel file name on the package index"),
        sha256=where.string(seed, "sha256", SHA256, "64 lowercase hex digits"),
        other_arch=where.strings(seed, "other_arch", TREE_PATH)
        if "other_arch" in seed else (),
    )


def _resolve_extends(where: Where, name: str,
                     raw_tags: LocatedDict) -> tuple[dict[str, Any], dict[str, LocatedDict]]:
    """Merge a tag over its ancestors; `env` merges key by key, everything else replaces."""
    chain: list[str] = []
    current: str | None = name
    while current is not None:
        if current in chain:
            raise ConfigError(
                f"{where(raw_tags, name)}: 'extends' forms a cycle: "
                f"{' -> '.join([*chain, current])}",
                "remove one 'extends' from the cycle",
            )
        spec = where.mapping(raw_tags[current], f"tag {current!r}", TAG_KEYS, parent=raw_tags,
                             key=current)
        chain.append(current)
        current = where.string(spec, "extends") if "extends" in spec else None
        if current is not None and current not in raw_tags:
            raise ConfigError(
                f"{where(spec, 'extends')}: tag {chain[-1]!r} extends unknown tag {current!r}"
                f"{did_you_mean(current, [t for t in raw_tags if t != chain[-1]])}",
                "name a tag defined under 'tags:'",
            )
    merged: dict[str, Any] = {}
    origin: dict[str, LocatedDict] = {}
    env: dict[str, tuple[Any, LocatedDict]] = {}  # name -> (value, the env block it is from)
    for ancestor in reversed(chain):
        spec = raw_tags[ancestor]
        for key, value in spec.items():
            if key == "env":
                block = where.mapping(value, f"tag {ancestor!r} env", parent=spec, key="env")
                env.update({name: (item, block) for name, item in block.items()})
            elif key != "extends":
                merged[key], origin[key] = value, spec
    merged["env"] = env
    return merged, origin


def _env(where: Where,
         env: dict[str, tuple[Any, LocatedDict]]) -> tuple[tuple[str, str], ...]:
    for name, (value, block) in env.items():
        if not ENV_NAME.fullmatch(name) or not isinstance(value, str):
            raise ConfigError(
                f"{where(block, name)}: env {name}={value!r}: names are shell identifiers, "
                "values are strings",
                'quote the value, e.g. VLLM_X: "1"',
            )
    return tuple(sorted((name, value) for name, (value, _) in env.items()))


def _git_source(root: Path, url: str) -> str:
    """A URL (scheme://, or scp-like host:path) as is; a local path made absolute."""
    if "://" in url or re.match(r"[^/]+:", url):
        return url
    return str((root / url).resolve())
