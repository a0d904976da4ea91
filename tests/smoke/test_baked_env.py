"""Nothing inert is baked: each variable a tag bakes is made into a flag by the entrypoint or
read by the patched vLLM tree (tests/smoke/realvllm.py), or by a package the runtime lock
installs, named here with where it reads it."""

from __future__ import annotations

from pathlib import Path

from sparkbake.config import versions
from sparkbake.nodes import preflight
from tests.smoke.realvllm import REPO

# read outside vLLM's tree: the variable -> its reader in the image
READ_ELSEWHERE = {"CUTE_DSL_ARCH": "nvidia-cutlass-dsl (CuTe DSL's JIT target)"}


def read_by_tree(tree: Path, name: str) -> bool:
    return any(name in source.read_text(encoding="utf-8", errors="replace")
               for source in (tree / "vllm").rglob("*.py"))


def test_every_baked_variable_of_a_vllm_tag_is_read(real_vllm: tuple[Path, Path]) -> None:
    _, tree = real_vllm
    loaded = versions.load(REPO / "versions.yaml")
    flags = set(preflight.entrypoint().VARIABLES)
    baked = {name for tag in loaded.tags.values() if tag.upstream.runtime_requirements
             for name, _ in tag.env}
    unread = sorted(name for name in baked - flags - set(READ_ELSEWHERE)
                    if not read_by_tree(tree, name))
    assert baked > flags & baked  # some are read by the tree, not only flags
    assert unread == []


def test_a_variable_nothing_reads_is_found(real_vllm: tuple[Path, Path]) -> None:
    _, tree = real_vllm
    assert read_by_tree(tree, "VLLM_NO_USAGE_STATS")
    assert not read_by_tree(tree, "VLLM_ENABLE_MTP")  # the reference sets it; nothing reads it
