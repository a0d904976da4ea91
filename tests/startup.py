"""What a no-op build must not import: the modules that only building, applying, baking or
an error path runs, and the standard library's and third parties' heavy modules that only
they use. Each would add to the start of every command (nox -s bench-noop)."""

from __future__ import annotations

__all__ = ["ONLY_WHEN_BUILDING"]

ONLY_WHEN_BUILDING = (
    # the bake's writers and the layers they make
    "sparkbake.bake.venvlayers", "sparkbake.bake.venv", "sparkbake.bake.bytecode",
    "sparkbake.bake.baselayers", "sparkbake.bake.layercache", "sparkbake.attest.stored",
    "sparkbake.oci.layers", "sparkbake.oci.blockgzip",
    # applying patches, building wheels, locking
    "sparkbake.patch.gitapply", "sparkbake.patch.gitwork", "sparkbake.wheels.kernelseed",
    "sparkbake.wheels.overlay", "sparkbake.wheels.compile_cache", "sparkbake.oci.emulation",
    "sparkbake.lock.requirements", "sparkbake.lock.wheelhouse", "sparkbake.core.smoke_record",
    # what only they (or an error, or --debug) use
    "packaging", "http.client", "html.parser", "email", "concurrent.futures",
    "multiprocessing", "xml.etree.ElementTree", "difflib", "traceback", "uuid", "platform",
)
