"""The plan: series files, chained keys, rendering; no Docker, no network."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from sparkbake import planning, resources
from sparkbake.config import versions as config_mod
from sparkbake.config.versions import Config
from sparkbake.core.stages import Stage
from sparkbake.errors import ConfigError
from sparkbake.fetch import upstream_tree
from sparkbake.pipeline import status
from sparkbake.planning import SeriesInfo, StagePlan
from tests.conftest import plain_console, versions_yaml

STAGES = ["fetch", "patch", "kernels", "wheels", "bake", "smoke", "publish"]

CONFIG = versions_yaml(platform="linux/arm64", tags="""\
  main:
    upstream: tree
    series: [first, second]
    env: {MODE: "a"}
  partial:
    upstream: tree
    series: [first, ghost, phantom]
""")

PATCH_A = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
PATCH_B = "--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-y = 1\n+y = 2\n"


def write_config(folder: Path, text: str) -> Path:
    """Write a versions.yaml into folder and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "versions.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def write_series(patches_dir: Path, name: str, listing: str, files: dict[str, str]) -> Path:
    folder = patches_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "series").write_text(listing)
    for file_name, text in files.items():
        (folder / file_name).write_text(text)
    return folder


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A config folder with an upstream tree and two series."""
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "x.py").write_text("x = 1\n")
    (tmp_path / "upstream" / "y.py").write_text("y = 1\n")
    write_series(tmp_path / "patches", "first", "0001-x.patch\n", {"0001-x.patch": PATCH_A})
    write_series(tmp_path / "patches", "second", "0001-y.patch\n", {"0001-y.patch": PATCH_B})
    write_config(tmp_path, CONFIG)
    return tmp_path


def load(project: Path, text: str = CONFIG) -> Config:
    return config_mod.load(write_config(project, text))


def make(project: Path, tag: str = "main", text: str = CONFIG) -> planning.Plan:
    loaded = load(project, text)
    return planning.make(loaded, loaded.tag(tag))


def keys(plan: planning.Plan) -> dict[str, str]:
    return {"fetch": plan.fetch_key, "patch": plan.patch_key, "wheels": plan.wheels_key,
            "inputs": plan.inputs}


def changed(before: planning.Plan, after: planning.Plan) -> set[str]:
    old, new = keys(before), keys(after)
    return {name for name in old if old[name] != new[name]}


# --- series files -------------------------------------------------------------------------


def test_read_series_skips_comments_and_blank_lines_and_keeps_order(tmp_path: Path) -> None:
    listing = ("# quilt order\n"
               "\n"
               "0002-second.patch\n"
               "   0001-first.patch   # applied after 0002 on purpose\n"
               "\n"
               "# 0003-disabled.patch\n"
               "0010-last.patch\n")
    files = {"0001-first.patch": PATCH_A, "0002-second.patch": PATCH_B,
             "0010-last.patch": "last\n", "0003-disabled.patch": "not listed\n"}
    folder = write_series(tmp_path, "demo", listing, files)
    info = planning.read_series(tmp_path, "demo")
    assert info == SeriesInfo(name="demo", folder=folder, patches=(
        ("0002-second.patch", sha256(PATCH_B)),
        ("0001-first.patch", sha256(PATCH_A)),
        ("0010-last.patch", sha256("last\n")),
    ))


def test_an_empty_series_file_is_an_empty_series(tmp_path: Path) -> None:
    write_series(tmp_path, "empty", "# nothing yet\n\n", {})
    assert planning.read_series(tmp_path, "empty").patches == ()


def test_a_listed_patch_that_is_missing_names_the_series_file_and_line(tmp_path: Path) -> None:
    folder = write_series(tmp_path, "demo", "# header\n0001-a.patch\n\n0002-gone.patch\n",
                          {"0001-a.patch": PATCH_A})
    with pytest.raises(ConfigError) as info:
        planning.read_series(tmp_path, "demo")
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{folder / 'series'}:4: ")
    assert "0002-gone.patch" in info.value.message
    assert info.value.remedy


def test_a_missing_series_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        planning.read_series(tmp_path, "nowhere")
    assert "'nowhere'" in info.value.message
    assert str(tmp_path / "nowhere" / "series") in info.value.message


def test_series_sha256_follows_the_patch_contents(tmp_path: Path) -> None:
    folder = write_series(tmp_path, "demo", "0001-a.patch\n", {"0001-a.patch": PATCH_A})
    first = planning.read_series(tmp_path, "demo").sha256
    assert first == planning.read_series(tmp_path, "demo").sha256
    assert len(first) == 64
    (folder / "0001-a.patch").write_text(PATCH_B)
    assert planning.read_series(tmp_path, "demo").sha256 != first


def test_series_sha256_follows_the_order(tmp_path: Path) -> None:
    files = {"0001-a.patch": PATCH_A, "0002-b.patch": PATCH_B}
    write_series(tmp_path, "demo", "0001-a.patch\n0002-b.patch\n", files)
    forward = planning.read_series(tmp_path, "demo").sha256
    write_series(tmp_path, "demo", "0002-b.patch\n0001-a.patch\n", files)
    assert planning.read_series(tmp_path, "demo").sha256 != forward


# --- make: problems -----------------------------------------------------------------------


def test_missing_series_folders_are_problems_not_exceptions(project: Path) -> None:
    plan = make(project, "partial")
    assert [s.name for s in plan.series] == ["first"]
    assert len(plan.problems) == 2
    assert "'ghost'" in plan.problems[0]
    assert "'phantom'" in plan.problems[1]
    with pytest.raises(ConfigError) as info:
        plan.require_series()
    assert info.value.exit_code == 2
    assert info.value.message == plan.problems[0]


def test_a_missing_patch_inside_a_series_is_a_problem_of_the_plan(project: Path) -> None:
    (project / "patches" / "second" / "0001-y.patch").unlink()
    plan = make(project)
    assert [s.name for s in plan.series] == ["first"]
    assert plan.problems == (
        f"{project / 'patches' / 'second' / 'series'}:1: patch '0001-y.patch' does not exist",)
    with pytest.raises(ConfigError):
        plan.require_series()


def test_a_complete_plan_has_no_problems(project: Path) -> None:
    plan = make(project)
    assert plan.problems == ()
    assert [s.name for s in plan.series] == ["first", "second"]
    plan.require_series()  # does not raise


def test_blocked_plan_keys_differ_from_the_complete_one(project: Path) -> None:
    text = CONFIG.replace("series: [first, ghost, phantom]", "series: [first]")
    complete = make(project, "partial", text)
    blocked = make(project, "partial")
    assert blocked.patch_key != complete.patch_key


# --- make: keys chain ---------------------------------------------------------------------


def test_keys_are_deterministic(project: Path) -> None:
    first = make(project)
    second = make(project)
    assert keys(first) == keys(second)
    assert first == second
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in keys(first).values())
    assert len(set(keys(first).values())) == 4  # each stage has its own key


def test_keys_do_not_depend_on_where_the_project_lies(
        project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    copy = tmp_path_factory.mktemp("elsewhere") / "project"
    shutil.copytree(project, copy)
    assert keys(make(project)) == keys(make(copy))


def test_editing_a_patch_changes_patch_wheels_inputs_but_not_fetch(project: Path) -> None:
    before = make(project)
    (project / "patches" / "first" / "0001-x.patch").write_text(PATCH_A + "\n")
    after = make(project)
    assert changed(before, after) == {"patch", "wheels", "inputs"}
    assert after.series[0].sha256 != before.series[0].sha256
    assert after.series[1] == before.series[1]


def test_reordering_the_series_changes_the_patch_key(project: Path) -> None:
    before = make(project)
    after = make(project, text=CONFIG.replace("[first, second]", "[second, first]"))
    assert changed(before, after) == {"patch", "wheels", "inputs"}


def test_editing_the_upstream_tree_changes_every_key(project: Path) -> None:
    before = make(project)
    (project / "upstream" / "x.py").write_text("x = 3\n")
    after = make(project)
    assert changed(before, after) == {"fetch", "patch", "wheels", "inputs"}


def test_changing_the_env_changes_only_inputs(project: Path) -> None:
    before = make(project)
    after = make(project, text=CONFIG.replace('env: {MODE: "a"}', 'env: {MODE: "b"}'))
    assert changed(before, after) == {"inputs"}
    added = make(project, text=CONFIG.replace('env: {MODE: "a"}', 'env: {MODE: "a", X: "1"}'))
    assert changed(before, added) == {"inputs"}


def test_changing_cuda_arch_changes_wheels_and_inputs_not_patch(project: Path) -> None:
    before = make(project)
    after = make(project, text=CONFIG.replace('cuda_arch: "12.1a"', 'cuda_arch: "12.0f"'))
    assert changed(before, after) == {"wheels", "inputs"}


def test_changing_the_builder_changes_wheels_and_inputs(project: Path) -> None:
    before = make(project)
    after = make(project, text=CONFIG.replace("{suite: bookworm}",
                                              "{suite: bookworm, packages: [g++]}"))
    assert changed(before, after) == {"wheels", "inputs"}


def test_changing_the_runtime_changes_only_inputs(project: Path) -> None:
    text = CONFIG.replace("  runtime: debian\n", "  runtime: other\n").replace(
        "upstreams:\n", "  other:\n    debootstrap: {suite: trixie}\nupstreams:\n")
    before = make(project)
    after = make(project, text=text)
    assert changed(before, after) == {"inputs"}


def test_the_tag_name_goes_into_inputs_only(project: Path) -> None:
    before = make(project)
    after = make(project, "renamed", CONFIG.replace("  main:\n", "  renamed:\n"))
    assert changed(before, after) == {"inputs"}


def test_plan_key_and_series_label(project: Path) -> None:
    plan = make(project)
    assert [plan.key(s) for s in (Stage.FETCH, Stage.PATCH, Stage.WHEELS, Stage.BAKE)] == [
        plan.fetch_key, plan.patch_key, plan.wheels_key, plan.inputs]
    assert plan.series_label() == (f"first@sha256:{plan.series[0].sha256},"
                                   f"second@sha256:{plan.series[1].sha256}")


def test_upstream_pin_of_a_dir_is_its_content(project: Path) -> None:
    loaded = load(project)
    pin = planning.upstream_pin(loaded.tag("main").upstream)
    assert pin["kind"] == "dir"
    assert pin["path"] == "upstream"
    assert len(pin["tree"]) == 64


def test_a_dir_upstream_that_does_not_exist_is_a_config_error(project: Path) -> None:
    loaded = load(project, CONFIG.replace("dir: upstream", "dir: nowhere"))
    with pytest.raises(ConfigError) as info:
        planning.make(loaded, loaded.tag("main"))
    assert "nowhere" in info.value.message


# --- rendering ----------------------------------------------------------------------------


def test_render_json_is_valid_json_with_every_stage(project: Path) -> None:
    loaded = load(project)
    plan = planning.make(loaded, loaded.tag("partial"))
    stages = status.stage_states(loaded, plan, client=None, console=plain_console())
    doc = json.loads(planning.render_json(plan, stages))
    assert doc["tag"] == "partial"
    assert doc["image"] == "localhost:5000/sparkbake-test:partial"
    assert doc["inputs"] == plan.inputs
    assert doc["series"] == [{"name": "first", "sha256": plan.series[0].sha256}]
    assert doc["problems"] == list(plan.problems)
    assert [s["name"] for s in doc["stages"]] == STAGES
    by_name = {s["name"]: s for s in doc["stages"]}
    assert by_name["fetch"]["key"] == plan.fetch_key
    assert by_name["patch"]["state"] == "blocked"
    assert by_name["bake"]["state"] == "unknown"
    assert by_name["bake"]["key"] == plan.inputs
    assert set(by_name["wheels"]) == {"name", "key", "state", "detail"}


def test_stage_states_without_any_build(project: Path) -> None:
    loaded = load(project)
    plan = planning.make(loaded, loaded.tag("main"))
    states = {s.name: s.state for s in status.stage_states(loaded, plan, client=None,
                                                           console=plain_console())}
    assert states == {"fetch": "missing", "patch": "missing", "kernels": "missing",
                      "wheels": "missing", "bake": "unknown", "smoke": "missing",
                      "publish": "missing"}


def test_stage_states_see_cache_entries_under_the_config_folder(project: Path) -> None:
    loaded = load(project)
    plan = planning.make(loaded, loaded.tag("main"))
    entry = project / "build" / "sources" / plan.fetch_key
    (entry / "tree").mkdir(parents=True)
    (entry / upstream_tree.DATE_FILE).write_text("1700000000\n")  # a folder's, beside it
    (project / "build" / "smoke").mkdir(parents=True)
    (project / "build" / "smoke" / "main.json").write_text(json.dumps({"inputs": "other"}))
    states = {s.name: s.state for s in status.stage_states(loaded, plan, client=None,
                                                           console=plain_console())}
    assert states[Stage.FETCH] == "cached"
    assert states[Stage.SMOKE] == "stale"


def test_render_text_has_one_line_per_stage(project: Path) -> None:
    loaded = load(project)
    plan = planning.make(loaded, loaded.tag("main"))
    text = planning.render_text(status.stage_states(loaded, plan, client=None,
                                                    console=plain_console()))
    lines = text.splitlines()
    assert [line.split()[0] for line in lines] == STAGES
    assert lines[0].split()[1] == plan.fetch_key[:16]
    assert lines[4].split()[1:3] == [plan.inputs[:16], "unknown"]


def test_render_text_aligns_columns() -> None:
    stages = [StagePlan(Stage.FETCH, "1" * 64, "cached", "x"),
              StagePlan(Stage.PATCH_TESTS, "2" * 64, "missing")]
    assert planning.render_text(stages) == (
        f"fetch        {'1' * 16}  cached   x\n"
        f"patch-tests  {'2' * 16}  missing"
    )


def test_a_changed_file_of_the_image_is_named_by_what_plan_says_reruns(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = make(project)
    digest = resources.digest
    monkeypatch.setattr(resources, "digest", lambda name: "0" * 64
                        if name == "backend-verdicts.json" else digest(name))
    after = make(project)
    assert changed(before, after) == {"inputs"}
    assert planning.changed_inputs(before.stage_inputs[Stage.BAKE],
                                   after.stage_inputs[Stage.BAKE]) == [
        "bake: backend-verdicts.json edited"]
