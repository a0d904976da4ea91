"""What a run shows: one line per stage, its full output in build/logs/<tag>/<stage>.log.

Human progress goes to stderr; machine-readable results are the CLI's, on stdout. Default:
each stage is one line ending in its time and `ran` or `cached` (a live line on a terminal,
plain lines when not one or under CI); `-v` streams every subprocess as it runs; `-q` shows
only errors and the result. Colour only on a terminal, and never with NO_COLOR set (the
environment is the run's settings', given to the Console that main makes).
"""

from __future__ import annotations

import contextlib
import enum
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sparkbake.core.stages import RunState, Stage

__all__ = ["Console", "StageRun", "Verbosity", "shown", "summary_lines"]

COLOURS: dict[RunState, str] = {"ran": "32", "cached": "36", "failed": "31", "interrupted": "33"}
REDRAW_SECONDS = 0.1  # a live line is redrawn at most this often: a compile writes fast
TICK_SECONDS = 1.0  # a live line's clock moves while its tools are silent
PROGRESS_SECONDS = 300.0  # plain output: a long stage says it is still running this often


class Verbosity(enum.IntEnum):
    QUIET = 0
    NORMAL = 1
    VERBOSE = 2


@dataclass
class StageRun:
    """One stage of this run: where its output went, and how it ended."""

    name: Stage
    key: str
    log: Path
    state: RunState = "ran"
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "state": self.state, "seconds": round(self.seconds, 1),
                "key": self.key, "log": shown(self.log)}


