"""sparkrun's `sparkbake` builder: a recipe's image built, or its release verified, by sparkbake.

sparkrun imports this module from the folder `sparkbake sparkrun-plugin-path` prints, under
its own Python and packages, which need not hold sparkbake's: it imports sparkrun, its
dependency PyYAML and the standard library only, and runs the `sparkbake` on PATH as a
process. A recipe names it with
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

Its `register(v)` hook adds the recipe format `sparkbake`: a release record as publish writes
it (build/releases/RELEASE.json) is loaded by sparkrun as the recipe `sparkbake recipe
RELEASE` writes in its project, so `sparkrun run build/releases/RELEASE.json` runs it. A
format maps one file to one recipe, and a registry is a git checkout: a release's record is
its file, but the tags of versions.yaml share one file, so tags are not served; and
build/releases is no part of a project's repository, so sparkrun reaches a record by its path
(a format claims a local file by its content). A registry of this format lists the records in
its recipe folder, and makes a recipe of one only where the project's versions.yaml is two
folders up.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml  # sparkrun's own dependency
from sparkrun.builders.base import BuilderPlugin
from sparkrun.core.recipe import Recipe
from sparkrun.core.recipe_formats import RecipeFormat, register_recipe_format
from sparkrun.core.validation import RecipeIssue

__all__ = ["CONFIG_KEYS", "FORMAT", "SOURCES", "SparkbakeBuilder", "SparkbakeFailed",
           "config_findings", "error_line", "register", "release_recipe"]

SPARKRUN_PLUGIN_API_VERSION = 1  # the plugin API of sparkrun 0.4 (it skips a module without)
CONFIG_KEYS = ("tag", "source", "project", "key")
SOURCES = ("release", "build")
ERROR_PREFIX = "sparkbake: error: "
FORMAT = "sparkbake"  # the recipe format of our release records
RECORD_KEYS = frozenset({"tag", "digest", "pinned", "inputs", "upstream"})  # publish's record


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


def is_release_record(path: Path, data: Mapping[str, object]) -> bool:
    """A release record as publish writes it: build/releases/RELEASE.json."""
    return path.suffix == ".json" and path.parent.name == "releases" and set(data) >= RECORD_KEYS


def release_records(root: Path) -> list[Path]:
    """The release records in a folder (a registry's recipe folder), sorted."""
    found = []
    for path in sorted(root.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and is_release_record(path, data):
            found.append(path)
    return found


def release_name(path: Path, root: Path | None) -> str:
    return path.stem


def release_recipe(path: Path, *, registry_manager: object = None, offline: bool = False,
                   allow_local: bool = True) -> dict[str, Any]:
    """`sparkbake recipe RELEASE` of the project whose build/releases holds the record (it
    reads the project's versions.yaml and node files: a record fetched alone has none)."""
    project = Path(path).resolve().parents[2]
    if not allow_local or not (project / "versions.yaml").is_file():
        raise SparkbakeFailed(f"{path}: a release record is made a recipe from its project's "
                              "versions.yaml, two folders up (build/releases/RELEASE.json)")
    out = run_sparkbake(project, "--config", str(project / "versions.yaml"), "recipe",
                        Path(path).stem)
    recipe = yaml.safe_load(out)
    if not isinstance(recipe, dict):
        raise SparkbakeFailed(f"sparkbake recipe {Path(path).stem} printed no recipe")
    return recipe


def register(v: object) -> None:
    """sparkrun's hook: our release records served as recipes (`sparkrun run
    build/releases/RELEASE.json`, and a registry of format sparkbake)."""
    register_recipe_format(RecipeFormat(
        name=FORMAT, owner="sparkbake", iter_files=release_records, name_of=release_name,
        load=release_recipe, claims=is_release_record))


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
