"""The stages' names and states: the one place a stage name is spelled."""

from __future__ import annotations

import enum
from typing import Literal

__all__ = ["BUILD", "PlanState", "RunState", "Stage"]


class Stage(enum.StrEnum):
    """A stage as users see it: in stage lines, logs (build/logs/<tag>/<stage>.log), the plan
    and --json. A StrEnum, so the name prints and serialises as its value."""

    FETCH = "fetch"
    PATCH = "patch"
    KERNELS = "kernels"  # the compiled extensions' cache, inside the wheels stage
    WHEELS = "wheels"
    BAKE = "bake"
    SMOKE = "smoke"
    PUBLISH = "publish"
    DEPLOY = "deploy"
    LOCK = "lock"  # beside the pipeline: `sparkbake lock`
    PATCH_TESTS = "patch-tests"  # beside the pipeline: `sparkbake patch-tests`
    REBASE_CHECK = "rebase-check"  # beside the pipeline: `sparkbake rebase-check`


# what build-image runs, in order; each stage needs the products of the ones before it
BUILD = (Stage.FETCH, Stage.PATCH, Stage.WHEELS, Stage.BAKE)

# how a stage ended in this run (its line and --json)
RunState = Literal["ran", "cached", "failed", "interrupted"]

# what `plan` says of a stage before running it: cached = the next run skips it
PlanState = Literal["cached", "missing", "stale", "unknown", "blocked"]
