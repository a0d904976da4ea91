"""fetch, patch, wheels and build-image: the build stages up to one, each skipped when
cached, then the summary and the result (the CLI imports only this module for them)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from sparkbake import filelock
from sparkbake.config.versions import Tag
from sparkbake.console import display
from sparkbake.core.stages import Stage
from sparkbake.errors import EngineError
from sparkbake.files import atomic_write
from sparkbake.patch import apply
from sparkbake.pipeline import build
from sparkbake.run import Run

__all__ = ["Output", "print_json", "run_until"]

BUILD_LOCK_WAIT = 6 * 3600.0  # seconds a build waits for another build of its tag


@dataclasses.dataclass(frozen=True)
class Output:
    """Where a stage command's result goes besides the console: JSON on stdout, a file."""

    json: bool = False
    metadata_file: Path | None = None


def run_until(run: Run, tag: Tag, last: Stage, options: apply.Options | None = None,
              output: Output = Output()) -> int:
    """Run the build stages up to last; every stage whose key is cached is skipped. One
    build of a tag runs at a time: another one waits for it, then finds its work cached."""
    console = run.console
    with _one_build(run, tag):
        outcome = build.run_stages(build.of_tag(run, tag, options), last)
    for line in display.summary_lines(outcome.runs, console):
        console.notice(line)
    console.result(outcome.text)
    found = {**outcome.facts, "stages": [stage.to_json() for stage in outcome.runs]}
    if output.metadata_file:
        atomic_write(output.metadata_file, json.dumps(found, indent=2) + "\n")
    print_json(output, found)
    return 0


@contextlib.contextmanager
def _one_build(run: Run, tag: Tag, wait: float = BUILD_LOCK_WAIT) -> Iterator[None]:
    """The tag's build lock, held for the block; waited for while another run holds it."""
    path = run.folders.build_lock(tag.name)
    try:
        with filelock.exclusive(path, wait, lambda who: run.console.notice(
                f"{tag.name}: another build of it runs ({who}); waiting for it to end")):
            yield
    except filelock.Busy as busy:
        raise EngineError(f"{tag.name}: another build of it ({busy}) still runs after "
                          f"{wait / 3600:g} h (lock: {path})",
                          "wait for it or stop it; a build that was killed holds no lock") \
            from None


def print_json(output: Output, record: Mapping[str, object]) -> None:
    """A command's record on stdout (--json), as it is written to build/: any JSON object
    (a record's TypedDict among them)."""
    if output.json:
        print(json.dumps(record, indent=2))
