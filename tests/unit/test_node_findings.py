"""check-nodes' findings of one node, each read from a root folder laid out as the probe
copies a node (proc/, etc/, sys/class/infiniband/, earlyoom, model/, cache-free-kb)."""

from __future__ import annotations

import json
from pathlib import Path

from sparkbake.nodes import node_findings
from sparkbake.nodes.node_findings import Finding
from tests.nodeenv import write_sysctls
from tests.unit.test_host_kernel import kernel_root

TWO = {"NNODES": "2", "NODE_RANK": "0"}


def of(root: Path, check: str, env: dict[str, str] = TWO, runtimes: tuple[str, ...] = ("runc",),
       gpu: bool = True) -> Finding:
    found = node_findings.findings(root, env, list(runtimes), gpu)
    return next(f for f in found if f.check == check)


def test_a_node_below_the_floor_gets_the_sysctls_to_set(tmp_path: Path) -> None:
    finding = of(write_sysctls(tmp_path, swappiness=60), "memory floor")
    assert (finding.level, finding.message) == (
        "error", "host memory floor not applied: vm.swappiness=60 (want <= 10)")
    assert "sysctl -w vm.swappiness=10" in finding.fix
    assert of(write_sysctls(tmp_path), "memory floor").level == "ok"


def test_the_floor_must_be_kept_in_sysctl_d(tmp_path: Path) -> None:
    root = write_sysctls(tmp_path)
    finding = of(root, "floor persisted")
    assert finding.level == "error"
    assert finding.message.startswith("/etc/sysctl.d does not keep the floor: "
                                      "vm.min_free_kbytes unset (want 1048576)")
    (root / "etc" / "sysctl.d").mkdir(parents=True)
    (root / "etc" / "sysctl.d" / "60-host-memory-floor.conf").write_text(
        "vm.min_free_kbytes = 1048576\nvm.dirty_bytes = 536870912\n"
        "vm.dirty_background_bytes = 134217728\nvm.dirty_expire_centisecs = 500\n"
        "vm.dirty_writeback_centisecs = 100\nvm.swappiness = 10\n")
    assert of(root, "floor persisted").level == "ok"
    (root / "etc" / "sysctl.d" / "99-later.conf").write_text("vm.swappiness = 60\n")
    assert of(root, "floor persisted").message == (
        "/etc/sysctl.d does not keep the floor: vm.swappiness=60 (want <= 10)")


def test_earlyoom_missing_warns_and_a_higher_threshold_fails(tmp_path: Path) -> None:
    root = write_sysctls(tmp_path)
    assert of(root, "earlyoom").level == "warning"
    (root / "earlyoom").write_text("/usr/bin/earlyoom -r 3600 \n")  # its default: 10 %
    assert (of(root, "earlyoom").level, of(root, "earlyoom").message) == (
        "error", "earlyoom kills at 10 % available; the memory budget leaves 2 %")
    (root / "earlyoom").write_text("/usr/bin/earlyoom -m 2 -r 3600 \n")
    assert of(root, "earlyoom") == Finding("earlyoom", "ok", "earlyoom kills at 2 % available")


def test_the_kho_tell_fails_a_node_of_two_and_warns_alone(tmp_path: Path) -> None:
    root = kernel_root(tmp_path)
    finding = of(root, "kernel")
    assert finding.level == "error" and "kho=off" in finding.fix and "6.17.0-1032" in finding.fix
    assert of(root, "kernel", {"NNODES": "1"}).level == "warning"
    (root / "proc" / "cmdline").write_text("ro quiet kho=off\n")
    assert of(root, "kernel").level == "ok"


def test_no_nvidia_runtime_fails_a_gpu_tag_and_is_said_for_a_cpu_tag(tmp_path: Path) -> None:
    root = write_sysctls(tmp_path)
    assert of(root, "gpu runtime").level == "error"
    cpu = of(root, "gpu runtime", gpu=False)
    assert (cpu.level, cpu.message) == ("warning", "the engine has no nvidia runtime (runc); "
                                        "this tag runs on the CPU")
    assert of(root, "gpu runtime", runtimes=("nvidia", "runc")).level == "ok"


def model_root(tmp_path: Path, sizes: str) -> Path:
    root = write_sysctls(tmp_path)
    (root / "model").mkdir()
    (root / "model" / "folder").write_text("/node/models/m\n")
    (root / "model" / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 300},
         "weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}))
    (root / "model" / "sizes").write_text(sizes)
    return root


def test_the_models_index_must_be_complete_by_shard_and_size(tmp_path: Path) -> None:
    env = {**TWO, "MODEL_HOST_PATH": "/models/m"}
    missing = of(model_root(tmp_path / "a", "200 model-1.safetensors\n"), "model", env)
    assert (missing.level, missing.message) == (
        "error", "/models/m: 1 of 2 shard(s) missing or empty: model-2.safetensors")
    short = of(model_root(tmp_path / "b", "100 model-1.safetensors\n100 model-2.safetensors\n"),
               "model", env)
    assert short.message == ("/models/m: the shards hold 200 bytes, fewer than the index's "
                             "total_size 300: a copy cut short")
    whole = "200 model-1.safetensors\n200 model-2.safetensors\n"
    assert of(model_root(tmp_path / "c", whole), "model", env).level == "ok"
    assert of(write_sysctls(tmp_path / "d"), "model", env).message == \
        "/models/m is not a folder on the node"


def test_the_jit_cache_needs_its_disk(tmp_path: Path) -> None:
    env = {**TWO, "CACHE_HOST_PATH": "/var/cache/jit"}
    root = write_sysctls(tmp_path)
    assert of(root, "jit cache", env).message == "/var/cache/jit is not a folder on the node"
    (root / "cache-free-kb").write_text(f"{5 * 2**20}\n")
    assert of(root, "jit cache", env).message == "/var/cache/jit: 5.0 GiB free, under 20 GiB"
    (root / "cache-free-kb").write_text(f"{50 * 2**20}\n")
    assert of(root, "jit cache", env).level == "ok"


def test_the_rdma_device_and_a_roce_v2_gid(tmp_path: Path) -> None:
    env = {**TWO, "IB_HCA": "rocep1s0f0", "IB_GID_INDEX": "3"}
    root = write_sysctls(tmp_path)
    assert of(root, "rdma", env).message == "no RDMA device rocep1s0f0 on the node"
    port = root / "sys" / "class" / "infiniband" / "rocep1s0f0" / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs" / "types").mkdir(parents=True)
    (port / "gid_attrs" / "types" / "3").write_text("IB/RoCE v1\n")
    (port / "gids" / "3").write_text("0000:0000:0000:0000:0000:ffff:0a00:0001\n")
    assert of(root, "rdma", env).message == \
        "rocep1s0f0: GID index 3 is not a RoCE v2 GID of any port"
    (port / "gid_attrs" / "types" / "3").write_text("RoCE v2\n")
    assert of(root, "rdma", env).level == "ok"
    assert of(root, "rdma", {**env, "IB_GID_INDEX": "auto"}).level == "ok"
