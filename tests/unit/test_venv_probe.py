"""Whether a runtime base has python3 -m venv is asked of a container once per image id, and
kept in the host's cache; an answer kept damaged, or a cache that cannot be written, costs a
probe, never a wrong answer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkbake import bases
from sparkbake.bases import BaseImage
from tests.conftest import fake_engine

BASE = BaseImage("debian", "sparkbake-base/debian:abc", "sha256:" + "1" * 64)


class Engine:
    """The engine as _has_venv sees it: image ids by ref, and the probes it ran."""

    def __init__(self, exit_code: int) -> None:
        self.exit_code = exit_code
        self.probes = 0
        self.ids = {BASE.ref: "sha256:" + "a" * 64}
        self.images = SimpleNamespace(get=lambda ref: SimpleNamespace(id=self.ids[ref]))

    def run(self, *_: Any, **__: Any) -> SimpleNamespace:
        self.probes += 1
        return SimpleNamespace(exit_code=self.exit_code)


@pytest.fixture(params=[0, 1], ids=["has-venv", "no-venv"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Engine:
    fake = Engine(request.param)
    monkeypatch.setattr(bases, "run_container", fake.run)
    return fake


def has_venv(engine: Engine, probes: Path) -> bool:
    return bases._has_venv(fake_engine(engine), BASE, probes)


def test_the_answer_is_probed_once_per_image_id(engine: Engine, tmp_path: Path) -> None:
    expected = engine.exit_code == 0
    assert [has_venv(engine, tmp_path) for _ in range(3)] == [expected] * 3
    assert engine.probes == 1
    kept = tmp_path / ("sha256-" + "a" * 64)
    assert kept.read_text() == ("yes\n" if expected else "no\n")
    engine.ids[BASE.ref] = "sha256:" + "b" * 64  # the ref now names another image
    assert has_venv(engine, tmp_path) is expected
    assert engine.probes == 2


def test_a_damaged_answer_is_probed_again(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / ("sha256-" + "a" * 64)).write_text("maybe\n")
    assert has_venv(engine, tmp_path) is (engine.exit_code == 0)
    assert engine.probes == 1
    assert has_venv(engine, tmp_path) is (engine.exit_code == 0)
    assert engine.probes == 1


def test_a_cache_that_cannot_be_written_probes_each_time(engine: Engine,
                                                         tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache folder's path is a file: nothing can be kept under it
    assert [has_venv(engine, blocked) for _ in range(2)] == [engine.exit_code == 0] * 2
    assert engine.probes == 2
