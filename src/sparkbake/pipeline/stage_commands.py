"""fetch, patch, wheels and build-image: the build stages up to one, each skipped when
cached, then the summary and the result (the CLI imports only this module for them)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from sparkbake import filelock
from sparkbake.config.settings import Settings
from sparkbake.config.versions import Config, Tag
from sparkbake.console import display
from sparkbake.console.display import Console
from sparkbake.core.folders import Folders
from sparkbake.core.stages import Stage
from sparkbake.errors import EngineError
from sparkbake.files import atomic_write
from sparkbake.patch import apply
from sparkbake.pipeline import build

__all__ = ["Output", "print_json", "run_until"]

BUILD_LOCK_WAIT = 6 * 3600.0  # seconds a build waits for another build of its tag


@dataclasses.dataclass(frozen=True)
class Output:
    """Where a stage command's result goes besides the console: JSON on stdout, a file."""

    json: bool = False
    metadata_file: Path | None = None


def run_until(config: Config, settings: Settings, tag: Tag, last: Stage,
              options: apply.Options | None = None, output: Output = Output(), *,
              console: Console) -> int:
    """Run the build stages up to last; every stage whose key is cached is skipped. One
    build of a tag runs at a time: another one waits for it, then finds its work cached."""
    with _one_build(config, tag, console=console):
        plan = build.fetched_plan(config, tag, settings, console=console)
        work = build.Build(config, plan, settings, console, options or apply.Options())
        outcome = build.run_stages(work, last)
    for line in display.summary_lines(outcome.runs, console):
        console.notice(line)
    console.result(outcome.text)
    found = {**outcome.facts, "stages": [run.to_json() for run in outcome.runs]}
    if output.metadata_file:
        atomic_write(output.metadata_file, json.dumps(found, indent=2) + "\n")
    print_json(output, found)
    return 0


@contextlib.contextmanager
def _one_build(config: Config, tag: Tag, wait: float = BUILD_LOCK_WAIT, *,
               console: Console) -> Iterator[None]:
    """The tag's build lock, held for the block; waited for while another run holds it."""
    path = Folders.of(config).build_lock(tag.name)
    try:
        with filelock.exclusive(path, wait, lambda who: console.notice(
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
