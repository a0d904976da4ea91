"""versions.yaml (schema 1): what loads, what it loads into, and every error's file:line."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from packaging.utils import parse_wheel_filename

from sparkbake.config import versions as config_mod
from sparkbake.config.platforms import AMD64, ARM64
from sparkbake.config.versions import (
    Config,
    DebootstrapBase,
    DirUpstream,
    GitUpstream,
    ImageBase,
    PypiUpstream,
    Tag,
)
from sparkbake.errors import ConfigError
from sparkbake.nodes import sample_envs
from tests.conftest import versions_yaml

REPO = Path(__file__).resolve().parents[2]
DIGEST = "a" * 64
SDIST = "b" * 64
FORK_COMMIT = "c" * 40
LOCAL_COMMIT = "d" * 40

# every kind of base and upstream, defaults a tag overrides, extends; a comment first, so
# that the top mapping does not start at line 1
VALID = "# a comment before everything\n" + versions_yaml(
    platform="linux/arm64", builder="devel", runtime="boot", bases=f"""\
  devel:
    image: nvidia/cuda:13.0.2-devel-ubuntu24.04@sha256:{DIGEST}
  boot:
    debootstrap:
      suite: bookworm
      mirror: http://deb.example.invalid/debian
      packages: [python3, g++]
""", upstreams=f"""\
  release:
    pypi: {{name: vllm, version: 0.33.0, sha256: {SDIST}}}
  fork:
    git: {{url: "https://example.invalid/vllm.git", commit: {FORK_COMMIT}}}
  local-git:
    git: {{url: ../repos/vllm, commit: {LOCAL_COMMIT}}}
  tree:
    dir: upstream
""", tags="""\
  production-3.72-vision:
    upstream: release
    series: [dcp-dspark, ckv-gather, vision]
    env:
      VLLM_DSV4_CKV_GATHER: "1"
      VISION_MHC: "1"
  production-3.73-vision:
    extends: production-3.72-vision
    series: [dcp-dspark, prefix-cache, ckv-gather, vision]
    env:
      VISION_MHC: "0"
      VLLM_DSV4_DCP_PREFIX_CACHE: "1"
  custom:
    upstream: fork
    series: []
    repository: registry.example.invalid/custom
    platform: linux/amd64
    cuda_arch: "12.0f"
    builder: boot
    runtime: devel
  local:
    upstream: tree
    series: [demo]
  from-git:
    upstream: local-git
    series: [demo]
""")


def write_config(folder: Path, text: str, name: str = "versions.yaml") -> Path:
    """Write a versions.yaml into folder and return its resolved path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path.resolve()


def edit(text: str, old: str, new: str) -> str:
    """Replace exactly one occurrence of old, so that a test cannot silently edit nothing."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based number of the line holding the n-th occurrence of needle."""
    seen = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{needle!r} not found {occurrence} times")


def replace_section(text: str, key: str, new: str) -> str:
    """Replace a top-level section, from its `key:` line to the next top-level key."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")),
               len(lines))
    return "".join([*lines[:start], new, *lines[end:]])


def first_key_line(text: str) -> int:
    """The line of the first top-level key: where the top mapping starts."""
    return next(number for number, line in enumerate(text.splitlines(), start=1)
                if line and not line.startswith(("#", " ")))


def load_error(tmp_path: Path, text: str) -> tuple[ConfigError, Path]:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        config_mod.load(path)
    assert info.value.exit_code == 2
    return info.value, path


@pytest.fixture
def loaded(tmp_path: Path) -> Config:
    return config_mod.load(write_config(tmp_path, VALID))


# --- what a valid file loads into ---------------------------------------------------------


def test_valid_file_loads_into_tags_with_defaults_applied(loaded: Config, tmp_path: Path) -> None:
    assert loaded.path == (tmp_path / "versions.yaml").resolve()
    assert list(loaded.tags) == ["production-3.72-vision", "production-3.73-vision", "custom",
                                 "local", "from-git"]
    tag = loaded.tags["production-3.72-vision"]
    assert tag == Tag(
        name="production-3.72-vision",
        upstream=PypiUpstream(key="release", name="vllm", version="0.33.0", sha256=SDIST),
        series=("dcp-dspark", "ckv-gather", "vision"),
        env=(("VISION_MHC", "1"), ("VLLM_DSV4_CKV_GATHER", "1")),
        repository="localhost:5000/sparkbake-test",
        platform=ARM64,
        cuda_arch="12.1a",
        builder=ImageBase(name="devel",
                          image=f"nvidia/cuda:13.0.2-devel-ubuntu24.04@sha256:{DIGEST}"),
        runtime=DebootstrapBase(name="boot", suite="bookworm",
                                mirror="http://deb.example.invalid/debian", variant="minbase",
                                packages=("python3", "g++")),
    )
    assert tag.image_ref == "localhost:5000/sparkbake-test:production-3.72-vision"
    assert isinstance(tag.builder, ImageBase)
    assert tag.builder.digest == f"sha256:{DIGEST}"


def test_loaded_dataclasses_are_frozen(loaded: Config) -> None:
    tag = loaded.tags["custom"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tag.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tag.builder.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tag.upstream.key = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.path = Path("elsewhere")  # type: ignore[misc]
    assert isinstance(tag.series, tuple)
    assert isinstance(tag.env, tuple)


def test_extends_merges_env_key_by_key_and_replaces_series(loaded: Config) -> None:
    parent = loaded.tags["production-3.72-vision"]
    child = loaded.tags["production-3.73-vision"]
    assert child.series == ("dcp-dspark", "prefix-cache", "ckv-gather", "vision")
    assert dict(child.env) == {
        "VLLM_DSV4_CKV_GATHER": "1",        # inherited
        "VISION_MHC": "0",                  # overridden
        "VLLM_DSV4_DCP_PREFIX_CACHE": "1",  # added
    }
    assert [k for k, _ in child.env] == sorted(k for k, _ in child.env)
    assert child.upstream == parent.upstream
    assert (child.builder, child.runtime, child.cuda_arch) == (
        parent.builder, parent.runtime, parent.cuda_arch)
    # the parent is untouched by its child
    assert dict(parent.env) == {"VLLM_DSV4_CKV_GATHER": "1", "VISION_MHC": "1"}


def test_extends_chains_over_several_generations(tmp_path: Path) -> None:
    text = VALID + """\
  production-3.74-vision:
    extends: production-3.73-vision
    cuda_arch: "12.0a"
    env: {EXTRA: "x"}
