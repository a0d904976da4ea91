"""verify-release --rebuild: a verified image built again from clean, from the versions.yaml
its provenance was checked against, and its manifest digest compared with the registry's.

The rebuild works in a scratch folder with a build/ and wheels/ of its own, so it takes
nothing from the project's build/ and wheels/ and leaves them as they were. It fetches the
downloads again too, though they are checked by hash: a reused file is trusted by its stamp,
unread, and the point is what the versions.yaml alone gives; a download costs little beside
the compile that follows it. What any build reuses, it reuses, as `verify` does: the
engine's base and builder images, the host's cache of the bases' compressed layers
(SPARKBAKE_CACHE) and the compile cache, each keyed by all that went into it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from sparkbake.config.model import Config
from sparkbake.config.settings import Settings
from sparkbake.errors import VerificationError
from sparkbake.files import scratch_dir
from sparkbake.oci import image_layout
from sparkbake.oci.distribution import MANIFEST_TYPES, Session
from sparkbake.pipeline import build
from sparkbake.run import Run

__all__ = ["require_rebuilt"]


def require_rebuilt(session: Session, run: Run, tag_name: str, digest: str) -> None:
    """Rebuild tag_name of the run's versions.yaml from clean and say that it gives digest,
    bit for bit; else a VerificationError naming the first layer that differs."""
    config, console = run.config, run.console
    # the remedy's `verify` runs against this versions.yaml
    settings = replace(run.settings, config_option=config.path)
    published = _registry_manifest(session, digest)
    scratch = run.folders.scratch("verify")  # beside the builds: a rebuild is large
    with scratch_dir(scratch, f"release.{tag_name}.") as work:
        clean = Run.of(replace(config, work=work), settings, console)
        console.notice(f"verify-release: rebuilding {tag_name} from clean in {work} "
                       "(a full build, without the caches)")
        image = build.image(build.of_tag(clean, clean.config.tag(tag_name), load=False))
        if image.image.digest != digest:
            raise _differs(config, tag_name, digest, published,
                           image_layout.Layout(image.layout,
                                               console), image.image.digest, settings=settings)
    console.result(f"rebuilt {tag_name}: {digest} = the registry's (bit for bit)")


def _registry_manifest(session: Session, digest: str) -> image_layout.Manifest:
    """The image manifest the registry serves for digest, checked against it."""
    response = session.request("GET", session.url("manifests", digest),
                               headers={"Accept": MANIFEST_TYPES})
    if response.status_code != 200 or \
            "sha256:" + hashlib.sha256(response.content).hexdigest() != digest:
        raise VerificationError(f"{session.remote.host} serves no manifest of {digest} "
                                f"(HTTP {response.status_code}, or other bytes)",
                                "check the registry, then verify again")
    doc = json.loads(response.content)
    return image_layout.Manifest(image_layout.Descriptor.of(doc["config"]),
                              tuple(image_layout.Descriptor.of(layer) for layer in doc["layers"]))


def _differs(config: Config, tag_name: str, digest: str, published: image_layout.Manifest,
             layout: image_layout.Layout, rebuilt_digest: str, *,
             settings: Settings) -> VerificationError:
    """The error that names where the rebuild parts from the registry's image."""
    rebuilt = layout.read_manifest(rebuilt_digest)
    history = layout.read_config_doc(rebuilt.config.digest)
    index = _first_difference(published.layers, rebuilt.layers)
    if index is None:
        where = (f"the layers are the same, the config is not ({published.config.digest[:19]} "
                 f"there, {rebuilt.config.digest[:19]} rebuilt)")
    else:
        where = (f"layer {index} ({image_layout.made_by(history, index) or 'no history'}) is "
                 f"{_digest_at(published.layers, index)} there, "
                 f"{_digest_at(rebuilt.layers, index)} rebuilt")
    return VerificationError(
        f"rebuilt {tag_name}: {rebuilt_digest}, not the registry's {digest}: {where}",
        f"the image was not built from what {config.path} pins, or not reproducibly: do not "
        f"deploy it; `{settings.command('verify', tag_name, '--against', digest)}` names the files")


def _first_difference(published: tuple[image_layout.Descriptor, ...],
                      rebuilt: tuple[image_layout.Descriptor, ...]) -> int | None:
    """The index of the first layer whose digest differs (or that one side lacks)."""
    for index in range(max(len(published), len(rebuilt))):
        if _digest_at(published, index) != _digest_at(rebuilt, index):
            return index
    return None


def _digest_at(layers: tuple[image_layout.Descriptor, ...], index: int) -> str:
    return layers[index].digest if index < len(layers) else "absent"
