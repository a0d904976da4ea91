"""The kernel-kho rule: Kexec HandOver's tell read from a host root's proc/ (check-env
--host-root, the image's entrypoint on the node)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.__main__ import main
from sparkbake.nodes import preflight
from tests.nodeenv import ENV_DIR, at_dcp_1, write_sysctls

VERSIONS = Path(__file__).parents[2] / "versions.yaml"
GIB_KB = 2**20
HWE = "7.0.0-1019-nvidia"
BOOT = "BOOT_IMAGE=/boot/vmlinuz-{release} root=UUID=1 ro quiet splash"


def kernel_root(root: Path, release: str = HWE, cma_free_kb: int = int(9.5 * GIB_KB),
                cma_total_kb: int = 0, cmdline: str = BOOT) -> Path:
    """A host root with the floor's sysctls, a kernel release, command line and meminfo."""
    write_sysctls(root)
    (root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text(f"{release}\n")
    (root / "proc" / "cmdline").write_text(cmdline.format(release=release) + "\n")
    (root / "proc" / "meminfo").write_text(
        f"MemTotal:       127535892 kB\nMemFree:        120000000 kB\n"
        f"CmaTotal:       {cma_total_kb:>9} kB\nCmaFree:        {cma_free_kb:>9} kB\n")
    return root


def fired(root: Path, nodes: int) -> dict[str, tuple[str, str]]:
    checks = preflight.entrypoint().checks
    found = checks.check({"NNODES": str(nodes)}, host_root=root, gpu_memory=lambda: None)
    return {f.rule: (f.level, f.message) for f in found if f.rule == "kernel-kho"}


def test_the_tell_on_more_than_one_node_is_an_error_naming_the_kernel(tmp_path: Path) -> None:
    assert fired(kernel_root(tmp_path), 2) == {"kernel-kho": (
        "error", f"kernel {HWE} holds 9.5 GiB as CMA for Kexec HandOver (CmaFree 9.5 GiB, "
        "CmaTotal 0 MiB) and kho=off is not on its command line")}


def test_the_tell_on_one_node_is_a_warning(tmp_path: Path) -> None:
    assert fired(kernel_root(tmp_path), 1)["kernel-kho"][0] == "warning"


@pytest.mark.parametrize("changes", [
    {"cmdline": BOOT + " kho=off"}, {"cmdline": BOOT + " kho=0"},
    {"cma_free_kb": int(0.03 * GIB_KB)},  # a kernel without KHO: the 32 MiB pool, mostly free
    {"cma_total_kb": 4 * GIB_KB},  # a CMA pool asked for on the command line
    {"release": "6.17.0-1032-nvidia", "cma_free_kb": 32768, "cma_total_kb": 32768}])
def test_no_tell_no_finding(tmp_path: Path, changes: dict[str, object]) -> None:
    assert fired(kernel_root(tmp_path, **changes), 4) == {}  # type: ignore[arg-type]


def test_a_root_without_meminfo_says_nothing(tmp_path: Path) -> None:
    assert fired(write_sysctls(tmp_path), 4) == {}


def test_check_env_refuses_a_multi_node_file_on_the_hwe_kernel_naming_kho_off(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = tmp_path / "head.env"
    text = at_dcp_1((ENV_DIR / "head.env").read_text())
    env.write_text(text)
    root = kernel_root(tmp_path / "root")
    assert main(["--config", str(VERSIONS), "check-env", str(env), "--tag", "3.73-vision",
                 "--host-root", str(root)]) == 2
    out, err = capsys.readouterr()
    line = next(n for n, row in enumerate(text.splitlines(), 1) if row.startswith("NNODES="))
    errors = [row for row in out.splitlines() if ": error: " in row]
    assert errors == [out.splitlines()[-2]]  # the one error, its reason after it
    assert out.splitlines()[-2:] == [
        f"{env}:{line}: error: kernel {HWE} holds 9.5 GiB as CMA for Kexec HandOver (CmaFree "
        "9.5 GiB, CmaTotal 0 MiB) and kho=off is not on its command line [kernel-kho]",
        "  -> RDMA cannot pin those pageblocks: NCCL across nodes fails at init with "
        "ibv_reg_mr_iova2 ... Cannot allocate memory; add kho=off to the kernel command line "
        "(GRUB_CMDLINE_LINUX in /etc/default/grub, update-grub, reboot) or boot kernel "
        "6.17.0-1032"]
    assert f"sparkbake: error: {env}: 1 preflight error(s) for production-3.73-vision\n" in err
    (root / "proc" / "cmdline").write_text(BOOT.format(release=HWE) + " kho=off\n")
    assert main(["--config", str(VERSIONS), "check-env", str(env), "--tag", "3.73-vision",
                 "--host-root", str(root)]) == 0
