"""The command line: `main([...])` returns the exit code; errors are short and traceback-free.

DOCKER_HOST points at a closed port, so `plan` finds no engine and reports the bake as
`unknown`: these tests never touch Docker.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import importlib
import importlib.metadata
import inspect
import json
import os
from pathlib import Path

import pytest

from sparkbake import __main__ as cli
from sparkbake.__main__ import main, parser
from sparkbake.command_table import COMMANDS
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.oci import emulation
from tests.conftest import one_patch_project, settings_of, versions_yaml

REPO = Path(__file__).resolve().parents[2]
STAGES = ["fetch", "patch", "kernels", "wheels", "bake", "smoke", "publish"]
STATES = {"cached", "missing", "unknown", "blocked", "stale"}

TAGS = """\
  production-1.0-demo:
    upstream: tree
    series: [demo]
    env: {DEMO: "1"}
"""
CONFIG = versions_yaml(repository="localhost:5000/sparkbake-cli", tags=TAGS)


def write_config(folder: Path, text: str) -> Path:
    """Write a versions.yaml into folder and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "versions.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    monkeypatch.delenv("DOCKER_CERT_PATH", raising=False)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return one_patch_project(tmp_path, "--- a/demo.py\n+++ b/demo.py\n", TAGS)


def plan_lines(out: str) -> dict[str, list[str]]:
    """The text plan as {stage: [key, state, detail...]}."""
    return {line.split()[0]: line.split()[1:] for line in out.splitlines()}


def assert_short_error(err: str) -> None:
    assert err.startswith("sparkbake: error: ")
    assert "Traceback" not in err
    assert 1 <= len(err.strip().splitlines()) <= 2, err


# --- plan ---------------------------------------------------------------------------------


def test_plan_prints_every_stage_with_its_state(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "production-1.0-demo", "--config", str(config_file)]) == 0
    out, err = capsys.readouterr()
    lines = plan_lines(out)
    assert list(lines) == STAGES
    for stage, (key, state, *_) in lines.items():
        assert len(key) == 16 and int(key, 16) >= 0, stage
        assert state in STATES, stage
    assert lines["bake"][1] == "unknown"
    assert " ".join(lines["fetch"][1:]) == \
        "missing tree (dir), dated 1980-01-01 (a fixed date: not in git, no source_date_epoch)"
    assert lines["patch"][1:] == ["missing", "demo"]
    assert lines["wheels"][1:] == ["missing", "sm_121a", "on", "debian"]
    assert lines["bake"][2] == "localhost:5000/sparkbake-cli:production-1.0-demo"
    assert err == ""


def test_plan_accepts_a_tag_suffix(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "1.0-demo", "--config", str(config_file)]) == 0
    assert "sparkbake-cli:production-1.0-demo" in capsys.readouterr().out


def test_plan_json_parses(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "production-1.0-demo", "--json", "--config", str(config_file)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tag"] == "production-1.0-demo"
    assert doc["image"] == "localhost:5000/sparkbake-cli:production-1.0-demo"
    assert doc["problems"] == []
    assert [s["name"] for s in doc["stages"]] == STAGES
    assert {s["name"]: s["state"] for s in doc["stages"]}["bake"] == "unknown"
    assert [s["name"] for s in doc["series"]] == ["demo"]
    assert len(doc["inputs"]) == 64


def test_config_is_accepted_before_and_after_the_command(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "plan", "production-1.0-demo"]) == 0
    before = capsys.readouterr().out
    assert main(["plan", "production-1.0-demo", "--config", str(config_file)]) == 0
    after = capsys.readouterr().out
    assert before == after
    assert list(plan_lines(before)) == STAGES