class Console:
    """The run's one console: main makes it and passes it to what writes. Its stream is
    looked up on each write (tests swap sys.stderr); env: the run's environment (its
    settings'), which says CI, TERM and NO_COLOR, and which child processes start from."""

    def __init__(self, env: Mapping[str, str], verbosity: Verbosity = Verbosity.NORMAL,
                 stream: TextIO | None = None) -> None:
        self.env = env
        self.verbosity = verbosity
        self._stream = stream
        self._open: StageRun | None = None
        self._log: TextIO | None = None
        self._started = 0.0
        self._drawn = 0.0  # when the live line was last drawn
        self._live_shown = False
        self._last = ""  # the open stage's latest output line
        self._lock = threading.RLock()  # container output arrives on a reader thread

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    @property
    def tty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    @property
    def live(self) -> bool:
        """A live single line: on a terminal, outside CI, at the default verbosity."""
        return (self.tty and not self.env.get("CI") and self.env.get("TERM") != "dumb"
                and self.verbosity == Verbosity.NORMAL)

    @property
    def colour(self) -> bool:
        return self.tty and not self.env.get("NO_COLOR") and self.env.get("TERM") != "dumb"

    def detail(self, text: str) -> None:
        """A line of what a stage does (a command, its output): into the stage's log; shown
        with -v, or outside a stage at the default verbosity (housekeeping, series tools)."""
        with self._lock:
            if self._log is not None:
                self._to_log(text)
                self._last = text.strip().splitlines()[-1] if text.strip() else self._last
                if self.verbosity == Verbosity.VERBOSE:
                    self._write(text)
                elif self.live:
                    self._draw_live(self._last)  # a chunk of many lines: its last one
            elif self.verbosity >= Verbosity.NORMAL:
                self._write(text)

    def record(self, text: str) -> None:
        """Output a caller captured to read: into the open stage's log (shown with -v);
        without a stage, nowhere (the caller shows what it needs)."""
        with self._lock:
            if self._log is not None and text.strip():
                self._to_log(text)
                if self.verbosity == Verbosity.VERBOSE:
                    self._write(text)

    def notice(self, text: str) -> None:
        """A line the user should read now (a warning, a lock made): shown unless -q."""
        with self._lock:
            if self._log is not None:
                self._to_log(text)
            if self.verbosity >= Verbosity.NORMAL:
                self._write(text)

    def _to_log(self, text: str) -> None:
        assert self._log is not None
        self._log.write(text.rstrip("\n") + "\n")
        self._log.flush()

    def result(self, text: str) -> None:
        """The command's human result: always shown."""
        with self._lock:
            self._write(text)

    def open_log(self) -> Path | None:
        """The open stage's log, if a stage is open."""
        return self._open.log if self._open is not None else None

    def output_hint(self) -> str:
        """Where a failed command's output is: the open stage's log, else the console."""
        if self._open is not None:
            return f"see its output in {shown(self._open.log)}"
        return "see the output above"

    def cached(self, stage: Stage, text: str) -> None:
        """The stage found its output in the cache: where it is the open one (smoke reads
        the patch stage's cache, and stays `ran`), it is `cached`, not `ran`."""
        with self._lock:
            if self._open is not None and self._open.name == stage:
                self._open.state = "cached"
        self.detail(text)

    @contextlib.contextmanager
    def stage(self, name: Stage, key: str, log: Path) -> Iterator[StageRun]:
        """Run a stage: its output to log (written anew), one line when it ends. Stages do
        not nest: an inner stage's lines go to the outer one's log."""
        if self._open is not None:
            yield self._open
            return
        log.parent.mkdir(parents=True, exist_ok=True)
        run = StageRun(name, key, log)
        with self._lock:
            self._open, self._log, self._started = run, log.open("w"), time.monotonic()
            self._last = ""
        stop = threading.Event()
        ticker = threading.Thread(target=self._ticker, args=(run, stop), daemon=True)
        try:
            if self.live:
                self._draw_live("")
            if self.verbosity == Verbosity.NORMAL:
                ticker.start()
            yield run
        except KeyboardInterrupt:
            run.state = "interrupted"
            raise
        except BaseException:
            run.state = "failed"
            raise
        finally:
            stop.set()
            with self._lock:
                run.seconds = time.monotonic() - self._started
                if self._log is not None:
                    self._log.close()
                self._open, self._log = None, None
                self._end_line(run)

    def _ticker(self, run: StageRun, stop: threading.Event) -> None:
        """While the stage runs: a live line's clock each second; in plain output, a line
        every few minutes, so that a long compile is not taken for a hang."""
        while not stop.wait(TICK_SECONDS if self.live else PROGRESS_SECONDS):
            self.tick(run)

    def tick(self, run: StageRun) -> None:
        """Show that the open stage run is still running (the ticker's step)."""
        with self._lock:
            if self._open is not run:
                return
            if self.live:
                self._drawn = 0.0
                self._draw_live(self._last or " ")
            else:
                elapsed = time.monotonic() - self._started
                self._write(f"{run.name:<11} {'running':<11} {elapsed:7.1f}s  "
                            f"{' '.join(self._last.split())[:80]}".rstrip())

    def _end_line(self, run: StageRun) -> None:
        failed = run.state in ("failed", "interrupted")
        line = self.row(run)
        if failed:
            line += f"  log: {shown(run.log)}"
        if self._live_shown:
            self.stream.write("\r\x1b[K")
            self._live_shown = False
        if failed or self.verbosity >= Verbosity.NORMAL:
            self._write(line)

    def _draw_live(self, text: str) -> None:
        now = time.monotonic()
        if self._open is None or (text and now - self._drawn < REDRAW_SECONDS):
            return
        if text:
            self._drawn = now
        width = shutil.get_terminal_size((100, 24)).columns - 1
        head = f"{self._open.name:<11} {'...':<11} {now - self._started:7.1f}s  "
        last = " ".join(text.split())
        self.stream.write("\r\x1b[K" + (head + last)[:width])
        self.stream.flush()
        self._live_shown = True

    def _write(self, text: str) -> None:
        if self._live_shown:  # a line printed over a live line: clear it, draw it after
            self.stream.write("\r\x1b[K")
            self._live_shown = False
        self.stream.write(text.rstrip("\n") + "\n")
        self.stream.flush()
        if self._open is not None and self.live and self._log is not None:
            self._draw_live("")

    def row(self, run: StageRun) -> str:
        """A stage's name, state and time: its line, and the summary's row but the key."""
        return f"{run.name:<11} {self.paint(run.state, f'{run.state:<11}')} {run.seconds:7.1f}s"

    def paint(self, state: RunState, text: str) -> str:
        code = COLOURS.get(state)
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and code else text


def summary_lines(runs: Sequence[StageRun], console: Console) -> list[str]:
    """The run's table: stage, state, time, key."""
    lines = [f"{'stage':<11} {'state':<11} {'time':>8}  key"]
    for run in runs:
        lines.append(f"{console.row(run)}  {run.key[:16]}")
    return lines


def shown(path: Path) -> str:
    """A path as the user can type it: relative to the working folder where inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
