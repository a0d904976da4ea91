"""`sparkbake tags`: every tag of versions.yaml with its platform, series and where it
stands (built, smoked, published for its current inputs), from the same states as `plan`."""

from __future__ import annotations

import json
from typing import Any

from sparkbake.config.versions import Config
from sparkbake.pipeline import commands
from sparkbake.pipeline import plan as plan_mod

__all__ = ["report", "rows"]

STATES = {"bake": "built", "smoke": "smoked", "publish": "published"}


def rows(config: Config) -> list[dict[str, Any]]:
    """One row per tag, in versions.yaml's order; a state is yes, no or ? (no engine)."""
    client = commands.engine_or_none()
    found = []
    for tag in config.tags.values():
        plan = plan_mod.make(config, tag)
        states = {s.name: s.state for s in commands.stage_states(config, plan, client)}
        found.append({"tag": tag.name, "platform": tag.platform, "series": list(tag.series),
                      **{word: _said(states[stage]) for stage, word in STATES.items()}})
    return found


def _said(state: str) -> str:
    return {"cached": "yes", "unknown": "?"}.get(state, "no")


def report(config: Config, as_json: bool) -> str:
    listed = rows(config)
    if as_json:
        return json.dumps(listed, indent=2)
    table = [["tag", "platform", "series", *STATES.values()]]
    table += [[row["tag"], row["platform"], ",".join(row["series"]) or "-",
               *(row[word] for word in STATES.values())] for row in listed]
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths,
                                                                      strict=True)).rstrip()
                     for line in table)
