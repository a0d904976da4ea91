"""What publish records of a release besides its image: the locks of the repository's own
tags, and vLLM's verdicts on their backends from images/backend-verdicts.json."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sparkbake import resources
from sparkbake.config import versions
from sparkbake.hashing import file_sha256
from sparkbake.lock import pins
from sparkbake.nodes import preflight
from sparkbake.publish import shipped_with
from tests.conftest import versions_yaml

ROOT = Path(__file__).parents[2]
REPO_CONFIG = versions.load(ROOT / "versions.yaml")
ON_033 = REPO_CONFIG.tag("production-3.73-vision")
ON_034 = REPO_CONFIG.tag("production-3.73-vision-vllm0.34")
SELECTED = {"attention": "FLASHINFER_MLA_SPARSE_DSV4", "moe": "b12x", "linear": "deep_gemm"}


def test_the_locks_are_each_upstreams_by_path_and_sha256() -> None:
    on_033 = shipped_with.locks(REPO_CONFIG, ON_033)
    on_034 = shipped_with.locks(REPO_CONFIG, ON_034)
    assert on_033["builder"]["path"] == "locks/cuda-devel.vllm-0.33.0.arm64.txt"
    assert on_034["runtime"]["path"] == "locks/runtime/cuda-runtime.vllm-0.34.0.arm64.txt"
    for lock in [*on_033.values(), *on_034.values()]:
        assert lock["sha256"] == file_sha256(ROOT / lock["path"])
    assert set(on_033) <= {"builder", "runtime", "sources"}
    assert "packages" not in on_033["builder"]


def test_the_runtime_lock_is_recorded_with_each_packages_version() -> None:
    runtime = shipped_with.locks(REPO_CONFIG, ON_033)["runtime"]
    listed = pins.packages(ROOT / runtime["path"])
    recorded = runtime.get("packages") or {}
    assert recorded.keys() == listed.keys()
    assert listed["torch"].startswith(f"torch=={recorded['torch']} sha256:")


def test_the_verdicts_are_the_tables_for_the_backends_the_env_selects() -> None:
    table = json.loads(resources.path("backend-verdicts.json").read_text())
    runs = table["0.33.0"]["12.1a"]["deepseek_v4"]
    assert shipped_with.backend_verdicts(ON_033) == {
        "vllm": "0.33.0", "cuda_arch": "12.1a", "model": "deepseek_v4", "listed": True,
        "backends": {kind: {name: runs[kind][name]} for kind, name in SELECTED.items()}}


def test_a_vllm_the_table_has_no_verdicts_of_is_recorded_so() -> None:
    runs = json.loads(resources.path("backend-verdicts.json").read_text())
    runs.pop("0.34.0", None)  # as it was when vLLM 0.34.0 came
    assert shipped_with.backend_verdicts(ON_034, runs) == {
        "vllm": "0.34.0", "cuda_arch": "12.1a", "model": "deepseek_v4", "listed": False,
        "backends": {kind: {name: None} for kind, name in SELECTED.items()}}


def test_a_tag_without_vllm_model_or_backends_records_none(tmp_path: Path) -> None:
    (tmp_path / "upstream").mkdir()
    plain = "  plain: {upstream: tree, series: []}\n"
    (tmp_path / "versions.yaml").write_text(versions_yaml(tags=plain))
    config = versions.load(tmp_path / "versions.yaml")
    assert shipped_with.locks(config, config.tag("plain")) == {}
    assert shipped_with.backend_verdicts(config.tag("plain")) == {
        "vllm": None, "cuda_arch": "12.1a", "model": None, "listed": False, "backends": {}}


def test_the_names_are_spelled_by_the_module_the_image_s_preflight_loads() -> None:
    naming = resources.module("backend_naming")
    assert preflight.entrypoint().checks.backend_naming is naming  # one module, not a copy
    assert naming.verdict_name("attention", "flashinfer_mla_sparse_dsv4") == \
        SELECTED["attention"]
    assert naming.verdict_name("attention", "auto") == "auto"
    assert naming.verdict_name("moe", "B12X") == "b12x"
    assert naming.verdict_name("linear", "Deep-GEMM") == "deep_gemm"
    chosen = replace(ON_033, env=(("ATTENTION_BACKEND", "auto"), ("MOE_BACKEND", "B12X")))
    assert shipped_with.backend_verdicts(chosen)["backends"] == {
        "attention": {"auto": ""}, "moe": {"b12x": ""}}
