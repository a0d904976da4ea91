"""The real vLLM venv, made once for every in-image check test that needs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.smoke.realvllm import patched_vllm


@pytest.fixture(scope="session")
def real_vllm() -> tuple[Path, Path]:
    """The patch-tests venv's python and the patched tree (made here if not cached)."""
    return patched_vllm()
