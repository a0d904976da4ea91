"""The real vLLM 0.33.0 for the in-image checks that need one: the patched tree of
production-3.73-vision (pure Python, nothing compiled) in the venv of its patch-tests lock,
under a fake image root whose site-packages records vllm 0.33.0+cu130, as a built image does.
The tree and the venv are the cached ones of `sparkbake patch-tests 3.73-vision`; those of
3.73-vision-vllm0.34 give vLLM 0.34.0 the same way."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from sparkbake import planning
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.core.stages import Stage
from sparkbake.nodes import sample_envs
from sparkbake.pipeline import stage_commands
from sparkbake.run import Run
from sparkbake.series import patchtests
from tests.conftest import plain_console, settings_of

REPO = Path(__file__).parents[2]
CHECKER = REPO / "images" / "smoke_check.py"
SITE = Path("opt/venv/lib/python3.11/site-packages")
VLLM_033 = "3.73-vision"  # the tags whose patched trees give each vLLM release
VLLM_034 = "3.73-vision-vllm0.34"


def patched_vllm(tag_name: str = VLLM_033) -> tuple[Path, Path]:
    """The patch-tests venv's python and the patched tree of a tag (made here if not
    cached)."""
    loaded = versions.load(REPO / "versions.yaml")
    tag = loaded.tag(tag_name)
    assert stage_commands.run_until(Run.of(loaded, Settings.of_process(), plain_console()), tag,
                                    Stage.PATCH) == 0
    tree = loaded.build_dir / "patched" / planning.make(loaded, tag).patch_key / "tree"
    venv = patchtests.environment(patchtests.require_lock(loaded, tag, tree,
                                                          settings=settings_of()),
                                  loaded.build_dir / "venvs", console=plain_console())
    return venv / "bin" / "python", tree


def suite_expected() -> dict[str, Any]:
    loaded = versions.load(REPO / "versions.yaml")
    suite = sample_envs.load(loaded, loaded.tag("3.73-vision"))
    return {"entrypoint": sample_envs.expected(suite, ["/opt/venv/bin/python", "entrypoint.py"])}


def fake_root(root: Path, rules: dict[str, Any] | None = None) -> Path:
    """/opt/sparkbake/preflight.json and a vllm 0.33.0+cu130 dist-info in site-packages."""
    (root / "opt/sparkbake").mkdir(parents=True)
    rules = rules or json.loads((REPO / "images" / "preflight.json").read_text())
    (root / "opt/sparkbake/preflight.json").write_text(json.dumps(rules))
    info = root / SITE / "vllm-0.33.0+cu130.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0+cu130\n")
    return root


def run_check(name: str, root: Path, expected: dict[str, Any], python: Path | str,
              pythonpath: str = "") -> dict[str, Any]:
    """One check of smoke_check.py, run with this Python on this image root."""
    (root / "expected.json").write_text(json.dumps(expected))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([str(python), "-B", str(CHECKER), "--root", str(root),
                           str(root / "expected.json")], capture_output=True, text=True,
                          env=env, check=False, timeout=300)
    checks = {c["name"]: c for c in json.loads(done.stdout.strip().splitlines()[-1])["checks"]}
    check: dict[str, Any] = checks[name]
    return check


