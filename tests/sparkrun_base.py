"""The CPU tag's runtime base, Debian trixie with Python 3.13, made once per engine: where the
tests run sparkrun, which needs Python 3.12 or later (this host's may be older)."""

from __future__ import annotations

from pathlib import Path

from sparkbake import bases
from sparkbake.config import versions
from sparkbake.config.settings import Settings
from sparkbake.oci import docker_engine
from tests.conftest import plain_console

REPO = Path(__file__).resolve().parents[1]
TAG = "cpu-3.73"


def python_base(client: docker_engine.Client, folder: Path) -> str:
    tag = versions.load(REPO / "versions.yaml").tag(TAG)
    return bases.ensure(client, tag.runtime, tag.platform, folder, Settings.of_process(),
                        console=plain_console()).ref
