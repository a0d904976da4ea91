"""Backend names as vLLM reads them, and as its verdicts (backend-verdicts.json) spell them.

Standard library only, Python >= 3.10. Baked beside preflight.py, which loads it from its
folder; the host loads it from the package resources (publish records the verdicts on the
backends a tag's env selects), so both spell the names one way.
"""

from __future__ import annotations

AUTO = "auto"  # the verdicts' name of the backend vLLM picks itself, of every kind


def normal_backend(kind: str, name: str) -> str:
    """A backend name as vLLM reads it: attention names upper case, the others lower case
    with `_` for `-`."""
    return name.upper() if kind == "attention" else name.lower().replace("-", "_")


def verdict_name(kind: str, name: str) -> str:
    """A backend name as the verdicts spell it: as vLLM reads it, attention's AUTO `auto`."""
    normal = normal_backend(kind, name)
    return AUTO if normal == "AUTO" else normal