"""
    tag = config_mod.load(write_config(tmp_path, text)).tags["production-3.74-vision"]
    assert tag.series == ("dcp-dspark", "prefix-cache", "ckv-gather", "vision")
    assert dict(tag.env) == {"VLLM_DSV4_CKV_GATHER": "1", "VISION_MHC": "0",
                             "VLLM_DSV4_DCP_PREFIX_CACHE": "1", "EXTRA": "x"}
    assert tag.cuda_arch == "12.0a"
    assert tag.upstream.key == "release"


def test_a_child_may_override_what_its_parent_sets(tmp_path: Path) -> None:
    text = edit(VALID, "    extends: production-3.72-vision\n",
                "    extends: production-3.72-vision\n    upstream: fork\n    runtime: devel\n")
    tag = config_mod.load(write_config(tmp_path, text)).tags["production-3.73-vision"]
    assert isinstance(tag.upstream, GitUpstream)
    assert tag.upstream.key == "fork"
    assert isinstance(tag.runtime, ImageBase)


def test_a_tag_overrides_every_default(loaded: Config) -> None:
    tag = loaded.tags["custom"]
    assert tag.repository == "registry.example.invalid/custom"
    assert tag.platform == AMD64
    assert tag.cuda_arch == "12.0f"
    assert tag.sm_arch == "sm_120f"
    assert isinstance(tag.builder, DebootstrapBase)
    assert tag.builder.name == "boot"
    assert isinstance(tag.runtime, ImageBase)
    assert tag.runtime.name == "devel"
    assert tag.upstream == GitUpstream(key="fork", url="https://example.invalid/vllm.git",
                                       commit=FORK_COMMIT,
                                       source="https://example.invalid/vllm.git")
    assert tag.series == ()
    assert tag.env == ()
    assert tag.image_ref == "registry.example.invalid/custom:custom"


def test_debootstrap_defaults(tmp_path: Path) -> None:
    text = edit(VALID, "      mirror: http://deb.example.invalid/debian\n"
                       "      packages: [python3, g++]\n", "")
    base = config_mod.load(write_config(tmp_path, text)).tags["local"].runtime
    assert base == DebootstrapBase(name="boot", suite="bookworm", mirror=None, variant="minbase",
                                   packages=())


# --- finding a tag ------------------------------------------------------------------------


def test_a_tag_is_found_by_its_full_name_or_a_unique_suffix(loaded: Config) -> None:
    full = loaded.tag("production-3.73-vision")
    assert full.name == "production-3.73-vision"
    assert loaded.tag("3.73-vision") is full
    assert loaded.tag("3.72-vision").name == "production-3.72-vision"
    assert loaded.tag("git").name == "from-git"


def test_a_full_name_wins_over_a_suffix(tmp_path: Path) -> None:
    text = VALID + "  vision:\n    upstream: fork\n    series: []\n"
    assert config_mod.load(write_config(tmp_path, text)).tag("vision").name == "vision"


def test_an_ambiguous_suffix_names_every_match(loaded: Config) -> None:
    with pytest.raises(ConfigError) as info:
        loaded.tag("vision")
    assert info.value.exit_code == 2
    assert "ambiguous" in info.value.message
    assert "production-3.72-vision, production-3.73-vision" in info.value.message
    assert "full tag name" in info.value.remedy


def test_an_unknown_tag_suggests_the_closest(loaded: Config) -> None:
    with pytest.raises(ConfigError) as info:
        loaded.tag("production-3.37-vision")
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{loaded.path}: no tag 'production-3.37-vision'")
    assert "did you mean 'production-3.73-vision'?" in info.value.message
    assert "custom" in info.value.remedy  # lists the known tags


def test_an_unknown_tag_without_a_close_match_suggests_nothing(loaded: Config) -> None:
    with pytest.raises(ConfigError) as info:
        loaded.tag("zzzzzz")
    assert "did you mean" not in info.value.message


# --- paths --------------------------------------------------------------------------------


def test_paths_resolve_relative_to_the_config_folder_not_the_cwd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "conf"
    write_config(folder, VALID)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = config_mod.load(Path("../conf/versions.yaml"))
    root = folder.resolve()
    assert loaded.path == root / "versions.yaml"
    assert loaded.root == root
    assert loaded.patches_dir == root / "patches"
    assert loaded.wheels_dir == root / "wheels"
    assert loaded.build_dir == root / "build"
    assert loaded.tags["local"].upstream == DirUpstream(key="tree", path=root / "upstream")
    git = loaded.tags["from-git"].upstream
    # the pin keeps the url as written; git fetches from the path resolved to the config
    assert git == GitUpstream(key="local-git", url="../repos/vllm", commit=LOCAL_COMMIT,
                              source=str(tmp_path.resolve() / "repos" / "vllm"))
    # a real URL is kept as written
    assert isinstance(loaded.tags["custom"].upstream, GitUpstream)
    assert loaded.tags["custom"].upstream.url == "https://example.invalid/vllm.git"


def test_ssh_style_git_url_is_kept(tmp_path: Path) -> None:
    text = edit(VALID, "url: ../repos/vllm", "url: git@example.invalid:org/vllm.git")
    upstream = config_mod.load(write_config(tmp_path, text)).tags["from-git"].upstream
    assert isinstance(upstream, GitUpstream)
    assert upstream.url == "git@example.invalid:org/vllm.git"


def test_scp_style_git_url_with_another_user_is_kept(tmp_path: Path) -> None:
    text = edit(VALID, "url: ../repos/vllm", "url: builder@example.invalid:org/vllm.git")
    upstream = config_mod.load(write_config(tmp_path, text)).tags["from-git"].upstream
    assert isinstance(upstream, GitUpstream)
    assert upstream.url == upstream.source == "builder@example.invalid:org/vllm.git"


@pytest.mark.parametrize(("cuda_arch", "sm_arch"), [
    ("12.1a", "sm_121a"),
    ("12.0f", "sm_120f"),
    ("12.1", "sm_121"),
    ("10.0a", "sm_100a"),
    ("9.0a", "sm_90a"),
])
def test_sm_arch(tmp_path: Path, cuda_arch: str, sm_arch: str) -> None:
    text = edit(VALID, 'cuda_arch: "12.1a"', f'cuda_arch: "{cuda_arch}"')
    tag = config_mod.load(write_config(tmp_path, text)).tags["production-3.72-vision"]
    assert tag.cuda_arch == cuda_arch
    assert tag.sm_arch == sm_arch


# --- every bad input: ConfigError, exit 2, `<path>:<line>:` -------------------------------

ERRORS: list[tuple[str, str, str, str, int, str]] = [
    # id, old, new, needle of the line the error must point at (in the edited text), occurrence,
    # a fragment of the message
    ("unknown-top-key", "\ntags:\n", "\ntgas:\n", "tgas:", 1, "did you mean 'tags'?"),
    ("unknown-tag-key", "    series: [dcp-dspark, ckv-gather, vision]",
     "    seires: [dcp-dspark, ckv-gather, vision]", "seires:", 1, "did you mean 'series'?"),
    ("unknown-defaults-key", "  platform: linux/arm64", "  platfrom: linux/arm64", "platfrom:", 1,
     "did you mean 'platform'?"),
    ("unknown-base-key", "    image: nvidia", "    imgae: nvidia", "imgae:", 1,
     "did you mean 'image'?"),
    ("unknown-upstream-kind", "    dir: upstream", "    dri: upstream", "dri:", 1,
     "did you mean 'dir'?"),
    ("unknown-debootstrap-key", "      suite: bookworm", "      suit: bookworm", "suit:", 1,
     "did you mean 'suite'?"),
    ("missing-schema", "schema: 1\n", "", "defaults:", 1, "lacks the key 'schema'"),
    ("missing-upstream", "    upstream: fork\n", "", "  custom:", 1, "lacks the key 'upstream'"),
    ("missing-series", "    upstream: tree\n    series: [demo]\n", "    upstream: tree\n",
     "  local:", 1, "lacks the key 'series'"),
    ("missing-git-commit", f", commit: {FORK_COMMIT}}}", "}", "https://example.invalid", 1,
     "lacks the key 'commit'"),
    ("missing-pypi-sha256", f", sha256: {SDIST}}}", "}", "pypi:", 1, "lacks the key 'sha256'"),
    ("series-not-a-list", "series: [dcp-dspark, ckv-gather, vision]", "series: dcp-dspark",
     "series: dcp-dspark", 1, "must be a list of strings"),
    ("series-item-not-a-name", "series: [dcp-dspark, ckv-gather, vision]",
     "series:\n      - dcp-dspark\n      - ../escape", "../escape", 1, "not a valid name"),
    ("env-value-int", 'VLLM_DSV4_CKV_GATHER: "1"', "VLLM_DSV4_CKV_GATHER: 1",
     "VLLM_DSV4_CKV_GATHER: 1", 1, "quote the value"),
    ("env-name-not-identifier", 'VISION_MHC: "1"', 'VISION-MHC: "1"', "VISION-MHC", 1,
     "shell identifiers"),
    ("repository-not-string", "  repository: localhost:5000/sparkbake-test", "  repository: 5",
     "repository: 5", 1, "quote the value"),
    ("repository-upper-case", "  repository: localhost:5000/sparkbake-test",
     "  repository: localhost:5000/Sparkbake-Test", "repository: localhost", 1,
     "repository 'localhost:5000/Sparkbake-Test' is not a repository such as "
     "localhost:5000/name (lower case)"),
    ("repository-with-a-space", "    repository: registry.example.invalid/custom",
     "    repository: registry.example.invalid/my custom", "my custom", 1,
     "is not a repository such as"),
    ("unknown-upstream-ref", "upstream: release", "upstream: relase", "upstream: relase", 1,
     "unknown upstream 'relase' (did you mean 'release'?)"),
    ("unknown-base-in-defaults", "  builder: devel", "  builder: devle", "builder: devle", 1,
     "unknown base 'devle' (did you mean 'devel'?)"),
    ("unknown-base-in-tag", "    runtime: devel", "    runtime: devl", "runtime: devl", 1,
     "unknown base 'devl' (did you mean 'devel'?)"),
    ("extends-cycle", "  production-3.72-vision:\n",
     "  production-3.72-vision:\n    extends: production-3.73-vision\n",
     "  production-3.72-vision:", 1,
     "cycle: production-3.72-vision -> production-3.73-vision -> production-3.72-vision"),
    ("extends-itself", "  custom:\n", "  custom:\n    extends: custom\n", "  custom:", 1,
     "cycle: custom -> custom"),
    ("extends-unknown", "extends: production-3.72-vision", "extends: production-3.72-visoin",
     "extends: production-3.72-visoin", 1,
     "extends unknown tag 'production-3.72-visoin' (did you mean 'production-3.72-vision'?)"),
    ("sha256-short", f"sha256: {SDIST}", f"sha256: {SDIST[:63]}", "pypi:", 1,
     "64 lowercase hex"),
    ("sha256-upper", f"sha256: {SDIST}", f"sha256: {SDIST.upper()}", "pypi:", 1,
     "64 lowercase hex"),
    ("commit-short", f"commit: {FORK_COMMIT}", "commit: cccccc", "https://example.invalid", 1,
     "40-hex commit"),
    ("commit-branch", f"commit: {LOCAL_COMMIT}", "commit: main", "../repos/vllm", 1,
     "40-hex commit"),
    ("image-tag-only", f"ubuntu24.04@sha256:{DIGEST}", "ubuntu24.04", "image: nvidia", 1,
     "pinned by digest"),
    ("image-short-digest", f"ubuntu24.04@sha256:{DIGEST}", "ubuntu24.04@sha256:abc",
     "image: nvidia", 1, "pinned by digest"),
    ("image-and-debootstrap", f"@sha256:{DIGEST}\n",
     f"@sha256:{DIGEST}\n    debootstrap: {{suite: bookworm}}\n", "image: nvidia", 1,
     "exactly one of image, debootstrap"),
    ("upstream-two-kinds", "    dir: upstream\n",
     "    dir: upstream\n    pypi: {name: vllm, version: 1, sha256: x}\n", "dir: upstream", 1,
     "exactly one of pypi, git, dir"),
    ("duplicate-key", "  platform: linux/arm64\n",
     "  platform: linux/arm64\n  platform: linux/amd64\n", "platform:", 2,
     "duplicate key 'platform'"),
    ("duplicate-tag", "  local:\n", "  custom:\n", "  custom:", 2, "duplicate key 'custom'"),
    ("duplicate-series", "series: [dcp-dspark, ckv-gather, vision]",
     "series: [dcp-dspark, vision, dcp-dspark]", "series: [dcp-dspark, vision, dcp-dspark]", 1,
     "lists a series twice"),
    ("invalid-yaml", "  platform: linux/arm64", "  platform: linux: arm64", "linux: arm64", 1,
     "invalid YAML"),
    ("schema-2", "schema: 1", "schema: 2", "schema: 2", 1, "schema 2 is not supported"),
    ("schema-string", "schema: 1", 'schema: "1"', "schema:", 1, "is not supported"),
    ("cuda-arch-sm", 'cuda_arch: "12.1a"', 'cuda_arch: "sm_121a"', "cuda_arch:", 1,
     "not a CUDA arch"),
    ("cuda-arch-suffix", 'cuda_arch: "12.0f"', 'cuda_arch: "12.0x"', "cuda_arch:", 2,
     "not a CUDA arch"),
    ("cuda-arch-unquoted", 'cuda_arch: "12.1a"', "cuda_arch: 12.1", "cuda_arch:", 1,
     "quote the value"),
    ("platform-bad", "  platform: linux/amd64", "  platform: amd64", "platform: amd64", 1,
     "a platform such as linux/arm64"),
    ("non-string-key", "  local:\n", "  3.74:\n", "3.74:", 1, "key 3.74 is not a string"),
    ("kernels-not-a-wheel", "    series: []\n",
     f"    series: []\n    kernels: {{wheel: vllm-0.33.0.tar.gz, sha256: {SDIST}}}\n",
     "kernels:", 1, "a wheel file name on the package index"),
    ("kernels-without-sha256", "    series: []\n",
     "    series: []\n    kernels: {wheel: vllm-0.33.0-cp38-abi3-linux_x86_64.whl}\n",
     "kernels:", 1, "lacks the key 'sha256'"),
    ("kernels-misspelt-key", "    series: []\n",
     f"    series: []\n    kernels: {{whl: v-1-py3-none-any.whl, sha256: {SDIST}}}\n",
     "kernels:", 1, "did you mean 'wheel'?"),
    ("runtime-requirements-absolute", "    dir: upstream\n",
     "    dir: upstream\n    runtime_requirements: /etc/requirements.txt\n",
     "runtime_requirements:", 1, "a relative path inside the tree"),
    ("build-requirements-outside-the-tree", "    dir: upstream\n",
     "    dir: upstream\n    build_requirements: ../requirements.txt\n",
     "build_requirements:", 1, "a relative path inside the tree"),
    ("kernel-reuse-unknown", "    dir: upstream\n",
     "    dir: upstream\n    kernel_reuse: always\n", "kernel_reuse:", 1,
     "kernel_reuse 'always' is not assemble (on this host) or builder"),
    ("extras-not-a-list", "    series: []\n", "    series: []\n    extras: b12x\n",
     "extras:", 1, "extras must be a list of strings"),
    ("pins-a-range", "    series: []\n", "    series: []\n    pins: [torch>=2.14]\n",
     "torch>=2.14", 1, "'torch>=2.14' is not a valid name in pins"),
    ("null-key", "  local:\n", "  ~:\n", "~:", 1, "key None is not a string"),
    ("capabilities-misspelt-key", "    series: []\n",
     "    series: []\n    capabilities: {dcp_size: [1]}\n", "capabilities:", 1,
     "unknown key 'dcp_size' in capabilities (did you mean 'dcp_sizes'?)"),
    ("capabilities-misspelt-because", "    series: []\n",
     "    series: []\n    capabilities:\n      because:\n        images_under_dpc: no\n",
     "images_under_dpc:", 1, "did you mean 'images_under_dcp'?"),
    ("capabilities-not-a-mapping", "    series: []\n", "    series: []\n    capabilities: [1]\n",
     "capabilities:", 1, "capabilities must be a mapping"),
    ("capabilities-dcp-size-3", "    series: []\n",
     "    series: []\n    capabilities:\n      dcp_sizes: [1, 3]\n", "dcp_sizes:", 1,
     "dcp_sizes must list DCP sizes from 1, 2, 4, 8, 1 among them"),
    ("capabilities-dcp-without-1", "    series: []\n",
     "    series: []\n    capabilities:\n      dcp_sizes: [2]\n", "dcp_sizes:", 1,
     "1 among them"),
    ("capabilities-flag-a-string", "    series: []\n",
     "    series: []\n    capabilities:\n      images_under_dcp: \"no\"\n", "images_under_dcp:",
     1, "capabilities images_under_dcp must be true or false"),
    ("capabilities-empty-reason", "    series: []\n",
     "    series: []\n    capabilities:\n      because: {ckv_gather: \"\"}\n", "because:", 1,
     "saying why the image cannot do more"),
    ("tag-named-a-path", "  custom:\n", "  ..:\n", "..:", 1,
     "tag name '..' is not an image tag"),
    ("capabilities-speculative-path", "    series: []\n",
     "    series: []\n    capabilities:\n      speculative: [../x]\n", "../x", 1,
     "not a valid name in speculative"),
]


@pytest.mark.parametrize(("old", "new", "needle", "occurrence", "fragment"),
                         [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_bad_input_names_file_and_line(tmp_path: Path, old: str, new: str, needle: str,
                                       occurrence: int, fragment: str) -> None:
    text = edit(VALID, old, new)
    error, path = load_error(tmp_path, text)
    line = line_of(text, needle, occurrence)
    assert error.message.startswith(f"{path}:{line}: "), error.message
    assert fragment in str(error)
    assert error.remedy  # each error names what to do
    assert len(str(error).splitlines()) <= 2


def test_a_section_of_the_wrong_shape_names_its_line(tmp_path: Path) -> None:
    text = replace_section(VALID, "tags", "tags: [a, b]\n")
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:{line_of(text, 'tags: [a, b]')}: "), error.message
    assert "tags must be a mapping, not a list" in error.message


def test_missing_defaults_key_points_into_the_defaults_block(tmp_path: Path) -> None:
    text = edit(VALID, "  builder: devel\n", "")
    error, path = load_error(tmp_path, text)
    assert "defaults lacks the key 'builder'" in error.message
    # the defaults mapping: its `defaults:` line or its first key
    lines = {line_of(text, "defaults:"), line_of(text, "repository:")}
    assert any(error.message.startswith(f"{path}:{n}: ") for n in lines), error.message


@pytest.mark.parametrize("key", ["repository", "platform", "cuda_arch", "builder", "runtime"])
def test_every_defaults_key_is_required(tmp_path: Path, key: str) -> None:
    kept = [line for line in VALID.splitlines(keepends=True)
            if not line.startswith(f"  {key}:")]
    error, path = load_error(tmp_path, "".join(kept))
    assert error.message.startswith(f"{path}:")
    assert f"lacks the key {key!r}" in error.message


@pytest.mark.parametrize("key", ["schema", "defaults", "bases", "upstreams", "tags"])
def test_every_top_level_key_is_required(tmp_path: Path, key: str) -> None:
    text = replace_section(VALID, key, "")
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:{first_key_line(text)}: "), error.message
    assert f"lacks the key {key!r}" in error.message


def test_invalid_yaml_names_the_line_of_the_problem(tmp_path: Path) -> None:
    text = VALID + '  broken:\n    upstream: "unterminated\n'
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:")
    assert "invalid YAML" in error.message
    reported = int(error.message[len(str(path)) + 1:].split(":", 1)[0])
    assert reported >= line_of(text, "unterminated")


@pytest.mark.parametrize(("data", "byte"), [("schema: 1\n".encode("utf-16"), "0xff"),
                                             (b"schema: 1\n\x89PNG\r\n", "0x89")])
def test_a_file_that_is_not_utf_8_says_so(tmp_path: Path, data: bytes, byte: str) -> None:
    path = tmp_path / "versions.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        config_mod.load(path)
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{path}: not UTF-8 text (byte {byte} at offset ")
    assert "UTF-8" in info.value.remedy


def test_an_alias_bomb_is_refused_not_expanded(tmp_path: Path) -> None:
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]'] + [
        f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 9)]
    error, path = load_error(tmp_path, "\n".join(levels) + "\n")  # 10^9 values expanded
    assert error.message.startswith(f"{path}:")
    assert "YAML aliases expand the file past 100000 values" in error.message


def test_an_alias_inside_itself_is_refused(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, "schema: 1\nloop: &loop [1, *loop]\n")
    assert error.message == f"{path}:2: a YAML alias here contains itself"


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_file_is_an_error_at_line_1(tmp_path: Path, text: str) -> None:
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:1: ")
    assert "empty" in error.message
    assert "schema: 1" in error.remedy


def test_a_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, "- schema\n- 1\n")
    assert error.message.startswith(f"{path}:1: ")
    assert "must be a mapping, not a list" in error.message


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config_mod.load(tmp_path / "nope.yaml")
    assert info.value.exit_code == 2
    assert "nope.yaml" in info.value.message
    assert "cannot read" in info.value.message


def test_env_error_in_the_parent_names_the_parent_line(tmp_path: Path) -> None:
    text = edit(VALID, 'VLLM_DSV4_CKV_GATHER: "1"', "VLLM_DSV4_CKV_GATHER: 1")
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:{line_of(text, 'VLLM_DSV4_CKV_GATHER: 1')}: ")


def test_inherited_env_error_names_the_line_that_has_it(tmp_path: Path) -> None:
    # the child comes first, so it is checked before its parent
    text = edit(VALID, "tags:\n", "tags:\n  child:\n    extends: bad\n    env: {A: \"1\"}\n")
    text += "  bad:\n    upstream: fork\n    series: []\n    env:\n      B: 2\n"
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:{line_of(text, 'B: 2')}: "), error.message


@pytest.mark.parametrize(("section", "new", "needle"), [
    ("bases", "bases:\n  devel:\n", "devel:"),
    ("bases", "bases: 5\n", "bases: 5"),
    ("defaults", "defaults:\n", "defaults:"),
])
def test_an_empty_section_names_its_line(tmp_path: Path, section: str, new: str,
                                         needle: str) -> None:
    text = replace_section(VALID, section, new)
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:{line_of(text, needle)}: "), error.message


def test_env_that_is_not_a_mapping_names_the_env_line(tmp_path: Path) -> None:
    text = edit(VALID, "    env:\n      VLLM_DSV4_CKV_GATHER: \"1\"\n      VISION_MHC: \"1\"\n",
                "    env: 5\n")
    error, path = load_error(tmp_path, text)
    assert "env must be a mapping" in error.message
    assert error.message.startswith(f"{path}:{line_of(text, 'env: 5')}: "), error.message


def test_extends_unknown_never_suggests_the_tag_itself(tmp_path: Path) -> None:
    text = edit(VALID, "extends: production-3.72-vision", "extends: production-3.27-vision")
    error, _ = load_error(tmp_path, text)
    assert "did you mean 'production-3.73-vision'" not in error.message, error.message


@pytest.mark.parametrize("value", ["true", "1.0"])
def test_schema_must_be_the_integer_1(tmp_path: Path, value: str) -> None:
    error, path = load_error(tmp_path, edit(VALID, "schema: 1", f"schema: {value}"))
    assert error.message.startswith(f"{path}:{line_of(VALID, 'schema: 1')}: ")


def test_another_schema_is_reported_before_its_keys(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, "schema: 2\nrecipes: {}\n")
    assert error.message.startswith(f"{path}:1: schema 2 is not supported"), error.message


# --- the real files -----------------------------------------------------------------------


def test_a_kernel_seed_and_build_requirements_load_and_are_inherited(tmp_path: Path) -> None:
    wheel = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    text = VALID.replace(
        "    series: [dcp-dspark, ckv-gather, vision]\n",
        f"    series: [dcp-dspark, ckv-gather, vision]\n    kernels: {{wheel: {wheel}, "
        f"sha256: {SDIST}}}\n").replace(
        f"sha256: {SDIST}}}\n  fork:",
        f"sha256: {SDIST}}}\n    build_requirements: requirements/build/cuda.txt\n  fork:")
    (tmp_path / "versions.yaml").write_text(text)
    loaded = config_mod.load(tmp_path / "versions.yaml")
    seed = loaded.tag("production-3.73-vision").kernels
    assert seed == config_mod.KernelSeed(wheel=wheel, sha256=SDIST)
    assert seed.project == "vllm"
    assert loaded.tag("custom").kernels is None
    assert loaded.upstreams["release"].build_requirements == "requirements/build/cuda.txt"
    assert loaded.upstreams["fork"].build_requirements is None


def test_capabilities_load_with_cautious_defaults_and_are_inherited(tmp_path: Path) -> None:
    text = edit(VALID, "    series: [dcp-dspark, ckv-gather, vision]\n",
                "    series: [dcp-dspark, ckv-gather, vision]\n    capabilities:\n"
                "      dcp_sizes: [2, 1, 2]\n      speculative: [dspark]\n"
                "      because:\n        images_under_dcp: >-\n          no gather\n"
                "          here\n")
    loaded = config_mod.load(write_config(tmp_path, text))
    declared = loaded.tag("production-3.73-vision").capabilities
    assert declared == config_mod.Capabilities(
        dcp_sizes=(1, 2), speculative=("dspark",),
        because=(("images_under_dcp", "no gather here"),))
    assert declared.as_dict() == {
        "dcp_sizes": [1, 2], "images_under_dcp": False, "prefix_cache_under_dcp": False,
        "speculative": ["dspark"], "ckv_gather": False, "vision_mhc": False,
        "because": {"images_under_dcp": "no gather here"}}
    assert loaded.tag("custom").capabilities is None


# The repository's versions.yaml is checked for what must hold whatever its values: a new
# release, pin or tag changes values, a mistake breaks one of these.
SERIES_ORDER = ("dcp-dspark", "prefix-cache", "ckv-gather", "vision")  # production-series.md
SPARK_ARCH, SPARK_PLATFORM = "sm_121a", ARM64  # the GB10 production images are for
PIN = re.compile(r"[\w.-]+==\d[\w.+!-]*")  # name==version
CUDA_IMAGE = re.compile(r"nvidia/cuda:(\d+\.\d+)\.")  # its CUDA release: 13.0
CUDA_TOOLCHAIN = re.compile(r"nvidia-(cuda-.+|nvvm)")  # wheels versioned as their CUDA release
IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # Docker's grammar of a tag
REPOSITORY = re.compile(r"([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*"
                        r"(/[a-z0-9]+([._-][a-z0-9]+)*)*")


@pytest.fixture(scope="module")
def shipped() -> Config:
    return config_mod.load(REPO / "versions.yaml")


def production(loaded: Config) -> list[Tag]:
    return [tag for name, tag in loaded.tags.items() if name.startswith("production-")]


def test_the_repository_versions_yaml_loads_and_its_production_tags_resolve(
        shipped: Config) -> None:
    assert shipped.root == REPO
    tags = production(shipped)
    assert len(tags) >= 2
    raw = yaml.safe_load((REPO / "versions.yaml").read_text())["tags"]
    for tag in tags:
        # found by the short name the docs and commands use: 3.73-vision
        assert shipped.tag(tag.name.removeprefix("production-")) is tag
        parent = raw[tag.name].get("extends")
        assert parent is None or parent.startswith("production-"), tag.name


def test_every_series_is_a_folder_of_patches_in_the_documented_order(shipped: Config) -> None:
    for tag in shipped.tags.values():
        for series in tag.series:
            assert (shipped.patches_dir / series / "series").is_file(), (tag.name, series)
        known = [series for series in tag.series if series in SERIES_ORDER]
        assert known == sorted(known, key=SERIES_ORDER.index), tag.name
    for tag in production(shipped):
        assert tag.series and set(tag.series) <= set(SERIES_ORDER), tag.name


def test_every_upstream_is_pinned_and_production_tags_build_from_a_pinned_one(
        shipped: Config) -> None:
    for upstream in shipped.upstreams.values():
        if isinstance(upstream, PypiUpstream):
            assert upstream.version and re.fullmatch("[0-9a-f]{64}", upstream.sha256)
        elif isinstance(upstream, GitUpstream):
            assert re.fullmatch("[0-9a-f]{40}", upstream.commit), upstream.key
        else:  # a tree of this repository
            assert upstream.path.is_dir() and upstream.path.is_relative_to(REPO), upstream.key
    for tag in production(shipped):
        assert not isinstance(tag.upstream, DirUpstream), tag.name
        assert tag.pins.items and all(PIN.fullmatch(pin) for pin in tag.pins.items), tag.name


def test_the_cuda_toolchain_pins_are_of_the_cuda_release_of_the_bases(shipped: Config) -> None:
    """A toolchain of another CUDA release makes PTX the image's driver cannot load."""
    for tag in production(shipped):
        images = [base.image for base in (tag.builder, tag.runtime) if isinstance(base, ImageBase)]
        releases = {found.group(1) for image in images if (found := CUDA_IMAGE.search(image))}
        for pin in tag.pins.items:
            name, version = pin.split("==")
            if releases and CUDA_TOOLCHAIN.fullmatch(name):
                assert {".".join(version.split(".")[:2])} == releases, (tag.name, pin)


