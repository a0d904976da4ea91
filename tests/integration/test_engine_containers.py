"""A container the engine creates but will not start is removed all the same: nothing of a
refused start (a device that is not there, privileges withheld) is left in the engine."""

from __future__ import annotations

import pytest

from sparkbake.errors import EngineError
from sparkbake.oci import docker_engine

pytestmark = pytest.mark.docker

MISSING_DEVICE = ["/dev/sparkbake-no-such-device:/dev/x"]


def ours(client: docker_engine.Client) -> list[str]:
    label = f"{docker_engine.RUN_LABEL}={docker_engine.run_label()}"
    return [box.name for box in client.containers.list(all=True, filters={"label": label})]


def test_a_container_the_engine_will_not_start_is_removed(
        docker_client: docker_engine.Client, debian_base: str) -> None:
    with pytest.raises(EngineError, match=f"cannot start a container of {debian_base}: "):
        docker_engine.run_container(docker_client, debian_base, ["true"],
                                    devices=MISSING_DEVICE)
    assert ours(docker_client) == []


def with_missing_device(client: docker_engine.Client) -> list[str]:
    """The containers asked for MISSING_DEVICE: by what they asked, not by a count of all
    the engine's containers, which other users of the engine change."""
    wanted = MISSING_DEVICE[0].split(":")[0]
    found = []
    for box in client.containers.list(all=True):
        box.reload()
        devices = box.attrs["HostConfig"].get("Devices") or []
        found += [box.name] if any(d.get("PathOnHost") == wanted for d in devices) else []
    return found


def test_a_detached_one_too(docker_client: docker_engine.Client, debian_base: str) -> None:
    with pytest.raises(EngineError, match="cannot start a container"):
        docker_engine.run_detached(docker_client, debian_base, entrypoint=["true"],
                                   devices=MISSING_DEVICE)
    assert with_missing_device(docker_client) == []
