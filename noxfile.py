"""Each session installs sparkbake and calls its CLI; the logic lives in src/sparkbake."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]

# Every CLI command as a session of its own name (`nox -s plan -- TAG`): its arguments and
# what it does, as the CLI's help says it (tests/unit/test_noxfile.py compares them).
COMMANDS = {  # command: (its arguments, what it does)
    "tags": ("", "every tag: platform, series, built, smoked, published"),
    "plan": ("TAG", "each stage's key and state, and what changed since the last build"),
    "lock": ("TAG", "resolve the tag's builder and runtime locks (and its CMake sources)"),
    "fetch": ("TAG", "fetch the pinned upstream tree, remote patches and third-party sources"),
    "patch": ("TAG", "apply the tag's series to the pristine tree"),
    "patch-tests": ("TAG", "run the tests the series add or change, on the CPU"),
    "wheels": ("TAG", "build the wheels (or assemble them around cached kernels)"),
    "build-image": ("TAG", "fetch, patch, wheels and bake the tag's image"),
    "smoke": ("TAG", "check the tag's image in the engine"),
    "publish": ("TAG", "push the smoked image to its registry and record it"),
    "verify": ("TAG", "rebuild the tag from clean and compare it with the baked image"),
    "deploy": ("TAG --hosts NODES", "pull the release onto each node's engine and smoke it there"),
    "registry": ("start|stop|status", "the embedded local registry"),
    "check-env": ("NODE.env --tag TAG", "preflight a node's .env for a tag"),
    "node-files": ("TAG --nodes ADDR,ADDR --out DIR", "one .env per node, checked together"),
    "up": ("TAG NODE.env ...", "bring the tag up on its nodes: workers, then the head"),
    "down": ("TAG", "remove the containers up started"),
    "status": ("TAG", "each node's container and the head's /health"),
    "logs": ("TAG", "the last lines of each node's engine log"),
    "clean": ("TAG|--all", "remove a tag's build trees, wheels and records"),
    "gc": ("", "remove what no tag uses now"),
    "patch-lint": ("", "check every series folder and patch"),
    "export-series": ("DIR SERIES", "commits of a checkout -> a series"),
    "import-series": ("--from REPO --range A..B SERIES", "a commit range of a fork -> a series"),
    "rebase-check": ("TAG --to UPSTREAM", "would the series apply to UPSTREAM?"),
    "releases": ("", "the published releases (build/releases)"),
    "diff": ("TAG TAG", "what changed between two releases"),
    "keys": ("generate PATH", "the key pair publish signs with"),
    "verify-release": ("REFERENCE --key PUB", "check a published image's signature and "
                                               "statements"),
}


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


@nox.session
def bench(session: nox.Session) -> None:
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


@nox.session(name="bench-cache")
def bench_cache(session: nox.Session) -> None:
    """The compile cache and the kernel arch list; writes benchmarks/compile-cache.json."""
    session.install(".")
    session.run("python", "bin/bench_cache.py", *session.posargs)


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
                           "Redis down, cache off).",
    "repro-builds": "Second clean builds that re-prove a digest: a planted difference, "
                    "a signed image not built from its pins, two cp -r copies.",
    "repro-one-step": "Four more pairs of clean builds of a one-step nvcc library, cache on "
                      "and off.",
    "repro-vllm": "The real vLLM images (x86_64 and the arm64 fast path) built twice from "
                  "clean each.",
    "serve-cpu": "vLLM served from the cpu-3.73 image (compiled for the CPU, cold if not "
                 "built): every serve check against the real server, right and wrong; up, "
                 "status, logs and down on two nodes of this host.",
}


def _required(name: str, summary: str) -> None:
    @nox.session(name=name)
    def required_session(session: nox.Session) -> None:
        session.install(".[test]")
        session.run("pytest", "--required-by", name, *session.posargs)

    required_session.__doc__ = summary


for _name, _summary in REQUIRED.items():
    _required(_name, _summary)


def _cli(command: str, arguments: str, what: str) -> None:
    @nox.session(name=command)
    def session_for_command(session: nox.Session) -> None:
        session.install(".")
        session.run("sparkbake", command, *session.posargs)

    usage = f"{command} {arguments}" if arguments else command
    session_for_command.__doc__ = f"sparkbake {usage}: {what}"


for _command, (_arguments, _what) in COMMANDS.items():
    _cli(_command, _arguments, _what)
