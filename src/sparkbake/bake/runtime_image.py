"""bake: the runtime image of a tag, written layer by layer by sparkbake, reproducibly.

The image is the runtime base's layers (exported from the engine once, compressed once per
host) and the layers made here, by rate of change: /opt/venv split by file (the runtime
packages in a layer per group of packages that move together, the upstream's compiled
libraries, the rest of the upstream's files: see `venvlayers`, each blob kept by its key in
build/layers) and /opt/sparkbake (manifest.json and the files images/runtime.json lists).
Layers, config and manifest carry the source date as their only time (`layers`, `oci`), so
the same inputs give the same digest. They go into build/oci, an OCI image layout, and the
image is loaded into the engine as `<repository>:<tag>` for smoke and publish, and the
image's SBOM (attest.sbom, made from its layers) goes beside it as `<tag>.sbom`.
`make_image` is the one entry point.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbake import bases, records, resources
from sparkbake.bases import BaseImage
from sparkbake.console.display import Console
from sparkbake.console.tools import step
from sparkbake.core.folders import Folders
from sparkbake.core.stages import Stage
from sparkbake.errors import BakeError
from sparkbake.files import scratch_dir
from sparkbake.hashing import data_hash
from sparkbake.oci import engine_socket, image_layout
from sparkbake.oci.docker_engine import (
    Client,
    image_attrs,
    image_attrs_or_none,
    image_exists,
    image_labels,
    load_stream,
)
from sparkbake.patch.apply import PatchedTree
from sparkbake.planning import Plan, upstream_pin
from sparkbake.run import Run
from sparkbake.wheels.container_build import WheelSet
from sparkbake.wheels.report import WheelsReport

if TYPE_CHECKING:
    from sparkbake.bake import baselayers, venvlayers
    from sparkbake.oci import layers

__all__ = ["WHEELS_LABEL", "Bake", "Image", "current_in_local_engine", "find", "is_current",
           "labels", "make_image", "manifest", "wheels_content"]

INPUTS_LABEL = "dev.sparkbake.inputs"  # the bake key: an image is current when it matches
TAG_LABEL = "dev.sparkbake.tag"
WHEELS_LABEL = "dev.sparkbake.wheels"  # the wheels' content: a rebuilt wheel is another image
RUNTIME = "runtime.json"


@dataclass(frozen=True)
class Image:
    """A baked image in an OCI layout: its manifest and config digest (the engine's id)."""

    ref: str
    image: image_layout.Descriptor
    config: str
    layout: Path


def manifest(plan: Plan, base: BaseImage, wheels: WheelSet, patched: PatchedTree,
             source_date: int, cuda_home: str | None = None) -> dict[str, Any]:
    """What went into the image, recorded inside it (how it was built, such as the job
    count, is host state: the wheels report and the release record keep that)."""
    from sparkbake.lock import requirements

    tag, built = plan.tag, wheels.report
    return {
        "schema": 1, "tag": tag.name, "image": tag.image_ref, "inputs": plan.inputs,
        "upstream": {"key": tag.upstream.key, **upstream_pin(tag.upstream)},
        "source_date_epoch": source_date,
        "series": [{"name": s.name, "sha256": s.sha256,
                    "patches": [s.record(f, h) for f, h in s.patches]}
                   for s in plan.series],
        "patched_tree": patched.tree_hash,
        "cuda_arch": tag.cuda_arch, "sm_arch": tag.sm_arch, "platform": str(tag.platform),
        "env": dict(tag.env),
        # what the entrypoint's preflight enforces; absent: nothing declared
        **({"capabilities": tag.capabilities.as_dict()} if tag.capabilities else {}),
        "base": {"name": base.name, "image": base.ref, "digest": base.digest},
        "wheels": [records.to_json(wheel) for wheel in built.wheels], "nvcc": built.nvcc,
        # CMake's downloads as locked, for a tree that has them
        **({"thirdparty": [records.to_json(source) for source in built.thirdparty]}
           if built.thirdparty else {}),
        # the distributions the tag asks for by name (extras, pins), and the JIT toolchain
        **({"asked": [records.to_json(a) for a in requirements.asked(tag, patched.path)]}
           if tag.extras.items or tag.pins.items else {}),
        **({"jit": _jit(cuda_home)} if cuda_home else {}),
    }


def _jit(cuda_home: str) -> dict[str, Any]:
    jit = _runtime()["jit"]
    return {"cuda_home": cuda_home, "cache": jit["cache"],
            "env": {"CUDA_HOME": cuda_home, **jit["env"]}, "path": f"{cuda_home}/bin"}


def labels(plan: Plan, base: BaseImage, patched: PatchedTree, source_date: int) -> dict[str, str]:
    tag = plan.tag
    pin = upstream_pin(tag.upstream)
    return {
        "org.opencontainers.image.version": tag.name,
        "org.opencontainers.image.revision": patched.tree_hash,
        "org.opencontainers.image.source": _source(pin),
        "org.opencontainers.image.created": image_layout.rfc3339(source_date),
        "org.opencontainers.image.base.name": base.ref,
        "org.opencontainers.image.base.digest": base.digest,
        TAG_LABEL: tag.name,
        "dev.sparkbake.upstream": f"{tag.upstream.key} " + json.dumps(pin, sort_keys=True),
        "dev.sparkbake.series": plan.series_label(),
        INPUTS_LABEL: plan.inputs,
        "dev.sparkbake.cuda-arch": tag.cuda_arch,
    }


def _source(pin: dict[str, str]) -> str:
    if pin["kind"] == "git":
        return pin["url"]
    if pin["kind"] == "pypi":
        return f"pypi:{pin['name']}=={pin['version']}"
    return f"dir:{pin['path']}"


def find(layout: Folders, plan: Plan, *, console: Console) -> Image | None:
    """The tag's image as build/oci names it, if it is there with every blob intact (a
    damaged blob is removed: the bake makes it again)."""
    oci = image_layout.Layout(layout.oci, console)
    image = oci.find(plan.tag.name)
    if image is None or oci.damaged(image):
        return None
    config = oci.read_manifest(image.digest).config.digest
    return Image(plan.tag.image_ref, image, config, oci.root)


def wheels_content(report: WheelsReport) -> str:
    """The wheels' content as wheels.json records it (file and sha256 of each): the image's
    WHEELS_LABEL, so that other wheels of the same inputs make another image."""
    return data_hash(sorted([wheel.file, wheel.sha256] for wheel in report.wheels))


def is_current(attrs: dict[str, Any] | None, plan: Plan, layout: Folders,
               wheels: str | None, *, console: Console) -> bool:
    """The engine's image of the tag (attrs, its attributes; None: it has none) was baked
    from exactly these inputs and these wheels (wheels_content; None: not known yet, as for
    `plan` before the wheels stage), and it is the image build/oci names (the one publish
    pushes)."""
    return _current(attrs, plan, layout, wheels, console=console) is not None


def _current(attrs: dict[str, Any] | None, plan: Plan, layout: Folders,
             wheels: str | None, *, console: Console) -> Image | None:
    """The tag's image in build/oci if the engine's (attrs) is it: see is_current."""
    if attrs is None:
        return None
    found = image_labels(attrs)
    if found.get(INPUTS_LABEL) != plan.inputs:
        return None
    if wheels is not None and found.get(WHEELS_LABEL) != wheels:
        return None
    baked = find(layout, plan, console=console)
    return baked if baked is not None and baked.config == attrs["Id"] else None


def current_in_local_engine(plan: Plan, layout: Folders, wheels: WheelSet,
                            environ: Mapping[str, str], *, console: Console) -> Image | None:
    """The tag's image, said to be current, when a local engine has it from these inputs
    and wheels, asked over its socket without the Docker SDK; None when it has not, or the
    engine is not local or does not answer there: the bake then asks through the SDK, which
    says what is wrong."""
    path = engine_socket.local_socket(environ)
    if path is None:
        return None
    try:
        attrs = engine_socket.inspect_image(path, plan.tag.image_ref)
    except OSError:
        return None
    current = _current(attrs, plan, layout, wheels_content(wheels.report), console=console)
    return None if current is None else _said_current(current, plan, console=console)


def _said_current(image: Image, plan: Plan, *, console: Console) -> Image:
    console.cached(Stage.BAKE, f"bake: {image.ref} is current (inputs {plan.inputs[:12]}), "
                   "nothing to do")
    return image


@dataclass(frozen=True)
class Bake:
    """What one tag's image is made of: the plan, the runtime base, the tag's wheels and
    patched tree, the source date (the image's only time), the stage's log, and the
    wheelhouse of the tag's runtime lock, if it has one; load: into the engine too (False:
    the engine's tag is left alone, as verify's rebuild does)."""

    plan: Plan
    base: BaseImage
    wheels: WheelSet
    patched: PatchedTree
    source_date: int
    log: Path
    runtime_wheels: Path | None = None
    runtime_lock: Path | None = None
    load: bool = True


def make_image(client: Client, run: Run, bake: Bake) -> Image:
    """Write the tag's image into the run's build/oci and (bake.load) into the engine as
    `<repository>:<tag>`, unless the engine has it from these inputs. The host's cache (the
    run's settings) holds the base layers."""
    # the writers are imported here, not above: a no-op build (the image current) needs none
    from sparkbake.attest import stored
    from sparkbake.bake import baselayers, venvlayers
    from sparkbake.bake.layercache import LayerCache

    plan, base, wheels, patched = bake.plan, bake.base, bake.wheels, bake.patched
    source_date, load = bake.source_date, bake.load
    layout, settings, console = run.folders, run.settings, run.console
    content = wheels_content(wheels.report)
    if load and (current := _current(image_attrs_or_none(client, plan.tag.image_ref), plan,
                                     layout, content, console=console)) is not None:
        return _said_current(current, plan, console=console)
    oci = image_layout.Layout(layout.oci, console)
    with step(console, f"bake {plan.tag.image_ref}"), \
            scratch_dir(layout.scratch("contexts"), "bake.") as work:
        runtime = bases.with_python(client, base, layout.scratch("contexts"),
                                    settings.cache_dir / "python-venv", console=console)
        workers = settings.compress_workers
        below = baselayers.ensure(client, runtime,
                                  image_layout.Layout(settings.cache_dir / "layers",
                                                      console), oci, work,
                                  workers, console=console)
        packages = _venv_packages(plan, wheels, bake.runtime_wheels, bake.runtime_lock,
                                  patched)
        # a rebuild that is not loaded (verify's) compiles every file: it re-proves the bytes
        bytecode = settings.bytecode_cache if load else None
        venv = venvlayers.make_layers(client, runtime, packages, LayerCache(layout.layers, oci),
                                      work, source_date, bake.log, workers, bytecode,
                                      console=console)
        recorded = manifest(plan, base, wheels, patched, source_date, venv.cuda_home)
        files = _files_layer(recorded, work, source_date, workers)
        added = [*venv.added, (files, "sparkbake: /opt/sparkbake")]
        baked = _write(oci, plan, below, added, labels(plan, base, patched, source_date)
                       | {WHEELS_LABEL: content}, source_date, recorded.get("jit"))
        console.detail(f"bake: {plan.tag.image_ref} = {baked.image.digest} (config "
                       f"{baked.config[:19]})")
        stored.ensure_sbom(oci, plan.tag.name, baked.image, console=console)
        if load:
            _load(client, baked, below, console=console)
            with layout.loaded_images.open("a") as record:  # whole lines: one bake at a time
                record.write(baked.config + "\n")
    return baked


def _names(wheels: WheelSet) -> list[str]:
    return sorted({wheel.name for wheel in wheels.report.wheels})


def _runtime() -> dict[str, Any]:
    described: dict[str, Any] = json.loads(resources.path(RUNTIME).read_text())
    return described


def _venv_packages(plan: Plan, built: WheelSet, house: Path | None, lock: Path | None,
                   patched: PatchedTree) -> venvlayers.VenvPackages:
    """What goes into /opt/venv: the tag's wheels (and the runtime wheelhouse's, with what
    the tag asks for by name)."""
    from sparkbake.bake import venvlayers
    from sparkbake.lock import requirements

    asked = tuple(a.name for a in requirements.asked(plan.tag, patched.path)) if house else ()
    return venvlayers.VenvPackages(plan.tag.image_ref, plan.tag.platform, built.folder,
                                   tuple(_names(built)), house, lock, asked, plan.kernel_key,
                                   patched.tree_hash)


def _files_layer(recorded: dict[str, Any], work: Path, source_date: int,
                 workers: int) -> layers.Layer:
    from sparkbake.oci import layers

    text = json.dumps(recorded, indent=2, sort_keys=True) + "\n"
    files: dict[str, tuple[bytes | None, int]] = {
        "opt/sparkbake/manifest.json": (text.encode(), 0o644)}
    if "jit" in recorded:  # any user the container runs as compiles into it
        files[recorded["jit"]["cache"].lstrip("/")] = (None, 0o1777)
    for name in _runtime()["files"]:
        files[f"opt/sparkbake/{name}"] = (resources.path(name).read_bytes(), 0o644)
    return layers.from_files(files, work / "files.tar.gz", source_date, workers=workers)


def _write(layout: image_layout.Layout, plan: Plan, below: baselayers.Below,
           added: list[tuple[layers.Layer, str]], label_map: dict[str, str],
           source_date: int, jit: dict[str, Any] | None) -> Image:
    from sparkbake.oci import layers

    runtime = _runtime()
    path = runtime["path"] + (f":{jit['path']}" if jit else "")
    env = plan.tag.env + tuple(sorted((jit or {}).get("env", {}).items()))
    new = [layout.add_file(layer.path, layer.digest, layers.MEDIA_TYPE) for layer, _ in added]
    change = image_layout.ConfigChange(
        created=source_date, platform=plan.tag.platform,
        layers=tuple((layer.diff_id, what) for layer, what in added), env=env,
        path=path, labels=tuple(sorted(label_map.items())),
        entrypoint=tuple(runtime["entrypoint"]))
    config_json = image_layout.image_config(below.config, change)
    config = layout.add_bytes(image_layout.canonical(config_json), image_layout.CONFIG_TYPE)
    manifest_json = image_layout.manifest(config, [*below.layers, *new])
    image = layout.add_bytes(image_layout.canonical(manifest_json), image_layout.MANIFEST_TYPE)
    layout.tag(plan.tag.name, image)
    return Image(plan.tag.image_ref, image, config.digest, layout.root)


def _load(client: Client, baked: Image, below: baselayers.Below, *, console: Console) -> None:
    """docker load the image, streamed from build/oci (no copy of its blobs on disk); the
    layers the engine has stay out of the archive: the base's, and those the tag's image
    loaded before starts with (the cached runtime packages' layers are not loaded again)."""
    layout = image_layout.Layout(baked.layout, console)
    omit = frozenset(layer.digest for layer in below.layers) | _loaded_before(client, baked,
                                                                              console=console)
    # closed at once when the load fails, not when the generator is freed: its open blob
    with step(console, "load into the engine"), contextlib.closing(
            image_layout.docker_archive(layout, baked.image, baked.ref, omit)) as archive:
        load_stream(client, archive, baked.ref, error=BakeError)
    loaded = str(client.images.get(baked.ref).id)
    if loaded != baked.config:
        raise BakeError(f"the engine loaded {baked.ref} as {loaded[:19]}, not as its config "
                        f"{baked.config[:19]}", "check the Docker engine's image store")


def _loaded_before(client: Client, baked: Image, *, console: Console) -> frozenset[str]:
    """The blobs of the layers the engine's image of the tag shares with baked, from the
    bottom up: the engine has each of them on the same layers below (the same chain)."""
    if not image_exists(client, baked.ref):
        return frozenset()
    engine = image_attrs(client, baked.ref)["RootFS"].get("Layers") or []
    layout = image_layout.Layout(baked.layout, console)
    diff_ids = layout.read_json(baked.config)["rootfs"]["diff_ids"]
    blobs = [layer["digest"] for layer in layout.read_json(baked.image.digest)["layers"]]
    shared = 0
    while shared < min(len(engine), len(diff_ids)) and engine[shared] == diff_ids[shared]:
        shared += 1
    return frozenset(blobs[:shared])
