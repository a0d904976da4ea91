"""Two clean builds, one wheel, also when the upstream's setup.py compiles and links its CUDA
library in one `nvcc -shared -o lib.so x.cu` step (tests/data/oneshot): with the compile
cache on (sccache launches the step and hands it to nvcc) and off.

nvcc names such a step's intermediates after its process id, so without the builder's nvcc
wrapper two builds differ now and then (pids in a fresh container often repeat). CI builds
one pair per cache mode; `nox -s repro-one-step` builds four more pairs of each.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sparkbake.wheels import container_build
from tests.conftest import Project, copy_project

pytestmark = pytest.mark.docker

UPSTREAM = """\
  oneshot:
    dir: oneshot
    source_date_epoch: 1735689600
"""
TAG = """\
  fixture-oneshot:
    extends: fixture
    upstream: oneshot
    series: []
"""
PAIRS = [pytest.param(cache, pair, id=f"{cache}-{pair}",
                      marks=[pytest.mark.required("repro-one-step")] if pair else [])
         for cache in ("local", "off") for pair in range(5)]


def oneshot_project(root: Path) -> Project:
    """A copy of tests/data with the tag `fixture-oneshot`, built from tests/data/oneshot."""
    project = copy_project(root)
    text = project.config_path.read_text()
    project.config_path.write_text(text.replace("upstreams:\n", "upstreams:\n" + UPSTREAM, 1)
                                   + TAG)
    return project


def build_from_clean(root: Path, cache: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The wheels stage of fixture-oneshot in a fresh project with a fresh host cache."""
    project = oneshot_project(root / "project")
    monkeypatch.setenv("SPARKBAKE_CACHE", str(root / "host-cache"))
    monkeypatch.setenv("SPARKBAKE_COMPILE_CACHE", cache)
    assert project.sparkbake("wheels", "fixture-oneshot") == 0
    folder = project.root / "wheels" / project.plan("fixture-oneshot").wheels_key
    report: dict[str, Any] = json.loads((folder / container_build.REPORT).read_text())
    log = project.log("fixture-oneshot", "wheels")
    step = "+ sccache nvcc -O2 -shared" if cache == "local" else "+ nvcc -O2 -shared"
    assert step in log  # the one step, without -c
    return report


@pytest.mark.parametrize(("cache", "pair"), PAIRS)
def test_two_clean_builds_of_a_one_step_nvcc_library_give_one_wheel(
        cache: str, pair: int, tmp_path: Path, debian_base: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = build_from_clean(tmp_path / "first", cache, monkeypatch)
    time.sleep(2)  # another time, past zip's two-second resolution
    again = build_from_clean(tmp_path / "again" / "elsewhere", cache, monkeypatch)
    assert first["compile_cache"]["backend"] == again["compile_cache"]["backend"] == cache
    kernels = [k for w in first["wheels"] for k in w["kernels"]]
    assert [k["sass"] for k in kernels] == [["sm_121a"]]
    assert [k["sha256"] for w in again["wheels"] for k in w["kernels"]] \
        == [k["sha256"] for k in kernels]
    assert [w["sha256"] for w in again["wheels"]] == [w["sha256"] for w in first["wheels"]]
