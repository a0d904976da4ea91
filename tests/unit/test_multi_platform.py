"""Multi-platform tags in versions.yaml: one tag per platform, the release over them, what
commands run for each, and every mistake at its file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.__main__ import main
from sparkbake.config import versions as config_mod
from sparkbake.errors import ConfigError
from tests.conftest import versions_yaml

TAGS = """\
  spark:
    upstream: tree
    series: []
    platforms:
      linux/arm64: "12.1a"
      linux/amd64: "12.0a"
  spark-next:
    extends: spark
    env: {NEXT: "1"}
  single:
    upstream: tree
    series: []
"""


def write(tmp_path: Path, tags: str = TAGS) -> Path:
    (tmp_path / "upstream").mkdir(exist_ok=True)
    path = tmp_path / "versions.yaml"
    path.write_text(versions_yaml(tags=tags, platform="linux/amd64"))
    return path


def error_of(tmp_path: Path, tags: str) -> str:
    with pytest.raises(ConfigError) as raised:
        config_mod.load(write(tmp_path, tags))
    return str(raised.value)


def test_a_tag_with_platforms_is_one_tag_per_platform_under_its_release(
        tmp_path: Path) -> None:
    config = config_mod.load(write(tmp_path))
    assert config.releases == {"spark": ("spark-arm64", "spark-amd64"),
                               "spark-next": ("spark-next-arm64", "spark-next-amd64")}
    arm = config.tags["spark-arm64"]
    assert (str(arm.platform), arm.cuda_arch, arm.sm_arch, arm.release) == (
        "linux/arm64", "12.1a", "sm_121a", "spark")
    assert config.tags["spark-amd64"].cuda_arch == "12.0a"
    inherited = config.tags["spark-next-amd64"]
    assert (inherited.release, dict(inherited.env)) == ("spark-next", {"NEXT": "1"})
    assert "spark" not in config.tags and config.tags["single"].release is None


def test_commands_run_for_each_platform_and_a_one_platform_command_names_them(
        tmp_path: Path) -> None:
    config = config_mod.load(write(tmp_path))
    assert [t.name for t in config.targets("spark")] == ["spark-arm64", "spark-amd64"]
    assert [t.name for t in config.targets("next")] == ["spark-next-arm64", "spark-next-amd64"]
    assert [t.name for t in config.targets("spark-arm64")] == ["spark-arm64"]
    assert [t.name for t in config.targets("single")] == ["single"]
    with pytest.raises(ConfigError, match="'spark' is a multi-platform tag") as raised:
        config.tag("spark")
    assert raised.value.remedy == "name one of: spark-arm64, spark-amd64"


def test_plan_shows_each_platform(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    assert main(["--config", str(path), "plan", "spark"]) == 0
    captured = capsys.readouterr()
    assert "spark: linux/arm64 (spark-arm64)" in captured.err
    assert "spark: linux/amd64 (spark-amd64)" in captured.err
    assert captured.out.count("sm_121a") >= 1 and captured.out.count("sm_120a") >= 1


def test_platform_and_platforms_together_are_refused_at_the_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, TAGS.replace("    series: []\n    platforms:",
                                              "    series: []\n    platform: linux/arm64\n"
                                              "    platforms:", 1))
    assert message.startswith(f"{tmp_path / 'versions.yaml'}:")
    assert "tag 'spark' has `platforms`" in message and "and `platform`" in message


@pytest.mark.parametrize(("entry", "shown"), [
    ('linux/arm64: "12.1"', None),
    ('linux/arm64: "twelve"', "linux/arm64: 'twelve'"),
    ('windows/amd64: "12.0a"', "windows/amd64"),
    ("linux/arm64: 12.1", "linux/arm64: 12.1"),
])
def test_a_bad_platform_entry_is_refused_at_its_line(tmp_path: Path, entry: str,
                                                      shown: str | None) -> None:
    tags = TAGS.replace('      linux/arm64: "12.1a"', f"      {entry}", 1)
    if shown is None:  # a valid entry: it loads
        config_mod.load(write(tmp_path, tags))
        return
    message = error_of(tmp_path, tags)
    assert "platforms wants <linux/ARCH>: <CUDA arch>" in message and shown in message


def test_no_platform_and_a_name_taken_are_refused(tmp_path: Path) -> None:
    assert "names no platform" in error_of(
        tmp_path, "  spark:\n    upstream: tree\n    series: []\n    platforms: {}\n")
    taken = TAGS + "  spark-arm64:\n    upstream: tree\n    series: []\n"
    assert "tag 'spark-arm64' is also the linux/arm64 tag of the multi-platform tag 'spark'" \
        in error_of(tmp_path, taken)


def test_tags_name_the_release_and_a_platform_is_published_when_its_record_holds_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    config = config_mod.load(path)
    arm = planning.make(config, config.tags["spark-arm64"])
    record = {"tag": "spark", "inputs": "x", "platforms": [
        {"tag": "spark-arm64", "inputs": arm.inputs}, {"tag": "spark-amd64", "inputs": "old"}]}
    (tmp_path / "build" / "releases").mkdir(parents=True)
    (tmp_path / "build" / "releases" / "spark.json").write_text(json.dumps(record))
    assert main(["--config", str(path), "tags", "--json"]) == 0
    rows = {row["tag"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["spark-arm64"]["release"] == "spark"
    assert (rows["spark-arm64"]["published"], rows["spark-amd64"]["published"]) == ("yes", "no")
    assert rows["single"]["release"] is None
