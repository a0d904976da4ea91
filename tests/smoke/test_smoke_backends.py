"""backend-capability's comparison (images/smoke_backends.py) on the committed verdicts: what
the image's vLLM says for 12.1a against what a preflight data file states."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.smoke.image_modules import IMAGES, image_module

VERDICTS = json.loads((IMAGES / "backend-verdicts.json").read_text())


@pytest.fixture(scope="module")
def backends() -> Any:
    return image_module("smoke_backends")


def spark() -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = VERDICTS["0.33.0"]["12.1a"]["deepseek_v4"]
    return table


def test_data_that_accepts_every_known_name_is_stale(backends: Any) -> None:
    """What the preflight did before: any name vLLM knows was accepted."""
    accepting = {kind: dict.fromkeys(names, "") for kind, names in spark().items()}
    problems = backends.stale(spark(), accepting)
    assert [problem.split(":")[0] for problem in problems] == ["attention", "moe", "linear"]
    stale_attention = problems[0].removeprefix("attention: ").split(", ")
    assert "FLASHMLA_SPARSE_DSV4" in stale_attention
    assert "FLASHINFER_MLA_SPARSE_DSV4" not in stale_attention


def test_the_same_verdicts_are_not_stale_and_a_changed_reason_is(backends: Any) -> None:
    assert backends.stale(spark(), spark()) == []
    changed = json.loads(json.dumps(spark()))
    changed["moe"]["b12x"] = "its experts do not run"
    assert backends.stale(spark(), changed) == ["moe: b12x"]
    del changed["linear"]["torch"]
    assert backends.stale(spark(), changed) == ["moe: b12x", "linear: torch"]


def test_the_spark_verdicts_are_the_tags_choice(backends: Any) -> None:
    runs = {kind: sorted(name for name, why in table.items() if not why)
            for kind, table in spark().items()}
    assert runs["attention"] == ["FLASHINFER_MLA_SPARSE_DSV4", "auto"]
    assert "b12x" in runs["moe"]
    # of the linear kernels that run on 12.1, only DeepGEMM's serves the batched wo_a
    assert runs["linear"] == ["auto", "deep_gemm"]
    for name in ("b12x", "cutlass", "triton", "marlin", "humming"):
        assert "attn.wo_a" in spark()["linear"][name], name
