"""sparkrun's `sparkbake` builder: a recipe's image built, or its release verified, by sparkbake.

sparkrun imports this module from the folder `sparkbake sparkrun-plugin-path` prints, under
its own Python and packages, which need not hold sparkbake's: it imports sparkrun and the
standard library only, and runs the `sparkbake` on PATH as a process. A recipe names it with
`builder: sparkbake` and these keys of `builder_config`:

    tag:     the tag of versions.yaml (required)
    source:  release (the default): the recipe's image, pinned by digest, verified in its
             registry (`verify-release --key KEY`) and handed on as it is, for sparkrun's
             distribution to pull that digest;
             build: `build-image TAG` in the project, then the image by its ID (the digest
             of its config: a local build has no registry digest)
    project: the folder of versions.yaml (default: the current directory)
    key:     the publisher's public key (PATH.pub of `sparkbake keys generate`), for release

Every failure is one line, raised as sparkrun takes a builder's error.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkrun.builders.base import BuilderPlugin
from sparkrun.core.recipe import Recipe
from sparkrun.core.validation import RecipeIssue

__all__ = ["CONFIG_KEYS", "SOURCES", "SparkbakeBuilder", "SparkbakeFailed", "config_findings",
           "error_line"]

SPARKRUN_PLUGIN_API_VERSION = 1  # the plugin API of sparkrun 0.4 (it skips a module without)
CONFIG_KEYS = ("tag", "source", "project", "key")
SOURCES = ("release", "build")
ERROR_PREFIX = "sparkbake: error: "


class SparkbakeFailed(RuntimeError):
    """The builder's config is wrong, or sparkbake refused or failed: one line."""

    def __init__(self, message: str) -> None:
        super().__init__(f"[sparkbake] {message}")


def config_findings(config: Mapping[str, object], image: str) -> list[str]:
    """What is wrong with a recipe's builder_config (and, for a release, its image)."""
    findings = [f"builder_config.{key} is not a key of this builder "
                f"(it reads {', '.join(CONFIG_KEYS)})" for key in config if key not in CONFIG_KEYS]
    if not isinstance(config.get("tag"), str) or not config.get("tag"):
        findings.append("builder_config.tag is required: the sparkbake tag to build or verify")
    source = config.get("source", "release")
    if source not in SOURCES:
        findings.append(f"builder_config.source is {source!r}: set release or build")
    elif source == "release":
        findings += release_findings(config, image)
    return findings


def release_findings(config: Mapping[str, object], image: str) -> list[str]:
    findings = []
    if not config.get("key"):
        findings.append("builder_config.key is required for source: release: the publisher's "
                        "public key (PATH.pub of `sparkbake keys generate`)")
    if "@sha256:" not in image:
        findings.append(f"container {image!r} is not pinned by digest: write the recipe with "
                        "`sparkbake recipe TAG`, or set builder_config.source: build")
    return findings


def error_line(stderr: str) -> str:
    """sparkbake's error and its remedy (`-> ...`), from its stderr, in one line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "it printed no error"
    starts = [at for at, line in enumerate(lines) if line.startswith(ERROR_PREFIX)]
    at = starts[-1] if starts else len(lines) - 1
    message = lines[at].removeprefix(ERROR_PREFIX)
    after = lines[at + 1] if at + 1 < len(lines) else ""
    return f"{message} ({after.removeprefix('-> ')})" if after.startswith("->") else message


def run_sparkbake(folder: Path, *args: str) -> str:
    """`sparkbake -q ARGS` in FOLDER: its stdout, or its error as SparkbakeFailed."""
    program = shutil.which("sparkbake")
    if program is None:
        raise SparkbakeFailed("no `sparkbake` on PATH where sparkrun runs: install sparkbake "
                              "there, or put its environment's bin folder on PATH")
    done = subprocess.run([program, "-q", *args], cwd=folder, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SparkbakeFailed(f"sparkbake {' '.join(args[:2])} failed (exit {done.returncode}): "
                              f"{error_line(done.stderr)}")
    return done.stdout


def project_folder(config: Mapping[str, object]) -> Path:
    folder = Path(str(config.get("project", "."))).expanduser().resolve()
    if not (folder / "versions.yaml").is_file():
        raise SparkbakeFailed(f"no versions.yaml in {folder}: set builder_config.project to "
                              "the sparkbake project's folder")
    return folder


def built_image(project: Path, tag: str) -> str:
    """`build-image TAG` (a no-op when it is built), then the image's ID, `sha256:...`."""
    out = run_sparkbake(project, "build-image", tag, "--json")
    try:
        return str(json.loads(out)["config"])
    except (ValueError, KeyError, TypeError):
        raise SparkbakeFailed(f"sparkbake build-image {tag} --json printed no image "
                              "config digest") from None


def verified_release(config: Mapping[str, object], image: str) -> str:
    """The release's signature, statements and SBOM checked in its registry, by digest."""
    key = Path(str(config["key"])).expanduser().resolve()
    if not key.is_file():
        raise SparkbakeFailed(f"builder_config.key: no file {key}")
    run_sparkbake(Path.cwd(), "verify-release", image, "--key", str(key))
    return image


class SparkbakeBuilder(BuilderPlugin):
    """`builder: sparkbake`: the tag's image by digest, built here or verified in its registry."""

    builder_name = "sparkbake"

    def prepare(self, image: str, recipe: Recipe, hosts: list[str], config: Any = None,
                dry_run: bool = False, transfer_mode: str = "local",
                ssh_kwargs: dict[str, Any] | None = None,
                builder_context: Mapping[str, Any] | None = None) -> str:
        settings = recipe.builder_config
        findings = config_findings(settings, image)
        if findings:
            raise SparkbakeFailed(findings[0])
        if dry_run:
            return image
        if settings.get("source", "release") == "build":
            return built_image(project_folder(settings), str(settings["tag"]))
        return verified_release(settings, image)

    def pull_ref(self, image: str, recipe: Recipe, config: Any = None) -> str | None:
        """A release is pulled by the digest it was verified by; a build has none to pull."""
        return None if recipe.builder_config.get("source", "release") == "build" else image

    def validate_recipe(self, recipe: Recipe) -> list[str | RecipeIssue]:
        findings = config_findings(recipe.builder_config, recipe.container)
        return [self.recipe_error(finding) for finding in findings]
