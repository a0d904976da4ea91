"""`sparkbake smoke`'s options: what reaches the stage, and what is refused before it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkbake.__main__ import main
from sparkbake.pipeline import commands
from sparkbake.smoke import checks
from tests.conftest import versions_yaml

CONFIG = versions_yaml(tags="  production-1.0-vision: {upstream: tree, series: []}\n")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    (tmp_path / "upstream").mkdir()
    (tmp_path / "versions.yaml").write_text(CONFIG)
    return tmp_path / "versions.yaml"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, checks.Options]]:
    seen: list[tuple[str, checks.Options]] = []

    def smoke_tag(run: Any, tag: Any, options: checks.Options, **_: Any) -> int:
        seen.append((tag.name, options))
        return 0

    monkeypatch.setattr(commands, "smoke_tag", smoke_tag)
    return seen


def test_the_options_reach_the_stage(config_file: Path, tmp_path: Path,
                                     calls: list[tuple[str, checks.Options]]) -> None:
    assert main(["--config", str(config_file), "smoke", "1.0-vision", "--gpu", "require",
                 "--model", str(tmp_path), "--serve-env", "node.env",
                 "--serve-timeout", "60"]) == 0
    assert calls == [("production-1.0-vision", checks.Options(
        gpu="require", model=tmp_path, serve_env=Path("node.env"), serve_timeout=60.0))]


def test_the_defaults(config_file: Path, calls: list[tuple[str, checks.Options]]) -> None:
    assert main(["--config", str(config_file), "smoke", "1.0-vision"]) == 0
    assert calls == [("production-1.0-vision", checks.Options())]
    assert checks.Options() == checks.Options(gpu="auto", model=None, serve_env=None,
                                              serve_timeout=1800.0)


def test_a_timeout_that_is_no_number_is_a_usage_error(
        config_file: Path, calls: list[tuple[str, checks.Options]],
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "smoke", "x", "--serve-timeout", "soon"]) == 2
    assert calls == []
    err = capsys.readouterr().err
    assert err.startswith("sparkbake: error: argument --serve-timeout: invalid float value")
