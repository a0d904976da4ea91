"""`sparkbake recipe`: a tag's or a release's sparkrun recipe, as YAML on stdout or --out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sparkbake.config.versions import Tag
from sparkbake.errors import UsageError
from sparkbake.files import atomic_write
from sparkbake.run import Run
from sparkbake.sparkrun import recipes

__all__ = ["local_image_id", "recipe", "recipe_release", "to_yaml"]


def recipe(args: argparse.Namespace, run: Run, tag: Tag) -> int:
    made = recipes.recipe_for(run, tag, model=args.model, env_file=args.env_file,
                              local=args.local)
    if args.local and (image_id := local_image_id(run, tag)) is not None:
        made["metadata"]["sparkbake"]["image_id"] = image_id
    return _write(to_yaml(made), args.out, run)


def local_image_id(run: Run, tag: Tag) -> str | None:
    """The ID of the engine's image of the tag, which its reference names now; None without
    an engine or that image (the recipe names the reference either way)."""
    from sparkbake.oci import docker_engine

    client = docker_engine.engine_or_none(run.settings)
    attrs = docker_engine.image_attrs_or_none(client, tag.image_ref) if client else None
    return str(attrs["Id"]) if attrs else None


def recipe_release(args: argparse.Namespace, run: Run, release: str) -> int:
    """A multi-platform release: one recipe on its index, each node's engine taking its
    platform's image from it."""
    if args.local:
        raise UsageError(f"{release} is a multi-platform tag: its local images are one per "
                         "platform, and a recipe names one image",
                         "name one platform's tag with --local "
                         f"({', '.join(run.config.releases[release])}), or publish it")
    record = recipes.published(run, release)
    first = run.config.targets(release)[0]
    made = recipes.recipe_for(run, first, record, model=args.model, env_file=args.env_file)
    return _write(to_yaml(made), args.out, run)


def to_yaml(recipe: dict[str, Any]) -> str:
    """The recipe as YAML, its keys in the order made (sparkrun reads any order)."""
    import yaml  # only this command writes YAML

    return str(yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True, width=100))


def _write(text: str, out: Path | None, run: Run) -> int:
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        atomic_write(out, text)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot be written ({exc.strerror})",
                         "give a file in a folder you can write") from None
    run.console.notice(f"recipe: {out}")
    return 0