def test_production_tags_are_built_for_the_spark_with_bases_that_can_be_locked(
        shipped: Config) -> None:
    for tag in production(shipped):
        assert (tag.sm_arch, tag.platform) == (SPARK_ARCH, SPARK_PLATFORM), tag.name
        assert tag.builder.python and tag.runtime.python, tag.name  # the locks' Python


def test_every_image_is_named_its_jit_targets_its_kernels_arch_and_its_smoke_suite_exists(
        shipped: Config) -> None:
    for tag in shipped.tags.values():
        assert REPOSITORY.fullmatch(tag.repository) and IMAGE_TAG.fullmatch(tag.name), tag.name
        assert dict(tag.env).get("CUTE_DSL_ARCH", tag.sm_arch) == tag.sm_arch, tag.name
        assert tag.smoke in sample_envs.known(shipped), tag.name
    assert len({tag.repository for tag in production(shipped)}) == 1  # one image, its releases


def test_a_kernel_seed_is_the_upstream_release_s_wheel_for_the_tag_s_platform(
        shipped: Config) -> None:
    machine = {"linux/arm64": "aarch64", "linux/amd64": "x86_64"}
    seeds = [(tag, tag.kernels) for tag in shipped.tags.values() if tag.kernels is not None]
    assert seeds
    for tag, seed in seeds:
        assert isinstance(tag.upstream, PypiUpstream), tag.name
        project, version, _, _ = parse_wheel_filename(seed.wheel)
        assert (project, str(version)) == (tag.upstream.name, tag.upstream.version), tag.name
        assert seed.wheel.endswith(f"_{machine[str(tag.platform)]}.whl"), tag.name


