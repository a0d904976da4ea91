"""The one way to run a subprocess: echo it, check it, say what to do when it fails."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from sparkbake.config.settings import child_environment
from sparkbake.console.display import Console
from sparkbake.errors import EngineError, FatalError

__all__ = ["require_tool", "run", "step"]


def require_tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise EngineError(f"{name} is not installed", f"install it: apt-get install -y {package}")
    return found


def run(
    console: Console,
    cmd: Sequence[str | Path],
    *,
    error: type[FatalError],
    what: str,
    cwd: Path | None = None,
    capture: bool = False,
    check: bool = True,
    env: dict[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run cmd (env: variables added to the run's environment, its secrets left out;
    environment: the child's whole environment instead), echoing `+ cmd` to console; on
    failure raise `error` naming `what` and the last output.

    Output is streamed as it comes unless capture is set, so long steps show progress;
    captured output goes whole into the stage's log once the command ends. Bytes that are not
    UTF-8 are decoded with replacement characters: a tool's output never stops the run.
    """
    args = [str(c) for c in cmd]
    console.detail("+ " + shlex.join(args))
    if environment is None:
        environment = child_environment(console.env, env or {})
    try:
        process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE,
                                   encoding="utf-8", errors="replace",
                                   env=dict(environment),
                                   stderr=subprocess.PIPE if capture else subprocess.STDOUT)
    except FileNotFoundError as exc:
        raise EngineError(f"{args[0]} is not installed", "install it and retry") from exc
    if capture:
        stdout, stderr = process.communicate()
        console.record(stdout + stderr)
    else:
        lines = []
        for line in process.stdout or ():
            lines.append(line)
            console.detail(line)
        stdout, stderr = "".join(lines), ""
        process.wait()
    result = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
    if check and result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise error(f"{what} failed (exit {result.returncode}): {' / '.join(tail)}",
                    console.output_hint())
    return result


class step:
    """Prints a step line on entry and its elapsed time on exit."""

    def __init__(self, console: Console, name: str) -> None:
        self.console, self.name = console, name
        self.start = 0.0

    def __enter__(self) -> step:
        self.start = time.monotonic()
        self.console.detail(f"==> {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        state = "failed" if exc[0] else "done"
        self.console.detail(f"<== {self.name}: {state} in {time.monotonic() - self.start:.1f}s")
