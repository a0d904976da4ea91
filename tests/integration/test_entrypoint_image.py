"""The baked entrypoint and preflight in the fixture image, on a real Docker engine."""

from __future__ import annotations

import shlex

import pytest

from sparkbake.nodes import envfile
from sparkbake.oci import docker_engine
from tests.conftest import Project
from tests.nodeenv import ENV_DIR, HEAD_IP, node_command

pytestmark = pytest.mark.docker


# the fixture image has no b12x package: the reference file's b12x kernels are refused there
FIXTURE_BACKENDS = {"MOE_BACKEND": "auto", "LINEAR_BACKEND": "auto"}


def worker_env(**changes: str) -> dict[str, str]:
    return {**envfile.read(ENV_DIR / "worker.env").values, **FIXTURE_BACKENDS, **changes}


def test_the_baked_entrypoint_prints_the_reference_command(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    ref = built_fixture.plan().tag.image_ref
    out: bytes = docker_client.containers.run(ref, ["--print"], environment=worker_env(),
                                              remove=True, stdout=True, stderr=False)
    expected = node_command(1)
    for flag in ("--moe-backend", "--linear-backend"):
        expected[expected.index(flag) + 1] = "auto"
    assert shlex.split(out.decode()) == expected


def test_the_baked_preflight_refuses_b12x_kernels_the_image_lacks(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    ref = built_fixture.plan().tag.image_ref
    result = docker_engine.run_container(docker_client, ref, [], network=False,
                                         environment=worker_env(MOE_BACKEND="b12x"))
    assert result.exit_code == 2
    assert ("sparkbake preflight: error: MOE_BACKEND=b12x needs the Python module b12x, which "
            "this image does not have [backend-not-installed]") in result.output


def test_the_baked_preflight_refuses_a_bad_env(
        built_fixture: Project, docker_client: docker_engine.Client) -> None:
    ref = built_fixture.plan().tag.image_ref
    result = docker_engine.run_container(docker_client, ref, [], network=False,
                                         environment=worker_env(VLLM_HOST_IP=HEAD_IP))
    assert result.exit_code == 2
    assert (f"sparkbake preflight: error: worker NODE_RANK=1 has VLLM_HOST_IP={HEAD_IP}, "
            "which is MASTER_ADDR, the head's address [worker-has-head-address]") in result.output
    assert "sparkbake preflight: refusing to start vllm: 1 error(s)" in result.output
    # the fixture's manifest lists only the tinykern series: the image read it
    assert "[prefix-cache-without-series]" in result.output