def test_production_images_declare_what_they_can_run_and_bake_nothing_beyond_it(
        shipped: Config) -> None:
    for tag in production(shipped):
        assert tag.capabilities is not None, tag.name  # else the preflight checks nothing
    for tag in shipped.tags.values():
        declared, env = tag.capabilities, dict(tag.env)
        if declared is None:
            continue
        if not declared.ckv_gather:
            assert not {"VLLM_DSV4_CKV_GATHER", "VLLM_DSV4_CKV_ALLOW_IMAGES"} & set(env), tag.name
        if not declared.vision_mhc:
            assert "VISION_MHC" not in env, tag.name
        if env.get("VLLM_ENABLE_DSPARK") == "1":
            assert "dspark" in declared.speculative, tag.name
        # what the preflight refuses, it refuses saying why
        refused = {key for key, value in declared.as_dict().items() if value is False}
        if declared.dcp_sizes == (1,):
            refused.add("dcp_sizes")
        assert refused <= set(dict(declared.because)), tag.name


def test_the_fixture_versions_yaml_loads() -> None:
    path = REPO / "tests" / "data" / "versions.yaml"
    loaded = config_mod.load(path)
    fixture = loaded.tag("fixture")
    plain = loaded.tag("fixture-plain")
    assert fixture.upstream == DirUpstream(key="tinykern", path=path.parent / "upstream",
                                           source_date_epoch=1735689600)
    assert fixture.series == ("tinykern",)
    assert plain.series == ()
    assert plain.env == fixture.env
    assert dict(fixture.env)["SPARKBAKE_NOTE"] == 'quotes " and $HOME stay literal'
    assert isinstance(fixture.runtime, DebootstrapBase)


