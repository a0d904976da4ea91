"""export-series of a `patch --checkout` tree whose commits are unchanged writes the series'
patches back byte for byte, whatever index lines they were written with (their bytes are
part of the build key); real git, the repository's demo series and upstream."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.__main__ import main
from sparkbake.config import versions

REPO = Path(__file__).resolve().parents[2]
PATCH = "0001-demo-greet-with-the-image-s-baked-env-default.patch"


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """versions.yaml, the demo series (short index lines, as committed) and its upstream."""
    shutil.copy(REPO / "versions.yaml", tmp_path)
    shutil.copytree(REPO / "patches" / "demo", tmp_path / "patches" / "demo")
    shutil.copytree(REPO / "tests" / "data" / "upstream", tmp_path / "tests" / "data" / "upstream")
    return tmp_path


def series_key(config: Path) -> str:
    loaded = versions.load(config)
    return planning.make(loaded, loaded.tag("demo")).series[0].sha256


def test_an_unchanged_checkout_exports_the_same_bytes_and_build_key(demo: Path) -> None:
    config, checkout, patch = demo / "versions.yaml", demo / "checkout", \
        demo / "patches" / "demo" / PATCH
    before, key = patch.read_bytes(), series_key(config)
    assert b"\nindex 710edf1..9d92339 100644\n" in before  # short ids, as the repository has
    assert main(["--config", str(config), "patch", "demo", "--checkout", str(checkout)]) == 0
    assert main(["--config", str(config), "export-series", str(checkout), "demo"]) == 0
    assert (patch.read_bytes(), series_key(config)) == (before, key)

    source = checkout / "tinykern" / "__init__.py"
    source.write_text(source.read_text().replace("no greeting baked", "none baked"))
    subprocess.run(["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-a", "--amend", "--no-edit"], check=True)
    assert main(["--config", str(config), "export-series", str(checkout), "demo"]) == 0
    written = patch.read_bytes()  # a changed commit: written anew, with full ids
    assert b'"none baked")\n' in written
    assert b"\nindex 710edf1015e746e5004371fa27a6ec9dece001eb.." in written
    assert series_key(config) != key
