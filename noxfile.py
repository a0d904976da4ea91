"""Each session installs sparkbake and calls its CLI; the logic lives in src/sparkbake."""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "src"))  # the table of commands, read as data
from sparkbake.command_table import COMMANDS, Command

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]

@nox.session
def tests(session: nox.Session) -> None:
    """The test suite; Docker tests need a running engine (see README)."""
    session.install(".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy --strict (images/*.py too), the import layers and patch-lint.

    On src, tests, the benchmark scripts (bin/), this file, the docs generator and the
    container-side scripts (images/*.py, standard library only)."""
    session.install(".[lint]")
    session.run("ruff", "check", "src", "tests", "bin", "noxfile.py", "docs", "images")
    session.run("mypy", "--strict", "src", "tests", "bin", "noxfile.py", "docs/gen_pages.py")
    # the scripts that run inside containers: standard library only, checked on their own
    session.run("mypy", "--strict", "images")
    session.run("lint-imports")  # the packages' layers (pyproject.toml)
    session.run("sparkbake", "patch-lint")


@nox.session
def docs(session: nox.Session) -> None:
    """The manual: pages generated from images/ and benchmarks/, then mkdocs --strict."""
    session.install("mkdocs==1.6.1", ".")  # sparkbake prints the commands the pages show
    session.run("python", "docs/gen_pages.py")
    session.run("mkdocs", "build", "--strict", "--site-dir", "build/site")


@nox.session(name="bench-patch")  # `bench` is the command's session (sparkbake bench TAG)
def bench_patch(session: nox.Session) -> None:
    """The patch stage on the real vLLM tree; writes benchmarks/patch-apply.json."""
    session.install(".")
    session.run("python", "bin/bench.py", *session.posargs)


@nox.session(name="bench-reuse")
def bench_reuse(session: nox.Session) -> None:
    """Kernel reuse on real vLLM vs a fixture compile; writes benchmarks/kernel-reuse.json."""
    session.install(".")
    session.run("python", "bin/bench_reuse.py", *session.posargs)


@nox.session(name="bench-incremental")
def bench_incremental(session: nox.Session) -> None:
    """A Python-only change: build-image and publish again; writes benchmarks/incremental-*."""
    session.install(".")
    session.run("python", "bin/bench_incremental.py", *session.posargs)


@nox.session(name="bench-cold")
def bench_cold(session: nox.Session) -> None:
    """The bake from cold with 1 and 2 compress workers; writes benchmarks/cold-*."""
    session.install(".")
    session.run("python", "bin/bench_cold.py", *session.posargs)


@nox.session(name="bench-lock-change")
def bench_lock_change(session: nox.Session) -> None:
    """One runtime lock package moved: build-image and publish before and after.

    Writes benchmarks/lock-change-*."""
    session.install(".")
    session.run("python", "bin/bench_lock_change.py", *session.posargs)


@nox.session(name="bench-noop")
def bench_noop(session: nox.Session) -> None:
    """A no-op build-image of demo, as a process and in-process; the CLI's import time.

    Writes benchmarks/noop-build-image-demo.json."""
    session.install(".")
    session.run("python", "bin/bench_noop.py", *session.posargs)


@nox.session(name="bench-sessions")
def bench_sessions(session: nox.Session) -> None:
    """What a command session adds to its command, after its environment is made once.

    Writes benchmarks/command-sessions.json."""
    session.install(".", "nox")
    session.run("python", "bin/bench_sessions.py", *session.posargs)


@nox.session(name="bench-cache")
def bench_cache(session: nox.Session) -> None:
    """The compile cache and the kernel arch list; writes benchmarks/compile-cache.json."""
    session.install(".")
    session.run("python", "bin/bench_cache.py", *session.posargs)


@nox.session(name="bench-farm")
def bench_farm(session: nox.Session) -> None:
    """The compile farm on the fixture (two local servers) and the four-Spark model; writes
    benchmarks/compile-farm.json."""
    session.install(".")
    session.run("python", "bin/bench_compile_farm.py", *session.posargs)


@nox.session(name="bench-ci")
def bench_ci(session: nox.Session) -> None:
    """A clean clone's CI=true .ci/run, step by step, and the sessions it leaves out.

    Writes benchmarks/ci.json."""
    session.install(".")
    session.run("python", "bin/bench_ci.py", *session.posargs)


@nox.session(name="backend-table")
def backend_table(session: nox.Session) -> None:
    """vLLM's verdict on every backend, asked in a built tag's image.

    Writes images/backend-verdicts.json."""
    session.install(".")
    session.run("python", "bin/backend_table.py", *session.posargs)


# The proofs that repeat a property, run before an issue of their area is resolved
# (docs/how-to/develop.md), not at every landing: tests marked required(SESSION).
REQUIRED = {
    "prove-arm64": "The production fast path for linux/arm64 under qemu, on vLLM 0.33.0 and "
                   "0.34.0: each seeded tag built, smoked (layer-weights and "
                   "backend-capability included) and published.",
    "prove-release": "The fixture released for two platforms (arm64 built and smoked under "
                     "qemu), published as one index through a cut link, deployed.",
    "prove-faults": "The later fault cases of the bake, the cache and publish.",
    "prove-compile-cache": "The compile cache's pairs of builds after the first (local cache, "
                           "Redis down, cache off), and the compile farm's faults (a server "
                           "killed mid-build, a wrong token).",
    "repro-builds": "Second clean builds that re-prove a digest: a planted difference, "
                    "a signed image not built from its pins, two cp -r copies.",
    "repro-one-step": "Four more pairs of clean builds of a one-step nvcc library, cache on "
                      "and off.",
    "repro-vllm": "The real vLLM images (x86_64 and the arm64 fast path) built twice from "
                  "clean each.",
    "serve-cpu": "vLLM served from the cpu-3.73 image (compiled for the CPU, cold if not "
                 "built): every serve check against the real server, right and wrong; up, "
                 "status, logs and down on two nodes of this host; the operator's path of "
                 "four-sparks.md, step by step; the image started as sparkrun starts it.",
}


def _required(name: str, summary: str) -> None:
    @nox.session(name=name)
    def required_session(session: nox.Session) -> None:
        session.install(".[test]")
        session.run("pytest", "--required-by", name, *session.posargs)

    required_session.__doc__ = summary


for _name, _summary in REQUIRED.items():
    _required(_name, _summary)


def _cli(command: Command) -> None:
    # every command session runs sparkbake from one shared environment (bin/cli_session.py)
    @nox.session(name=command.name, venv_backend="none")
    def session_for_command(session: nox.Session) -> None:
        session.run(sys.executable, "bin/cli_session.py", command.name, *session.posargs)

    usage = f"{command.name} {command.usage}".rstrip()
    session_for_command.__doc__ = f"sparkbake {usage}: {command.help}"


for _command in COMMANDS:
    _cli(_command)