# --- source_date_epoch (SOURCE_DATE_EPOCH of an upstream) ---------------------------------


def with_date(text: str, spec: str, value: str) -> str:
    """text with `source_date_epoch: value` added below the upstream line `spec`."""
    return edit(text, f"    {spec}\n", f"    {spec}\n    source_date_epoch: {value}\n")


def test_source_date_epoch_is_read_on_every_kind_of_upstream(tmp_path: Path) -> None:
    text = with_date(VALID, "dir: upstream", "1735689600")
    text = with_date(text, f"pypi: {{name: vllm, version: 0.33.0, sha256: {SDIST}}}", "315532800")
    text = with_date(text, f'git: {{url: "https://example.invalid/vllm.git", '
                     f'commit: {FORK_COMMIT}}}', "1700000000")
    loaded = config_mod.load(write_config(tmp_path, text))
    assert loaded.tag("local").upstream.source_date_epoch == 1735689600
    assert loaded.tag("3.72-vision").upstream.source_date_epoch == 315532800
    assert loaded.tag("custom").upstream.source_date_epoch == 1700000000
    assert loaded.tag("from-git").upstream.source_date_epoch is None  # git: the commit time


@pytest.mark.parametrize(("value", "fragment"), [
    ('"1735689600"', "source_date_epoch '1735689600' is not a Unix time"),
    ("true", "source_date_epoch True is not a Unix time"),
    ("1735689600.5", "source_date_epoch 1735689600.5 is not a Unix time"),
    ("315532799", "between 1980 and 2100"),
    ("4102444800", "between 1980 and 2100"),
])
def test_a_bad_source_date_epoch_names_its_line(tmp_path: Path, value: str,
                                                fragment: str) -> None:
    text = with_date(VALID, "dir: upstream", value)
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:{line_of(text, 'source_date_epoch')}: ")
    assert fragment in error.message
    assert "source_date_epoch: 1735689600" in error.remedy


