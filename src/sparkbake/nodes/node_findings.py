"""What check-nodes finds on one node, read from a copy of what the node has (node_probe.py)
laid out as a root folder: proc/ (the sysctls, meminfo, cmdline, the kernel's release),
etc/ (sysctl.d, earlyoom's defaults), sys/class/infiniband/, and what the probe wrote of
earlyoom's processes, the model folder and the JIT cache's free disk. Pure: a test points
it at a folder of its own."""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparkbake.nodes import preflight

__all__ = ["CACHE_FREE_GIB", "Finding", "Level", "findings"]

Level = Literal["ok", "warning", "error"]
CACHE_FREE_GIB = 20  # FlashInfer's, Triton's and TileLang's first-use compiles of one model
FLOOR_RULE, KHO_RULE = "host-memory-floor", "kernel-kho"
FLOOR_FILE = "/etc/sysctl.d/60-host-memory-floor.conf"  # docs/how-to/four-sparks.md's
SYSCTL_LINE = re.compile(r"^\s*([a-z0-9_.]+)\s*=\s*(\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Finding:
    """One check of one node: its name, its level, what was found, what to run there."""

    check: str
    level: Level
    message: str
    fix: str = ""


def findings(root: Path, env: dict[str, str], runtimes: list[str], gpu: bool) -> list[Finding]:
    """Every check of the node whose copy is root, for its .env values; runtimes: its
    engine's container runtimes; gpu: the tag runs on the GPU."""
    rules = preflight.entrypoint().checks.load_rules()
    by_id = {rule["id"]: rule for rule in rules["rules"]}
    return [floor(root, by_id[FLOOR_RULE]), persisted(root, by_id[FLOOR_RULE]),
            earlyoom(root, rules["memory"]["earlyoom_free_percent"]),
            kho(root, env, by_id[KHO_RULE]), runtime(runtimes, gpu), model(root, env),
            cache_disk(root, env), rdma(root, env)]


def _sysctl_problems(root: Path, rule: dict[str, Any]) -> list[str]:
    """The preflight's own check of the floor's sysctls under root (empty: all met)."""
    checks = preflight.entrypoint().checks
    ctx = checks.context({}, checks.load_rules(), None, root, gpu_memory=lambda: None)
    found = checks.CHECKS["sysctls"](ctx, rule)
    return [str(f.message) for f in found]


def floor_commands(rule: dict[str, Any]) -> list[str]:
    """The floor as `sysctl -w` lines."""
    return [f"sysctl -w {name}={value}" for name, value, _ in rule["sysctls"]]


def floor_conf(rule: dict[str, Any]) -> str:
    """The floor as a sysctl.d file."""
    return "".join(f"{name} = {value}\n" for name, value, _ in rule["sysctls"])


def floor(root: Path, rule: dict[str, Any]) -> Finding:
    problems = _sysctl_problems(root, rule)
    if not problems:
        return Finding("memory floor", "ok", "the host memory floor's sysctls are applied")
    return Finding("memory floor", "error", problems[0],
                   "sudo sh -c '" + "; ".join(floor_commands(rule)) + "'")


def persisted(root: Path, rule: dict[str, Any]) -> Finding:
    """The floor as /etc/sysctl.conf and /etc/sysctl.d/*.conf set it at boot (the last file
    in name order wins, as systemd-sysctl reads them), checked by the same rule."""
    values: dict[str, str] = {}
    etc = root / "etc"
    for conf in [etc / "sysctl.conf", *sorted((etc / "sysctl.d").glob("*.conf"))]:
        if conf.is_file():
            values |= dict(SYSCTL_LINE.findall(conf.read_text(encoding="utf-8", errors="replace")))
    with tempfile.TemporaryDirectory() as scratch:
        boot = Path(scratch)
        (boot / "proc" / "sys" / "vm").mkdir(parents=True)
        for name, value in values.items():
            if name.startswith("vm.") and name.count(".") == 1:
                (boot / "proc" / "sys" / "vm" / name[3:]).write_text(value + "\n")
        problems = _sysctl_problems(boot, rule)
    if not problems:
        return Finding("floor persisted", "ok", "/etc/sysctl.d keeps the floor across boots")
    said = problems[0].replace("host memory floor not applied: ", "").replace(
        " unreadable (reference: ", " unset (want ")
    return Finding("floor persisted", "error", f"/etc/sysctl.d does not keep the floor: {said}",
                   f"write {FLOOR_FILE} with: " + "; ".join(floor_conf(rule).splitlines()))


def earlyoom(root: Path, percent: int) -> Finding:
    """earlyoom's running process and its -m threshold (percent of memory available)."""
    running = (root / "earlyoom").read_text().splitlines() if (root / "earlyoom").is_file() \
        else []
    fix = f"sudo apt-get install earlyoom; EARLYOOM_ARGS=\"-m {percent}\" in /etc/default/earlyoom"
    if not running:
        return Finding("earlyoom", "warning", "earlyoom is not running: a node out of memory "
                       "freezes instead of losing one process", fix)
    at = re.search(r"(?:^|\s)-m\s*([0-9.]+)", running[0])
    threshold = float(at.group(1)) if at else 10.0  # earlyoom's default
    if threshold > percent:
        return Finding("earlyoom", "error", f"earlyoom kills at {threshold:g} % available; the "
                       f"memory budget leaves {percent} %", fix)
    return Finding("earlyoom", "ok", f"earlyoom kills at {threshold:g} % available")


def kho(root: Path, env: dict[str, str], rule: dict[str, Any]) -> Finding:
    host_kernel = preflight.entrypoint().checks.host_kernel
    tell = host_kernel.kho_tell(root, rule["cma_free_gib"], rule["cma_total_kib"])
    release = host_kernel.release(root)
    if tell is None:
        return Finding("kernel", "ok", f"kernel {release}: no Kexec HandOver CMA")
    nodes = int(env.get("NNODES") or 1) if (env.get("NNODES") or "1").isdigit() else 1
    return Finding("kernel", "error" if nodes > 1 else "warning",
                   f"kernel {release} holds {tell['cma_free']} GiB as CMA for Kexec HandOver "
                   "and has no kho=off: NCCL across nodes fails at init",
                   "add kho=off to GRUB_CMDLINE_LINUX in /etc/default/grub, sudo update-grub, "
                   "reboot (or boot kernel 6.17.0-1032)")


def runtime(runtimes: list[str], gpu: bool) -> Finding:
    if "nvidia" in runtimes:
        return Finding("gpu runtime", "ok", "the engine has the nvidia runtime")
    return Finding("gpu runtime", "error" if gpu else "warning",
                   f"the engine has no nvidia runtime ({', '.join(sorted(runtimes)) or 'none'})"
                   + ("" if gpu else "; this tag runs on the CPU"),
                   "sudo nvidia-ctk runtime configure --runtime=docker && "
                   "sudo systemctl restart docker")


def model(root: Path, env: dict[str, str]) -> Finding:
    """The model folder, and its checkpoint's index complete: every shard of weight_map
    there and non-empty, their sizes together at least metadata.total_size."""
    where = env.get("MODEL_HOST_PATH")
    if not where:
        return Finding("model", "warning", "MODEL_HOST_PATH is not set: no model checked")
    if not (root / "model" / "folder").is_file():
        return Finding("model", "error", f"{where} is not a folder on the node",
                       f"copy the model there: rsync -a MODEL/ NODE:{where}/")
    index = root / "model" / "model.safetensors.index.json"
    if not index.is_file():
        return Finding("model", "warning", f"{where} has no model.safetensors.index.json: "
                       "its shards are not checked")
    return _shards(where, json.loads(index.read_text(encoding="utf-8")), _sizes(root))


def _sizes(root: Path) -> dict[str, int]:
    listing = root / "model" / "sizes"
    lines = listing.read_text(encoding="utf-8").splitlines() if listing.is_file() else []
    return {name: int(size) for size, _, name in (line.partition(" ") for line in lines)
            if size.isdigit()}


def _shards(where: str, index: dict[str, Any], sizes: dict[str, int]) -> Finding:
    shards = sorted(set(index.get("weight_map", {}).values()))
    missing = [name for name in shards if sizes.get(name, 0) == 0]
    total = int(index.get("metadata", {}).get("total_size") or 0)
    fix = f"copy the missing shards into {where} again (rsync -a --partial)"
    if missing:
        return Finding("model", "error", f"{where}: {len(missing)} of {len(shards)} shard(s) "
                       f"missing or empty: {', '.join(missing[:3])}", fix)
    held = sum(sizes[name] for name in shards)
    if held < total:
        return Finding("model", "error", f"{where}: the shards hold {held} bytes, fewer than "
                       f"the index's total_size {total}: a copy cut short", fix)
    return Finding("model", "ok", f"{where}: {len(shards)} shard(s), {held / 2**30:.1f} GiB")


def cache_disk(root: Path, env: dict[str, str]) -> Finding:
    where = env.get("CACHE_HOST_PATH")
    if not where:
        return Finding("jit cache", "warning", "CACHE_HOST_PATH is not set: each start "
                       "compiles its kernels again")
    text = (root / "cache-free-kb").read_text().strip() if (root / "cache-free-kb").is_file() \
        else ""
    if not text.isdigit():
        return Finding("jit cache", "error", f"{where} is not a folder on the node",
                       f"sudo mkdir -p {where} && sudo chmod 1777 {where}")
    free = int(text) / 2**20
    if free < CACHE_FREE_GIB:
        return Finding("jit cache", "error", f"{where}: {free:.1f} GiB free, under "
                       f"{CACHE_FREE_GIB} GiB", f"free disk space on {where}'s filesystem")
    return Finding("jit cache", "ok", f"{where}: {free:.0f} GiB free")


def rdma(root: Path, env: dict[str, str]) -> Finding:
    """IB_HCA's device, and IB_GID_INDEX a RoCE v2 GID of a port of it (auto: at boot)."""
    hca, index = env.get("IB_HCA"), env.get("IB_GID_INDEX") or "auto"
    if not hca:
        return Finding("rdma", "ok", "IB_HCA is not set: NCCL uses sockets")
    ports = sorted((root / "sys" / "class" / "infiniband" / hca / "ports").glob("*"))
    if not ports:
        return Finding("rdma", "error", f"no RDMA device {hca} on the node",
                       "ls /sys/class/infiniband (set IB_HCA to one of them)")
    if index == "auto":
        return Finding("rdma", "ok", f"{hca}: the GID index is resolved at boot")
    return _gid(hca, index, ports)


def _gid(hca: str, index: str, ports: list[Path]) -> Finding:
    def read(path: Path) -> str:
        return path.read_text().strip() if path.is_file() else ""
    for port in ports:
        kind, gid = read(port / "gid_attrs" / "types" / index), read(port / "gids" / index)
        if "v2" in kind.lower() and gid.strip("0:"):
            return Finding("rdma", "ok", f"{hca} port {port.name}: GID {index} is RoCE v2 ({gid})")
    return Finding("rdma", "error", f"{hca}: GID index {index} is not a RoCE v2 GID of any port",
                   f"grep -H . /sys/class/infiniband/{hca}/ports/*/gid_attrs/types/* "
                   "(set IB_GID_INDEX to a RoCE v2 one, or auto)")