def test_config_after_the_command_wins(
        config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = write_config(tmp_path / "broken", "schema: 2\n")
    assert main(["--config", str(broken), "plan", "production-1.0-demo",
                 "--config", str(config_file)]) == 0
    assert list(plan_lines(capsys.readouterr().out)) == STAGES


def test_config_defaults_to_versions_yaml_in_the_cwd(
        config_file: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(config_file.parent)
    assert main(["plan", "production-1.0-demo"]) == 0
    assert list(plan_lines(capsys.readouterr().out)) == STAGES


def test_the_same_tag_plans_the_same_keys(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", "production-1.0-demo", "--json", "--config", str(config_file)])
    first = json.loads(capsys.readouterr().out)
    main(["plan", "1.0-demo", "--json", "--config", str(config_file)])
    assert json.loads(capsys.readouterr().out) == first


# --- usage and config errors --------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["frobnicate", "x"],
    ["plan"],
    [],
    ["plan", "x", "--no-such-option"],
    ["smoke", "x", "--gpu", "sometimes"],
])
def test_usage_errors_exit_2_without_a_traceback(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_short_error(err)


def test_unknown_command_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate", "x"]) == 2
    err = capsys.readouterr().err
    assert "'frobnicate'" in err
    assert "plan" in err  # the choices


@pytest.mark.parametrize(("number", "said"), [
    (errno.ENOSPC, "build/x.json: no space left on its disk (No space left on device)"),
    (errno.EROFS, "build/x.json: cannot be written (Read-only file system)"),
    (errno.EACCES, "build/x.json: cannot be written (Permission denied)"),
])
def test_a_full_or_read_only_disk_is_the_machines_error_exit_8(
        number: int, said: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(args: object, run: object) -> int:
        raise OSError(number, os.strerror(number), "build/x.json")
    monkeypatch.setattr(cli, "dispatch", refuse)
    assert main(["plan", "demo"]) == 8
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"sparkbake: error: {said}"
    assert err[1].startswith("  -> ") and len(err) == 2


def test_another_os_error_is_still_an_internal_error(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    def fail(args: object, run: object) -> int:
        raise OSError(errno.EBADF, "Bad file descriptor")
    monkeypatch.setattr(cli, "dispatch", fail)
    assert main(["plan", "demo"]) == 1
    assert capsys.readouterr().err.startswith("sparkbake: internal error: OSError: ")


@pytest.mark.parametrize("port", ["99999", "0", "-1", "80a"])
def test_a_port_out_of_range_is_a_usage_error(
        port: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["registry", "start", "--port", port]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"sparkbake: error: argument --port: {port!r} is not a TCP port (1 to 65535)")


def test_missing_tag_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 2
    assert "tag" in capsys.readouterr().err


def test_usage_error_prefix_is_not_doubled(capsys: pytest.CaptureFixture[str]) -> None:
    main(["frobnicate", "x"])
    assert "sparkbake: error: sparkbake:" not in capsys.readouterr().err


def test_unknown_tag_exits_2_with_did_you_mean(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "production-1.0-demp", "--config", str(config_file)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_short_error(err)
    assert "did you mean 'production-1.0-demo'?" in err


def test_a_config_error_exits_2_naming_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, CONFIG.replace("    series: [demo]", "    seires: [demo]"))
    assert main(["plan", "production-1.0-demo", "--config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_short_error(err)
    line = CONFIG.splitlines().index("    series: [demo]") + 1
    assert err.startswith(f"sparkbake: error: {path.resolve()}:{line}: ")
    assert "did you mean 'series'?" in err


def test_a_yaml_syntax_error_exits_2_naming_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, CONFIG.replace("platform: linux/amd64", "platform: a: b"))
    assert main(["plan", "production-1.0-demo", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert_short_error(err)
    assert err.startswith(f"sparkbake: error: {path.resolve()}:4: invalid YAML")


def test_a_missing_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "x", "--config", str(tmp_path / "absent.yaml")]) == 2
    err = capsys.readouterr().err
    assert_short_error(err)
    assert "absent.yaml" in err


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, CONFIG.replace("schema: 1", "schema: 2"))
    assert main(["--debug", "plan", "x", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "schema 2 is not supported" in err


# --- the real versions.yaml: what plan shows of it (its values: test_config) -------------


def test_production_plan_lists_its_series_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    tag = versions.load(REPO / "versions.yaml").tag("3.73-vision")
    assert main(["plan", "3.73-vision", "--config", str(REPO / "versions.yaml")]) == 0
    out, err = capsys.readouterr()
    lines = plan_lines(out)
    assert list(lines) == STAGES
    assert lines["patch"][1] in STATES - {"blocked"}
    patch_line = next(line for line in out.splitlines() if line.startswith("patch"))
    assert patch_line.endswith(", ".join(tag.series))
    assert lines["fetch"][2:] == [tag.upstream.key, "(pypi)"]
    if emulation.host_platform() == tag.platform:  # all native
        assert lines["bake"][2:] == [tag.image_ref]
        assert lines["wheels"][2:] == [tag.sm_arch, "on", tag.builder.name]
    else:
        host = emulation.host_platform()
        assert lines["bake"][2:] == [tag.image_ref, "(venv", "made", "emulated,", "files",
                                     "native)"]
        assert lines["wheels"][2:] == [tag.sm_arch, "on", f"{tag.builder.name};", "emulated:",
                                       str(tag.platform), "on", str(host)]
    assert err == ""


def test_a_seeded_tag_says_where_its_kernels_come_from(
        capsys: pytest.CaptureFixture[str]) -> None:
    seed = versions.load(REPO / "versions.yaml").tag("vllm-reuse-sm90").kernels
    assert seed is not None
    assert main(["plan", "vllm-reuse-sm90", "--config", str(REPO / "versions.yaml")]) == 0
    kernels = plan_lines(capsys.readouterr().out)["kernels"]
    assert kernels[2:] == ["from", seed.wheel, "(seed:", "no", "compiler)"]


def test_production_plan_json_lists_the_series(capsys: pytest.CaptureFixture[str]) -> None:
    tag = versions.load(REPO / "versions.yaml").tag("3.72-vision")
    assert main(["--config", str(REPO / "versions.yaml"), "plan", "3.72-vision", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tag"] == tag.name
    assert [s["name"] for s in doc["series"]] == list(tag.series)
    assert doc["problems"] == []


# --- help, version, tags, plan's exit -------------------------------------------------------


def test_every_command_and_option_has_a_one_line_help() -> None:
    top = parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    assert set(helps) == set(commands.choices)
    for name, command in commands.choices.items():
        what = helps[name]
        assert what and "\n" not in what, name
        for action in command._actions:
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                assert action.help and "\n" not in action.help, (name, action.dest)


def test_every_command_carries_a_handler_that_takes_what_dispatch_gives() -> None:
    """dispatch imports each handler by its name when the command runs: a name that is wrong,
    or a handler that takes other arguments, would first fail there."""
    for command in COMMANDS:
        given = {"none": 2, "argument": 3, "optional": 3, "option": 3}[command.tag]
        handlers = [(command.handler, given)]
        if command.without_tag is not None:
            handlers.append((command.without_tag[0], 2))
        if command.on_release is not None:
            handlers.append((command.on_release, 3))
        for name, count in handlers:
            module, _, function = name.partition(":")
            handler = getattr(importlib.import_module(module), function)
            assert len(inspect.signature(handler).parameters) == count, (command.name, name)


def test_version_is_the_installed_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"sparkbake {importlib.metadata.version('sparkbake')}\n"


def test_tags_lists_each_tag_with_platform_series_and_states(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "tags"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["tag", "platform", "series", "release", "built", "smoked",
                                "published"]
    # no engine: whether it is built is unknown; nothing smoked or published yet
    assert lines[1].split() == ["production-1.0-demo", "linux/amd64", "demo", "-", "?", "no",
                                "no"]
    assert main(["--config", str(config_file), "tags", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"tag": "production-1.0-demo", "platform": "linux/amd64", "series": ["demo"],
         "release": None, "built": "?", "smoked": "no", "published": "no"}]


def test_plan_is_exit_2_when_a_stage_is_blocked(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "plan", "demo"]) == 0
    (config_file.parent / "patches" / "demo" / "series").unlink()
    (config_file.parent / "patches" / "demo" / "0001-demo.patch").unlink()
    (config_file.parent / "patches" / "demo").rmdir()
    capsys.readouterr()
    assert main(["--config", str(config_file), "plan", "demo"]) == 2
    assert plan_lines(capsys.readouterr().out)["patch"][1] == "blocked"


def test_a_remedy_repeats_the_users_invocation(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a smoke record, publish names the smoke command as the user would type it:
    with their --config; under nox, as a nox session."""
    plain = Settings.of_process(config=config_file)
    assert plain.command("smoke", "demo") == f"sparkbake --config {config_file} smoke demo"
    under_nox = dataclasses.replace(settings_of(NOX_CURRENT_SESSION="publish"),
                                    config_option=config_file)
    assert under_nox.command("smoke", "demo") == f"nox -s smoke -- demo --config {config_file}"
    default = Settings.of_process(config=Path("versions.yaml"))
    assert dataclasses.replace(under_nox, config_option=default.config_option).command(
        "registry", "start", "--port", "5001") == "nox -s registry -- start --port 5001"


def test_build_image_without_a_tag_lists_the_tags_and_is_exit_2(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "build-image"]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].split()[:2] == ["tag", "platform"]
    assert "production-1.0-demo" in captured.out
    assert "sparkbake: error: build-image needs a tag" in captured.err
    assert "build-image production-1.0-demo`" in captured.err


def test_smoke_without_a_tag_and_no_current_image_is_exit_2(
        config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "smoke"]) == 2
    assert "no tag has a current image in the engine to smoke" in capsys.readouterr().err
    assert main(["--config", str(config_file), "plan"]) == 2  # the others still need one
