"""Entrypoint smoke checks: the image's own entrypoint, run on the smoke suite's sample
.env files. `accept` samples: `ENTRYPOINT --print` prints exactly the command the host
computed with the same entrypoint code. `reject` samples: the preflight refuses them with
exit 2, for the rules the sample names. Standard library only."""

from __future__ import annotations

import os
import shlex
import subprocess
from typing import Any

from smoke_common import CheckFailed, CheckSkipped, Image

TIMEOUT = 120


def entrypoint(expected: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The suite's part of the expected values and the image's entrypoint argv."""
    if "entrypoint" not in expected:
        raise CheckSkipped("not asked: the host gave no smoke suite")
    spec: dict[str, Any] = expected["entrypoint"] or {}
    argv = spec.get("argv")
    if not argv:
        raise CheckFailed("the image has no entrypoint (its config's Entrypoint is empty)")
    return spec, [str(arg) for arg in argv]


def run_entrypoint(argv: list[str], sample_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The entrypoint as `docker run -e ...` would start it: the image's env, then the sample."""
    return subprocess.run(argv, env={**os.environ, **sample_env}, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def first_difference(printed: str, wanted: str) -> str:
    got, want = shlex.split(printed), shlex.split(wanted)
    for index, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"word {index + 1} is {a!r}, the host's command has {b!r}"
    return f"it prints {len(got)} words, the host's command has {len(want)}"


def check_entrypoint_print(image: Image, expected: dict[str, Any]) -> str:
    spec, argv = entrypoint(expected)
    samples: list[dict[str, Any]] = spec.get("accept", [])
    if not samples:
        raise CheckSkipped(f"smoke suite {spec.get('suite')!r} has no accept/*.env sample")
    wrong = []
    for sample in samples:
        done = run_entrypoint([*argv, "--print"], sample["env"])
        printed = done.stdout.strip()
        if done.returncode != 0:
            wrong.append(f"{sample['name']}: exit {done.returncode}: {last_line(done.stderr)}")
        elif printed != sample["command"]:
            wrong.append(f"{sample['name']}: {first_difference(printed, sample['command'])}")
    if wrong:
        raise CheckFailed("; ".join(wrong))
    names = ", ".join(s["name"] for s in samples)
    return (f"{len(samples)} sample(s) of suite {spec.get('suite')} print the host's "
            f"command: {names}")


def check_preflight_rejects(image: Image, expected: dict[str, Any]) -> str:
    spec, argv = entrypoint(expected)
    samples: list[dict[str, Any]] = spec.get("reject", [])
    if not samples:
        raise CheckSkipped(f"smoke suite {spec.get('suite')!r} has no reject/*.env sample")
    wrong, refused = [], []
    for sample in samples:
        # --print still runs the preflight; without MODEL it would name the image instead,
        # so then the entrypoint runs bare: with no MODEL it can never exec vllm
        with_model = bool({**os.environ, **sample["env"]}.get("MODEL"))
        done = run_entrypoint([*argv, "--print"] if with_model else argv, sample["env"])
        errors = [line for line in done.stderr.splitlines() if "error: " in line]
        missing = [rule for rule in sample.get("rules", [])
                   if not any(line.rstrip().endswith(f"[{rule}]") for line in errors)]
        if done.returncode != 2:
            wrong.append(f"{sample['name']}: exit {done.returncode}, expected 2 (the preflight "
                         f"did not refuse it): {last_line(done.stderr)}")
        elif missing:
            wrong.append(f"{sample['name']}: refused, but not for {', '.join(missing)} "
                         f"({last_line(chr(10).join(errors))})")
        else:
            refused.append(f"{sample['name']} [{', '.join(sample.get('rules', []))}]")
    if wrong:
        raise CheckFailed("; ".join(wrong))
    return f"{len(refused)} sample(s) refused with exit 2: {'; '.join(refused)}"
