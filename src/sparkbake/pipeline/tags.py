"""`sparkbake tags`: every tag of versions.yaml with its platform, series and where it
stands (built, smoked, published for its current inputs), from the same states as `plan`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from sparkbake import planning, records
from sparkbake.core.stages import Stage
from sparkbake.oci.docker_engine import engine_or_none
from sparkbake.pipeline import status
from sparkbake.run import Run

__all__ = ["TagRow", "report", "rows"]

Said = Literal["yes", "no", "?"]  # ?: unknown (no engine)


@dataclass(frozen=True)
class TagRow:
    """A tag and whether it is built, smoked and published for its current inputs."""

    tag: str
    platform: str
    series: tuple[str, ...]
    release: str | None  # the multi-platform tag it is one platform of
    built: Said
    smoked: Said
    published: Said


def rows(run: Run) -> list[TagRow]:
    """One row per tag, in versions.yaml's order."""
    config, client = run.config, engine_or_none(settings=run.settings)
    found = []
    for tag in config.tags.values():
        plan = planning.make(config, tag)
        said = {s.name: _said(s.state) for s in status.stage_states(config, plan, client,
                                                                    console=run.console)}
        found.append(TagRow(tag.name, str(tag.platform), tag.series, tag.release,
                            built=said[Stage.BAKE],
                            smoked=said[Stage.SMOKE], published=said[Stage.PUBLISH]))
    return found


def _said(state: str) -> Said:
    return "yes" if state == "cached" else "?" if state == "unknown" else "no"


def report(run: Run, as_json: bool = False) -> str:
    listed = rows(run)
    if as_json:
        return json.dumps([records.to_json(row) for row in listed], indent=2)
    table = [["tag", "platform", "series", "release", "built", "smoked", "published"]]
    table += [[row.tag, row.platform, ",".join(row.series) or "-", row.release or "-",
               row.built, row.smoked, row.published] for row in listed]
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths,
                                                                      strict=True)).rstrip()
                     for line in table)
