"""check-nodes against this machine's engine: the probe container reads the node (this
host) through a read-only mount of /, and no container is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.oci import docker_engine
from tests.conftest import Project

pytestmark = pytest.mark.docker


def ours(client: docker_engine.Client) -> list[str]:
    return sorted(box.id for box in client.containers.list(
        all=True, filters={"label": docker_engine.RUN_LABEL}))


def test_check_nodes_reads_this_host_through_its_engine(
        project: Project, docker_client: docker_engine.Client, debian_base: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, cache = tmp_path / "model", tmp_path / "cache"
    model.mkdir()
    cache.mkdir()
    (model / "model.safetensors.index.json").write_text(
        '{"metadata": {"total_size": 8}, "weight_map": {"w": "model-1.safetensors", '
        '"v": "model-2.safetensors"}}')
    (model / "model-1.safetensors").write_bytes(b"12345678")
    env = tmp_path / "head.env"
    env.write_text(f"NNODES=1\nMODEL=/model\nMODEL_HOST_PATH={model}\n"
                   f"CACHE_HOST_PATH={cache}\n")
    before = ours(docker_client)
    assert project.sparkbake("check-nodes", "fixture", str(env), "--image", debian_base) == 6
    out, err = capsys.readouterr()
    head = "head (unix:///var/run/docker.sock): "
    runtimes = ", ".join(sorted(docker_client.info()["Runtimes"]))
    assert f"{head}gpu runtime: error: the engine has no nvidia runtime ({runtimes})" \
        in out.splitlines()  # the fixture tag is a CUDA one; this machine has no GPU
    assert f"{head}model: error: {model}: 1 of 2 shard(s) missing or empty: " \
           "model-2.safetensors" in out.splitlines()
    kernel = Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert f"{head}kernel: ok: kernel {kernel}: no Kexec HandOver CMA" in out.splitlines()
    assert any(line.startswith(f"{head}jit cache: ") for line in out.splitlines())
    assert err.splitlines()[-2:] == [
        "sparkbake: error: check-nodes fixture: head failed a check",
        "  -> run there what each error's `run there:` line says, or rerun with --apply for "
        "the memory floor"]
    assert ours(docker_client) == before


def test_an_engine_that_does_not_answer_exits_8(
        project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = tmp_path / "head.env"
    env.write_text("NNODES=1\n")
    nowhere = f"unix://{tmp_path}/no.sock"
    assert project.sparkbake("check-nodes", "fixture", str(env), "--hosts", nowhere) == 8
    out, err = capsys.readouterr()
    assert out.startswith(f"head: engine: error: node {nowhere}: no Docker engine answers")
    assert "sparkbake: error: check-nodes fixture: no engine answers on head" in err
