"""sparkbake host kernel: what a node's kernel says of itself under a root folder's proc/.

Standard library only, Python >= 3.10. Baked beside preflight.py, which loads it as its
sibling; the host's node check reads the same facts from a copy of a node's proc/.

Kexec HandOver (KHO), on by default in DGX OS's HWE kernel 7.0, sets about 9.3 GiB aside as
CMA pageblocks that RDMA cannot pin, so multi-node NCCL fails at init (ibv_reg_mr_iova2 ...
Cannot allocate memory). Its tell: CmaFree near 9.3-9.7 GiB in meminfo while CmaTotal reads
0 or the 32 MiB default, and no kho=off on the kernel command line.
"""

from __future__ import annotations

from pathlib import Path

OFF = ("off", "0", "n", "no", "false")  # how the kernel reads a false boolean parameter


def meminfo(root: Path | str) -> dict[str, int] | None:
    """proc/meminfo's fields in kB; None where it cannot be read."""
    try:
        text = (Path(root) / "proc" / "meminfo").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        words = value.split()
        if words and words[0].isdigit():
            fields[name.strip()] = int(words[0])
    return fields


def release(root: Path | str) -> str:
    """The kernel's release (proc/sys/kernel/osrelease); 'unknown' where unreadable."""
    try:
        text = (Path(root) / "proc" / "sys" / "kernel" / "osrelease").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return "unknown"
    return text.strip() or "unknown"


def kho_off(root: Path | str) -> bool:
    """The kernel command line turns KHO off (kho=off, or another false boolean)."""
    try:
        words = (Path(root) / "proc" / "cmdline").read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return False
    return any(word.split("=", 1)[1].lower() in OFF for word in words
               if word.startswith("kho="))


def kho_tell(root: Path | str, free_gib: list[float], default_kib: int) -> dict[str, str] | None:
    """The tell's figures where the kernel under root shows it: CmaFree within free_gib
    (low, high), CmaTotal at most default_kib, kho not off; else None (meminfo unreadable:
    not known, None too)."""
    fields = meminfo(root)
    if fields is None or "CmaFree" not in fields or kho_off(root):
        return None
    free, total = fields["CmaFree"], fields.get("CmaTotal", 0)
    low, high = (gib * 2**20 for gib in free_gib)
    if not (low <= free <= high and total <= default_kib):
        return None
    return {"release": release(root), "cma_free": f"{free / 2**20:.1f}",
            "cma_total": f"{total / 1024:.0f}"}
