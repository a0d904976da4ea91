"""preflight.json's backend lists against the pinned vLLM 0.33.0 tree's own registries (the
smoke check vllm-serve-args compares them again in the image)."""

from __future__ import annotations

import ast

from sparkbake.nodes import preflight

from .conftest import Trees


def test_the_attention_backends_are_those_of_vllm_0_33_0s_registry(trees: Trees) -> None:
    source = ast.parse((trees.new / "vllm/v1/attention/backends/registry.py").read_text())
    [enum] = [n for n in source.body if isinstance(n, ast.ClassDef)
              and n.name == "AttentionBackendEnum"]
    members = [t.id for a in enum.body if isinstance(a, ast.Assign)
               for t in a.targets if isinstance(t, ast.Name)]
    rules = preflight.entrypoint().checks.load_rules()
    assert rules["backends"]["vllm"]["0.33.0"]["attention"] == members