def test_a_misspelt_source_date_epoch_is_suggested_and_alone_it_is_no_upstream(
        tmp_path: Path) -> None:
    text = edit(VALID, "    dir: upstream\n", "    dir: upstream\n    source_date_epoc: 1\n")
    error, _ = load_error(tmp_path, text)
    assert "did you mean 'source_date_epoch'?" in error.message
    text = edit(VALID, "    dir: upstream\n", "    source_date_epoch: 1735689600\n")
    error, _ = load_error(tmp_path, text)
    assert "needs exactly one of pypi, git, dir" in error.message


def test_a_config_with_a_work_folder_keeps_build_and_wheels_there(loaded: Config,
                                                                  tmp_path: Path) -> None:
    moved = dataclasses.replace(loaded, work=tmp_path / "scratch")
    assert (moved.build_dir, moved.wheels_dir) == (tmp_path / "scratch" / "build",
                                                   tmp_path / "scratch" / "wheels")
    assert moved.patches_dir == loaded.patches_dir and moved.root == loaded.root


# --- cache: the builders' compile cache ---------------------------------------------------


def test_a_redis_compile_cache_is_given_to_every_tag(tmp_path: Path) -> None:
    text = VALID + "cache:\n  redis: redis://:secret@cache.lan:6379/2\n"
    loaded = config_mod.load(write_config(tmp_path, text))
    assert {t.cache.redis for t in loaded.tags.values()} == {"redis://:secret@cache.lan:6379/2"}
    assert config_mod.load(write_config(tmp_path, VALID)).tag("3.72-vision").cache.redis is None


