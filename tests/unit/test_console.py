"""The console: one line per stage, full output in the stage's log, -v, -q, TTY, NO_COLOR."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from sparkbake.console import tools
from sparkbake.console.display import Console, Verbosity, summary_lines
from sparkbake.core.stages import Stage
from sparkbake.errors import BuildError


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def make(verbosity: Verbosity = Verbosity.NORMAL, tty: bool = False,
         **env: str) -> tuple[Console, io.StringIO]:
    stream = Terminal() if tty else io.StringIO()
    return Console(env, verbosity, stream), stream


def test_a_stage_is_one_line_and_its_output_goes_to_its_log(tmp_path: Path) -> None:
    console, stream = make()
    log = tmp_path / "logs" / "demo" / "fetch.log"
    with console.stage(Stage.FETCH, "ab" * 32, log) as run:
        console.detail("+ git init -q")
        console.detail("Initialized empty repository\n")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].split()[:2] == ["fetch", "ran"] and lines[0].endswith("s")
    assert log.read_text() == "+ git init -q\nInitialized empty repository\n"
    assert (run.name, run.state) == ("fetch", "ran")


def test_a_cached_stage_says_cached(tmp_path: Path) -> None:
    console, stream = make()
    with console.stage(Stage.PATCH, "k", tmp_path / "patch.log") as run:
        console.cached(Stage.PATCH, "patch: demo cached at 3cb573e72aef")
    assert stream.getvalue().split()[:2] == ["patch", "cached"]
    assert run.state == "cached"


def test_another_stages_cache_hit_leaves_the_open_stage_ran(tmp_path: Path) -> None:
    console, stream = make()
    with console.stage(Stage.SMOKE, "k", tmp_path / "smoke.log"):
        console.cached(Stage.PATCH, "patch: demo cached at 3cb573e72aef")
    assert stream.getvalue().split()[:2] == ["smoke", "ran"]


def test_a_failed_stage_names_its_log_and_the_error_goes_on(tmp_path: Path) -> None:
    console, stream = make(Verbosity.QUIET)
    log = tmp_path / "wheels.log"
    with pytest.raises(RuntimeError), console.stage(Stage.WHEELS, "k", log) as run:
        console.detail("nvcc: error")
        raise RuntimeError("compile failed")
    line = stream.getvalue().strip()
    assert line.split()[:2] == ["wheels", "failed"]  # shown even under -q
    assert line.endswith(f"log: {log}")
    assert run.state == "failed"


def test_an_interrupted_stage_says_so(tmp_path: Path) -> None:
    console, stream = make()
    with pytest.raises(KeyboardInterrupt), console.stage(Stage.BAKE, "k", tmp_path / "bake.log"):
        raise KeyboardInterrupt
    assert stream.getvalue().split()[:2] == ["bake", "interrupted"]


def test_verbose_streams_the_output_as_well(tmp_path: Path) -> None:
    console, stream = make(Verbosity.VERBOSE)
    with console.stage(Stage.FETCH, "k", tmp_path / "fetch.log"):
        console.detail("+ git init -q")
    assert stream.getvalue().splitlines()[0] == "+ git init -q"
    assert (tmp_path / "fetch.log").read_text() == "+ git init -q\n"


def test_quiet_shows_only_results(tmp_path: Path) -> None:
    console, stream = make(Verbosity.QUIET)
    with console.stage(Stage.FETCH, "k", tmp_path / "fetch.log"):
        console.notice("warning: a moving ref")
        console.detail("+ git init -q")
    console.detail("outside a stage")
    console.result("image: demo = sha256:00")
    assert stream.getvalue() == "image: demo = sha256:00\n"
    assert "warning: a moving ref" in (tmp_path / "fetch.log").read_text()


def test_notices_are_shown_and_logged(tmp_path: Path) -> None:
    console, stream = make()
    with console.stage(Stage.BAKE, "k", tmp_path / "bake.log"):
        console.notice("lock: locks/debian.amd64.txt missing: making it now")
    assert stream.getvalue().splitlines()[0].startswith("lock: locks/debian.amd64.txt missing")
    assert "making it now" in (tmp_path / "bake.log").read_text()


def test_outside_a_stage_details_are_shown_at_the_default(tmp_path: Path) -> None:
    console, stream = make()
    console.detail("patch-lint: 4 series, 9 patches: ok")
    assert stream.getvalue() == "patch-lint: 4 series, 9 patches: ok\n"


def test_a_terminal_gets_a_live_line_that_ends_as_the_stage_line(tmp_path: Path) -> None:
    console, stream = make(tty=True, NO_COLOR="1")
    with console.stage(Stage.WHEELS, "k", tmp_path / "wheels.log"):
        console.detail("[12/40] Building CUDA object csrc/scale.cu.o")
    shown = stream.getvalue()
    assert "\r\x1b[K" in shown  # the line is redrawn in place
    assert "Building CUDA object" in shown  # the latest output, on the live line
    assert shown.rsplit("\r\x1b[K", 1)[1].split()[:2] == ["wheels", "ran"]
    assert shown.endswith("s\n") and "\x1b[3" not in shown  # NO_COLOR: no colour


def test_under_ci_a_terminal_gets_plain_lines(tmp_path: Path) -> None:
    console, stream = make(tty=True, CI="true", NO_COLOR="1")
    with console.stage(Stage.WHEELS, "k", tmp_path / "wheels.log"):
        console.detail("[12/40] Building CUDA object csrc/scale.cu.o")
    assert "\r" not in stream.getvalue()
    assert stream.getvalue().split()[:2] == ["wheels", "ran"]


def test_colour_only_on_a_terminal_without_no_color(tmp_path: Path) -> None:
    coloured, shown = make(tty=True, CI="true")
    with coloured.stage(Stage.FETCH, "k", tmp_path / "a.log"):
        pass
    assert "\x1b[32mran" in shown.getvalue()
    plain, piped = make(tty=False)
    with plain.stage(Stage.FETCH, "k", tmp_path / "b.log"):
        pass
    assert "\x1b[" not in piped.getvalue()


def test_stages_do_not_nest(tmp_path: Path) -> None:
    console, _ = make()
    with console.stage(Stage.LOCK, "k", tmp_path / "lock.log") as outer, \
            console.stage(Stage.FETCH, "f", tmp_path / "fetch.log") as inner:
        console.detail("inner")
    assert inner is outer and outer.name == "lock"
    assert (tmp_path / "lock.log").read_text() == "inner\n"
    assert not (tmp_path / "fetch.log").exists()


def test_the_output_hint_names_the_open_stages_log(tmp_path: Path) -> None:
    console, _ = make()
    assert console.output_hint() == "see the output above"
    with console.stage(Stage.FETCH, "k", tmp_path / "fetch.log"):
        assert console.output_hint() == f"see its output in {tmp_path / 'fetch.log'}"


def test_the_summary_has_stage_state_time_and_key(tmp_path: Path) -> None:
    console, _ = make()
    runs = []
    for name in (Stage.FETCH, Stage.PATCH):
        with console.stage(name, name * 10, tmp_path / f"{name}.log") as run:
            console.cached(Stage.FETCH, "hit")
        runs.append(run)
    table = summary_lines(runs, console)
    assert table[0].split() == ["stage", "state", "time", "key"]
    assert table[1].split()[:2] == ["fetch", "cached"] and table[1].endswith("fetchfetchfetchf")
    assert table[2].split()[:2] == ["patch", "ran"]
    assert runs[1].to_json()["key"] == "patch" * 10


def test_a_long_stage_says_it_is_still_running_in_plain_output(tmp_path: Path) -> None:
    console, stream = make()
    with console.stage(Stage.WHEELS, "k", tmp_path / "wheels.log") as run:
        console.detail("[12/40] Building CUDA object csrc/scale.cu.o\n")
        console.tick(run)  # what the ticker thread does every few minutes
    lines = stream.getvalue().splitlines()
    assert lines[0].split()[:2] == ["wheels", "running"]
    assert lines[0].endswith("[12/40] Building CUDA object csrc/scale.cu.o")
    assert lines[1].split()[:2] == ["wheels", "ran"] and len(lines) == 2
    console.tick(run)  # the stage is over: nothing more
    assert len(stream.getvalue().splitlines()) == 2


def test_a_live_lines_clock_moves_while_the_tools_are_silent(tmp_path: Path) -> None:
    console, stream = make(tty=True, NO_COLOR="1")
    with console.stage(Stage.BAKE, "k", tmp_path / "bake.log") as run:
        console.detail("docker load")
        before = stream.getvalue()
        console.tick(run)
        redrawn = stream.getvalue()[len(before):]
    assert redrawn.startswith("\r\x1b[Kbake ") and redrawn.count("\n") == 0


def test_a_live_line_shows_the_last_line_of_a_chunk(tmp_path: Path) -> None:
    console, stream = make(tty=True, NO_COLOR="1")
    with console.stage(Stage.BAKE, "k", tmp_path / "bake.log"):
        console.detail("Collecting tinykern\nSuccessfully installed tinykern-0.1.0\n")
        drawn = stream.getvalue().rsplit("\r\x1b[K", 1)[1]
    assert drawn.endswith("Successfully installed tinykern-0.1.0")
    assert "Collecting" not in drawn


def test_captured_output_goes_whole_into_the_stage_log(tmp_path: Path) -> None:
    console, stream = make()
    log = tmp_path / "lock.log"
    script = ("import sys; print(*(f'line {i}' for i in range(8)), sep='\\n'); "
              "print('warned', file=sys.stderr)")
    with console.stage(Stage.LOCK, "k", log):
        done = tools.run(console, [sys.executable, "-c", script], error=BuildError, what="t",
                         capture=True)
    assert done.stdout.splitlines()[-1] == "line 7"
    kept = log.read_text().splitlines()
    assert [f"line {i}" for i in range(8)] == kept[1:9] and kept[-1] == "warned"
    assert len(stream.getvalue().splitlines()) == 1  # the stage line only


def test_a_byte_that_is_not_utf8_is_replaced_not_fatal(tmp_path: Path) -> None:
    console, _ = make()
    script = "import sys; sys.stdout.buffer.write(b'caf\\xe9 ok\\n')"
    with console.stage(Stage.LOCK, "k", tmp_path / "lock.log"):
        for capture in (True, False):
            done = tools.run(console, [sys.executable, "-c", script], error=BuildError, what="t",
                             capture=capture)
            assert done.stdout == "caf\ufffd ok\n"
