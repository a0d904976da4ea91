"""bin/bench_ci.py's reading of .ci/run's trace."""

from __future__ import annotations

import bench_ci

TRACE = """\
++++ 99.9 source .ci/run
+++++ 100.0 set -euo pipefail
++++++ 100.1 dirname .ci/run
+++++ 100.2 cd .ci/..
+++++ 100.5 bash scripts/host-setup
Docker engine: 20.10.24+dfsg1 (overlay2)
+++++ 130.5 python3 -m nox -s lint
nox > Session lint was successful in 2 minutes.
+++++ 250.0 python3 -m nox -s tests -- tests/unit tests/smoke
"""

def test_each_step_of_the_script_is_timed_until_the_next_and_the_last_until_the_end() -> None:
    assert bench_ci.step_times(TRACE, 400.0) == [
        {"command": "bash scripts/host-setup", "seconds": 30},
        {"command": "python3 -m nox -s lint", "seconds": 120},  # 119.5, rounded
        {"command": "python3 -m nox -s tests -- tests/unit tests/smoke", "seconds": 150}]


def test_the_sessions_timed_are_those_the_tests_know() -> None:
    from tests.conftest import REQUIRED_SESSIONS

    # the real vLLM builds take hours on 2 cores: timed by hand, in the closing notes
    assert set(bench_ci.SESSIONS) == set(REQUIRED_SESSIONS) - {"repro-vllm", "serve-cpu"}


def test_the_runs_leave_the_sessions_venv_out_of_path() -> None:
    env = bench_ci._outside_venv({"VIRTUAL_ENV": "/w/.nox/bench-ci", "CI": "x",
                                  "PATH": "/w/.nox/bench-ci/bin:/usr/bin:/bin"})
    assert env == {"CI": "x", "PATH": "/usr/bin:/bin"}


def test_sessions_not_timed_again_keep_their_figures_and_the_commit_they_were_timed_at() -> None:
    earlier = {"commit": "a" * 40, "sessions": {
        "prove_faults": {"minutes": 1.8, "passed": True},
        "prove_arm64": {"minutes": 28.8, "passed": True, "commit": "b" * 40}}}
    timed = {"prove_arm64": {"minutes": 50.1, "passed": True, "commit": "c" * 40}}
    assert bench_ci.kept_sessions(earlier, timed) == {
        "prove_faults": {"minutes": 1.8, "passed": True, "commit": "a" * 40},
        "prove_arm64": {"minutes": 50.1, "passed": True, "commit": "c" * 40}}
    assert bench_ci.kept_sessions({}, timed) == timed
