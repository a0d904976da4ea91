"""What the in-image smoke checks share: the image under check and the two outcomes besides
passing. Standard library only; mounted beside smoke_check.py, never baked."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

MANIFEST = "opt/sparkbake/manifest.json"
VENV = "opt/venv"
SHORT = 72


class CheckFailed(Exception):
    """A check found the image wrong; the message is the one-line detail, `record` what the
    check found in full (the smoke JSON keeps it)."""

    def __init__(self, detail: str, record: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.record = record


class CheckSkipped(Exception):
    """A check does not apply, or cannot run here; the message says why."""


class Image:
    """The image under check: its root, its manifest (read once) and its site-packages."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifest_path = root / MANIFEST
        self.site_dirs = sorted((root / VENV / "lib").glob("python3*/site-packages"))
        self._manifest: dict[str, Any] | None = None

    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            if not self.manifest_path.is_file():
                raise CheckFailed(f"{self.manifest_path} does not exist")
            loaded = json.loads(self.manifest_path.read_text())
            if not isinstance(loaded, dict):
                raise CheckFailed(f"{self.manifest_path} is not a JSON object")
            self._manifest = loaded
        return self._manifest

    def wheels(self) -> list[dict[str, Any]]:
        wheels = self.manifest().get("wheels", [])
        return list(wheels) if isinstance(wheels, list) else []

    def kernels(self) -> list[dict[str, Any]]:
        return [kernel for wheel in self.wheels() for kernel in wheel.get("kernels", [])]

    def find_site_file(self, relative: str) -> Path | None:
        """A file relative to site-packages: the first site dir that has it, or None."""
        for site in self.site_dirs:
            if (site / relative).exists():
                return site / relative
        return None

    def site_file(self, relative: str) -> Path:
        found = self.find_site_file(relative)
        if found is None:
            where = (", ".join(str(s) for s in self.site_dirs)
                     or f"{self.root / VENV}/lib/python3*")
            raise CheckFailed(f"{relative} is not in site-packages ({where})")
        return found


def short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= SHORT else text[: SHORT - 3] + "..."


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def public_version(version: str) -> str:
    """A PEP 440 version without its local part (vLLM builds add `+cu130`), normalized
    enough to compare a wheel file name's version with METADATA's."""
    return version.split("+", 1)[0].lower().replace("-", ".").replace("_", ".")


def top_level_packages(dist: importlib.metadata.Distribution) -> list[str]:
    """Import names of a distribution: top_level.txt, else the first parts of RECORD paths."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return sorted({line.strip() for line in listed.splitlines() if line.strip()})
    names = set()
    for file in dist.files or []:
        first = file.parts[0]
        in_package = len(file.parts) > 1 and not first.endswith((".dist-info", ".data"))
        if in_package and first.isidentifier():
            names.add(first)
        elif len(file.parts) == 1 and file.suffix in (".py", ".so") and first != "__init__.py":
            names.add(first.split(".")[0])
    return sorted(n for n in names if n != "__pycache__")
