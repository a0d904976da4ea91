"""bake: the runtime image of a tag, written layer by layer by sparkbake, reproducibly.

The image is the runtime base's layers (exported from the engine once, compressed once per
host) and two layers made here: /opt/venv (the tag's wheels, installed offline in a
container of the base) and /opt/sparkbake (manifest.json and the files images/runtime.json
lists). Layers, config and manifest carry the source date as their only time (`layers`,
`oci`), so the same inputs give the same digest. They go into build/oci, an OCI image
layout, and the image is loaded into the engine as `<repository>:<tag>` for smoke and
publish. `bake` is the one entry point.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import layers, oci, requirements, resources, venv
from .bases import BaseImage
from .cache import atomic_write, scratch_dir
from .docker_api import Client, build_image, image_attrs, image_exists, load_image, run_container
from .errors import BakeError
from .hashing import data_hash
from .patches import PatchedTree
from .plan import Plan, upstream_pin
from .proc import echo, step
from .wheels import WheelSet

__all__ = ["Baked", "bake", "find", "is_current", "labels", "manifest"]

INPUTS_LABEL = "dev.sparkbake.inputs"
RUNTIME = "runtime.json"
PYTHON_TEMPLATE = "runtime-python.Dockerfile.j2"


@dataclass(frozen=True)
class Baked:
    """A baked image in an OCI layout: its manifest and config digest (the engine's id)."""

    ref: str
    image: oci.Descriptor
    config: str
    layout: Path


def manifest(plan: Plan, base: BaseImage, wheels: WheelSet, patched: PatchedTree,
             source_date: int, venv_layer: venv.VenvLayer | None = None) -> dict[str, Any]:
    """What went into the image, recorded inside it (how it was built, such as the job
    count, is host state: the wheels report and the release record keep that)."""
    tag = plan.tag
    return {
        "schema": 1, "tag": tag.name, "image": tag.image_ref, "inputs": plan.inputs,
        "upstream": {"key": tag.upstream.key, **upstream_pin(tag.upstream)},
        "source_date_epoch": source_date,
        "series": [{"name": s.name, "sha256": s.sha256,
                    "patches": [s.record(f, h) for f, h in s.patches]}
                   for s in plan.series],
        "patched_tree": patched.tree_hash,
        "cuda_arch": tag.cuda_arch, "sm_arch": tag.sm_arch, "platform": tag.platform,
        "env": dict(tag.env),
        # what the entrypoint's preflight enforces; absent: nothing declared
        **({"capabilities": tag.capabilities.as_dict()} if tag.capabilities else {}),
        "base": {"name": base.name, "image": base.ref, "digest": base.digest},
        "wheels": wheels.wheels, "nvcc": wheels.report.get("nvcc", ""),
        # CMake's downloads as locked, for a tree that has them
        **({"thirdparty": wheels.report["thirdparty"]} if wheels.report.get("thirdparty") else {}),
        # the distributions the tag asks for by name (extras, pins), and the JIT toolchain
        **({"asked": [dataclasses.asdict(a) for a in requirements.asked(tag, patched.path)]}
           if tag.extras.items or tag.pins.items else {}),
        **({"jit": _jit(venv_layer.cuda_home)} if venv_layer and venv_layer.cuda_home else {}),
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
        "org.opencontainers.image.created": oci.rfc3339(source_date),
        "org.opencontainers.image.base.name": base.ref,
        "org.opencontainers.image.base.digest": base.digest,
        "dev.sparkbake.tag": tag.name,
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


def find(build_dir: Path, plan: Plan) -> Baked | None:
    """The tag's image as build/oci names it, if it is there."""
    layout = oci.Layout(build_dir / "oci")
    image = layout.find(plan.tag.name)
    if image is None or not layout.has(image.digest):
        return None
    config = str(layout.read_json(image.digest)["config"]["digest"])
    return Baked(plan.tag.image_ref, image, config, layout.root)


def is_current(client: Client, plan: Plan, build_dir: Path) -> bool:
    """The engine has the tag's image, baked from exactly these inputs, and it is the image
    build/oci names (the one publish pushes)."""
    if not image_exists(client, plan.tag.image_ref):
        return False
    attrs = image_attrs(client, plan.tag.image_ref)
    if (attrs["Config"].get("Labels") or {}).get(INPUTS_LABEL) != plan.inputs:
        return False
    baked = find(build_dir, plan)
    return baked is not None and baked.config == attrs["Id"]


def bake(client: Client, plan: Plan, base: BaseImage, wheels: WheelSet, patched: PatchedTree,
         build_dir: Path, *, source_date: int, cache: Path, load: bool = True,
         runtime_wheels: Path | None = None) -> Baked:
    """Write the tag's image into build/oci and (load) into the engine as `<repository>:<tag>`,
    unless the engine has it from these inputs. cache holds the base layers, per host;
    runtime_wheels the wheelhouse of the tag's runtime lock, if it has one."""
    current = find(build_dir, plan) if load and is_current(client, plan, build_dir) else None
    if current is not None:
        echo(f"bake: {current.ref} is current (inputs {plan.inputs[:12]}), nothing to do")
        return current
    log = build_dir / "logs" / f"{plan.tag.name}-bake.log"
    layout = oci.Layout(build_dir / "oci")
    with step(f"bake {plan.tag.image_ref}"), scratch_dir(build_dir / "contexts", "bake.") as work:
        runtime = _with_python(client, base, build_dir)
        below = _base_layers(client, runtime, oci.Layout(cache / "layers"), layout, work)
        venv_layer = _venv_layer(client, plan, runtime, wheels, runtime_wheels, patched, work,
                                 source_date, log)
        recorded = manifest(plan, base, wheels, patched, source_date, venv_layer)
        files = _files_layer(recorded, work, source_date)
        added = [(venv_layer.layer, f"sparkbake: {venv.VENV}: " + " ".join(_names(wheels))),
                 (files, "sparkbake: /opt/sparkbake")]
        baked = _write(layout, plan, below, added, labels(plan, base, patched, source_date),
                       source_date, recorded.get("jit"))
        echo(f"bake: {plan.tag.image_ref} = {baked.image.digest} (config {baked.config[:19]})")
        if load:
            _load(client, baked, below, work)
    return baked


def _names(wheels: WheelSet) -> list[str]:
    return sorted({str(w["name"]) for w in wheels.wheels})


def _runtime() -> dict[str, Any]:
    described: dict[str, Any] = json.loads(resources.path(RUNTIME).read_text())
    return described


def _with_python(client: Client, base: BaseImage, build_dir: Path) -> BaseImage:
    """The base itself if it has python3 -m venv; else the base + Python from its package
    manager, built once per engine (the one layer not made reproducibly: see README)."""
    probe = run_container(client, base.ref, ["python3 -m venv --help >/dev/null 2>&1"],
                          entrypoint=["/bin/sh", "-c"], network=False, quiet=True)
    if probe.exit_code == 0:
        return base
    key = data_hash({"base": base.digest, "template": resources.digest(PYTHON_TEMPLATE)})
    ref = f"sparkbake-runtime/{base.name}:{key[:12]}"
    if not image_exists(client, ref):
        echo(f"bake: {base.ref} has no python3 -m venv; adding Python from its packages")
        with scratch_dir(build_dir / "contexts", "runtime-python.") as context:
            (context / "Dockerfile").write_text(resources.render(PYTHON_TEMPLATE,
                                                                 base_image=base.ref))
            build_image(client, context, ref, error=BakeError,
                        log_path=build_dir / "logs" / f"runtime-python-{base.name}.log")
    return BaseImage(base.name, ref, str(client.images.get(ref).id))


@dataclass(frozen=True)
class _Below:
    """The base image's config and its layers as blobs in the layout."""

    config: dict[str, Any]
    layers: list[oci.Descriptor]


def _base_layers(client: Client, base: BaseImage, cache: oci.Layout, layout: oci.Layout,
                 work: Path) -> _Below:
    """The base's layers, compressed once per host into cache (keyed by the engine's image
    id: the same base image gives the same blobs), then put into the layout."""
    image_id = str(client.images.get(base.ref).id)
    record = cache.root / "bases" / f"{image_id.split(':')[1]}.json"
    listing = json.loads(record.read_text()) if record.is_file() else None
    if listing is None or not all(cache.has(d) for d in [listing["config"],
                                                          *listing["layers"]]):
        listing = _export_base(client, base, image_id, cache, work)
        atomic_write(record, json.dumps(listing, indent=2) + "\n")
    return _Below(cache.read_json(listing["config"]),
                  [layout.add_file(cache.blob(d), d, layers.MEDIA_TYPE)
                   for d in listing["layers"]])


def _export_base(client: Client, base: BaseImage, image_id: str, cache: oci.Layout,
                 work: Path) -> dict[str, Any]:
    archive = work / "base.tar"
    with step(f"base layers of {base.ref} ({image_id[:19]})"), archive.open("wb") as out:
        for chunk in client.images.get(base.ref).save(named=False):
            out.write(chunk)
    with tarfile.open(archive) as tar:
        index = json.loads(_member(tar, "manifest.json"))[0]
        config = _member(tar, index["Config"])
        digests = []
        for name, diff_id in zip(index["Layers"], json.loads(config)["rootfs"]["diff_ids"],
                                 strict=True):
            source = tar.extractfile(name)
            assert source is not None
            layer = layers.compress(source, work / "base-layer.tar.gz")
            if layer.diff_id != diff_id:
                raise BakeError(f"base {base.ref}: its layer {name} is {layer.diff_id}, its "
                                f"config says {diff_id}", "remove the image and rebuild it")
            digests.append(cache.add_file(layer.path, layer.digest, layers.MEDIA_TYPE).digest)
    archive.unlink()
    return {"image": image_id, "config": cache.add_bytes(config, oci.CONFIG_TYPE).digest,
            "layers": digests}


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    data = tar.extractfile(name)
    assert data is not None
    return data.read()


def _venv_layer(client: Client, plan: Plan, runtime: BaseImage, built: WheelSet,
                house: Path | None, patched: PatchedTree, work: Path, source_date: int,
                log: Path) -> venv.VenvLayer:
    """The wheels (and the runtime wheelhouse's, with what the tag asks for by name)
    installed into /opt/venv (see `venv`)."""
    folders = [built.folder] if house is None else [built.folder, house]
    asked = tuple(a.name for a in requirements.asked(plan.tag, patched.path)) if house else ()
    return venv.install(client, runtime.ref, plan.tag.image_ref, plan.tag.platform, folders,
                        _names(built), work, source_date, log, asked)


def _files_layer(recorded: dict[str, Any], work: Path, source_date: int) -> layers.Layer:
    text = json.dumps(recorded, indent=2, sort_keys=True) + "\n"
    files: dict[str, tuple[bytes | None, int]] = {
        "opt/sparkbake/manifest.json": (text.encode(), 0o644)}
    if "jit" in recorded:  # any user the container runs as compiles into it
        files[recorded["jit"]["cache"].lstrip("/")] = (None, 0o1777)
    for name in _runtime()["files"]:
        files[f"opt/sparkbake/{name}"] = (resources.path(name).read_bytes(), 0o644)
    return layers.from_files(files, work / "files.tar.gz", source_date)


def _write(layout: oci.Layout, plan: Plan, below: _Below,
           added: list[tuple[layers.Layer, str]], label_map: dict[str, str],
           source_date: int, jit: dict[str, Any] | None) -> Baked:
    runtime = _runtime()
    path = runtime["path"] + (f":{jit['path']}" if jit else "")
    env = plan.tag.env + tuple(sorted((jit or {}).get("env", {}).items()))
    new = [layout.add_file(layer.path, layer.digest, layers.MEDIA_TYPE) for layer, _ in added]
    change = oci.ConfigChange(
        created=source_date, platform=plan.tag.platform,
        layers=tuple((layer.diff_id, what) for layer, what in added), env=env,
        path=path, labels=tuple(sorted(label_map.items())),
        entrypoint=tuple(runtime["entrypoint"]))
    config = layout.add_bytes(oci.canonical(oci.image_config(below.config, change)),
                              oci.CONFIG_TYPE)
    image = layout.add_bytes(oci.canonical(oci.manifest(config, [*below.layers, *new])),
                             oci.MANIFEST_TYPE)
    layout.tag(plan.tag.name, image)
    return Baked(plan.tag.image_ref, image, config.digest, layout.root)


def _load(client: Client, baked: Baked, below: _Below, work: Path) -> None:
    """docker load the image; the base's layers stay out of the archive (the engine has
    them), unless the engine wants them anyway."""
    archive = work / "image.tar"
    layout = oci.Layout(baked.layout)
    omit = frozenset(layer.digest for layer in below.layers)
    oci.write_docker_archive(layout, baked.image, baked.ref, archive, omit)
    load_image(client, archive, error=BakeError)
    loaded = str(client.images.get(baked.ref).id)
    if loaded != baked.config:
        raise BakeError(f"the engine loaded {baked.ref} as {loaded[:19]}, not as its config "
                        f"{baked.config[:19]}", "check the Docker engine's image store")
