"""The same debootstrap spec under two names in versions.yaml: one base image, one builder."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from sparkbake import bases
from sparkbake.config.settings import Settings
from sparkbake.config.versions import DebootstrapBase
from sparkbake.lock import pins
from sparkbake.oci import docker_engine
from sparkbake.wheels import container_build
from tests.conftest import Project, plain_console

pytestmark = pytest.mark.docker


def test_the_same_spec_under_another_name_is_the_same_base_and_builder(
        built_fixture: Project, docker_client: docker_engine.Client, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    config = built_fixture.config()
    tag = config.tag("fixture")
    assert isinstance(tag.runtime, DebootstrapBase)
    settings = Settings.of_process()
    renamed = dataclasses.replace(tag.runtime, name=f"renamed-{uuid.uuid4().hex[:8]}")
    lock = pins.lock_path(config, tag)
    renamed_lock = tmp_path / f"{renamed.name}.amd64.txt"  # its header names the base
    renamed_lock.write_text(lock.read_text().replace(f"of base {tag.runtime.name} ",
                                                     f"of base {renamed.name} "))
    assert renamed_lock.read_text() != lock.read_text()
    capfd.readouterr()
    made = bases.ensure(docker_client, renamed, tag.platform, tmp_path, settings,
                        console=plain_console())
    builder = container_build.builder_image(docker_client, made, renamed_lock, settings,
                                            tmp_path, console=plain_console())
    try:
        first = bases.ensure(docker_client, tag.runtime, tag.platform, tmp_path, settings,
                             console=plain_console())
        assert made.ref == bases.local_ref(renamed, tag.platform) != first.ref
        assert made.digest == first.digest  # no second debootstrap
        assert docker_client.images.get(builder).id == docker_client.images.get(
            container_build.builder_ref(first, lock, settings)).id  # no second build
        err = capfd.readouterr().err
        assert f"base {made.ref}: the image of {first.ref}, the same spec" in err
        assert "the same base and lock" in err and "debootstrap" not in err
    finally:
        for ref in (builder, made.ref):  # the other names keep the images
            docker_client.images.remove(ref)