@pytest.mark.parametrize(("block", "needle", "fragment"), [
    ("cache:\n  redis: http://cache.lan:6379\n", "redis:", "is not a Redis URL"),
    ("cache:\n  redis: redis://cache lan:6379\n", "redis:", "is not a Redis URL"),
    ("cache:\n  redis: redis://cache.lan:port\n", "redis:", "is not a Redis URL"),
    ("cache:\n  redis: 6379\n", "redis:", "redis must be a string"),
    ("cache:\n  rediss: redis://cache.lan\n", "rediss:", "did you mean 'redis'?"),
    ("cache: redis://cache.lan\n", "cache:", "cache"),
    ("cashe:\n  redis: redis://cache.lan\n", "cashe:", "did you mean 'cache'?"),
])
def test_a_bad_compile_cache_names_its_line(tmp_path: Path, block: str, needle: str,
                                            fragment: str) -> None:
    text = VALID + block
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:{line_of(text, needle)}: "), error.message
    assert fragment in error.message
    assert error.remedy


@pytest.mark.parametrize(("added", "detail"), [
    ("  broken:\n\tplatform: linux/arm64\n", "found character '\\t' that cannot start"),
    ("  broken: *nowhere\n", "found undefined alias 'nowhere'"),
])
def test_invalid_yaml_says_what_it_found(tmp_path: Path, added: str, detail: str) -> None:
    """libyaml parses the file, but a file it refuses gets PyYAML's own message, which
    names the character or the alias."""
    text = VALID + added
    error, path = load_error(tmp_path, text)
    assert error.message.startswith(f"{path}:{line_of(text, added.splitlines()[-1])}: "
                                    "invalid YAML"), error.message
    assert detail in error.message, error.message
