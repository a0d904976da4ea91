"""The real vLLM venvs, made once for every in-image check test that needs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.smoke.realvllm import VLLM_034, patched_vllm


@pytest.fixture(scope="session")
def real_vllm() -> tuple[Path, Path]:
    """The patch-tests venv's python and the patched tree (made here if not cached)."""
    return patched_vllm()


@pytest.fixture(scope="session")
def real_vllm_034() -> tuple[Path, Path]:
    """vLLM 0.34.0's: production-3.73-vision-vllm0.34's patch-tests venv and patched tree."""
    return patched_vllm(VLLM_034)
