"""The node's RDMA fabric as NCCL needs it: IB_GID_INDEX=auto resolved at the container's
start to the index of the fabric interface's RoCE v2 GID, read from the kernel's GID table
(/sys/class/infiniband/DEVICE/ports/PORT/gids/N with gid_attrs/types/N and ndevs/N).

Standard library only, Python >= 3.10: copied into the image beside entrypoint.py, which
calls resolve_gid_index before it execs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path

INFINIBAND = "/sys/class/infiniband"  # the RDMA devices, their ports and GID tables


def gid_index(env: Mapping[str, str], root: str = INFINIBAND) -> str | None:
    """IB_GID_INDEX=auto as the number NCCL takes: the RoCE v2 GID of FABRIC_IFACE (any
    interface where unset) on IB_HCA's devices, the one of
    VLLM_HOST_IP first, then an IPv4 one, the lowest index of a kind; None: none there."""
    host = env.get("VLLM_HOST_IP", "")
    found: list[tuple[int, int]] = []  # (how well it fits, index)
    for port in _rdma_ports(env.get("IB_HCA", ""), Path(root)):
        for entry in sorted((port / "gid_attrs" / "types").glob("*")):
            gid = _roce_v2_gid(port, entry.name, env.get("FABRIC_IFACE", ""))
            if gid is not None and entry.name.isdigit():
                mapped = gid.ipv4_mapped
                fit = 0 if host in (str(mapped), str(gid)) else 1 if mapped else 2
                found.append((fit, int(entry.name)))
    return str(min(found)[1]) if found else None


def _rdma_ports(hca: str, root: Path) -> list[Path]:
    """The ports of the devices NCCL_IB_HCA's syntax names (`=NAME`: exact, `NAME:PORT`,
    `^NAME`: all but those); all devices where it is unset."""
    names = [part.split(":")[0] for part in hca.lstrip("=^").split(",") if part]
    devices = sorted(root.glob("*"))
    if names and hca.startswith("^"):
        devices = [device for device in devices if device.name not in names]
    elif names:
        devices = [root / name for name in names]
    return [port for device in devices for port in sorted((device / "ports").glob("*"))]


def _roce_v2_gid(port: Path, index: str, interface: str) -> ipaddress.IPv6Address | None:
    """The GID at index when it is RoCE v2 on the interface (unreadable slots: None)."""
    try:
        kind = (port / "gid_attrs" / "types" / index).read_text(encoding="utf-8").strip()
        device = (port / "gid_attrs" / "ndevs" / index).read_text(encoding="utf-8").strip()
        gid = ipaddress.IPv6Address((port / "gids" / index).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    fits = kind == "RoCE v2" and (not interface or device == interface) and int(gid) != 0
    return gid if fits else None


def resolve_gid_index(env: dict[str, str], root: str = INFINIBAND) -> str | None:
    """NCCL_IB_GID_INDEX set where it (or IB_GID_INDEX) is auto; the error when no GID fits."""
    if env.get("NCCL_IB_GID_INDEX", env.get("IB_GID_INDEX")) != "auto":
        return None
    index = gid_index(env, root)
    if index is None:
        return (f"sparkbake: IB_GID_INDEX=auto, but no RoCE v2 GID of "
                f"{env.get('FABRIC_IFACE') or 'any interface'} is on "
                f"{env.get('IB_HCA') or 'any RDMA device'} ({root}); set IB_GID_INDEX to the "
                "index (show_gids lists them)")
    env["NCCL_IB_GID_INDEX"] = index
    return None
