"""The runtime packages in groups, a layer each: the table matched on canonical names, first
match wins; files by the RECORD that lists them, bytecode with its source, files in no
RECORD and empty folders in the rest; each group's key moved by its own packages alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.bake import venvgroups, venvsplit
from sparkbake.errors import ConfigError
from sparkbake.lock import pins
from sparkbake.oci import layers
from tests.unit.test_venv_split import DATE, ELF, PY, SITE, dist, skeleton, upstream, write

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "group"), [
    ("torch", "torch"), ("nvidia-cudnn-cu13", "torch"), ("nvidia_cusparselt_cu13", "torch"),
    ("Nvidia.CuBLAS", "torch"), ("nvidia-cudnn-frontend", "jit"), ("flashinfer-python", "jit"),
    ("nvidia-cutlass-dsl-libs-cu13", "jit"), ("nvidia-cuda-nvcc", "jit"), ("ninja", "jit"),
    ("nvidia-ml-py", "rest"), ("transformers", "rest"), ("no-such-package", "rest")])
def test_a_distribution_is_in_the_first_group_whose_pattern_matches_its_canonical_name(
        name: str, group: str) -> None:
    assert venvgroups.group_of(name).name == group


def test_every_cuda_library_of_the_real_locks_is_out_of_the_rest() -> None:
    for lock in sorted((REPO / "locks" / "runtime").glob("*.txt")):
        names = pins.packages(lock)
        assert venvgroups.present(names) == venvgroups.GROUPS, lock.name
        cuda = [n for n in names if n.startswith(("nvidia-cu", "nvidia-nv", "cuda-"))]
        assert [n for n in cuda if venvgroups.group_of(n) is venvgroups.REST] == [], lock.name


def test_a_group_without_a_package_has_no_layer_and_the_rest_always_has_one() -> None:
    assert [g.name for g in venvgroups.present([])] == ["rest"]
    assert [g.name for g in venvgroups.present(["triton", "six"])] == ["torch", "rest"]


def test_the_lock_is_read_per_package_as_its_requirement_and_sorted_hashes(
        tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("# runtime lock\n# asked: ninja==1.13.2  # pin\nNinja==1.13.2 \\\n"
                    "    --hash=sha256:bb \\\n    --hash=sha256:aa\nsix==1.17.0 \\\n"
                    "    --hash=sha256:cc\n")
    assert pins.packages(lock) == {"ninja": "Ninja==1.13.2 sha256:aa sha256:bb",
                                        "six": "six==1.17.0 sha256:cc"}
    lock.write_text("six==1.17.0  # via vllm\nsix==1.16.0 ; python_version < '3'\n")
    assert pins.packages(lock) == {
        "six": "six==1.17.0; six==1.16.0 ; python_version < '3'"}
    lock.write_text("six=1.17.0\n")
    with pytest.raises(ConfigError, match=r"'six=1\.17\.0' is not a requirement"):
        pins.packages(lock)


def runtime_tree(root: Path) -> None:
    """The skeleton (pip: the rest), torch with a CUDA library in the shared `nvidia/`,
    nvcc there too, a script and bytecode, the toolkit link; and the upstream."""
    skeleton(root)
    dist(root, "torch", "2.14.0", {"torch/__init__.py": b"", "torch/_C.so": ELF,
                                   "../../../bin/torchrun": b"#!"})
    write(root, f"{SITE}/torch/__pycache__/__init__.cpython-311.pyc", b"pyc")
    dist(root, "nvidia_cublas", "13.1", {"nvidia/cu13/lib/libcublas.so.13": ELF})
    dist(root, "nvidia_cuda_nvcc", "13.0.88", {"nvidia/cu13/bin/nvcc": ELF})
    (root / "opt/venv/cuda").symlink_to(f"lib/python{PY}/site-packages/nvidia/cu13")
    write(root, f"{SITE}/stray.txt")  # in no RECORD
    upstream(root)


def grouped(root: Path) -> dict[str, tuple[str, ...]]:
    runtime = venvsplit.split(root, PY, ["tinykern"]).runtime
    return venvgroups.split(root, PY, runtime, venvgroups.GROUPS)


def test_files_go_by_the_record_that_lists_them_with_bytecode_following_its_source(
        tmp_path: Path) -> None:
    runtime_tree(tmp_path)
    parts = grouped(tmp_path)
    assert set(parts["torch"]) == {
        f"{SITE}/torch/__init__.py", f"{SITE}/torch/_C.so", "opt/venv/bin/torchrun",
        f"{SITE}/torch/__pycache__/__init__.cpython-311.pyc",
        f"{SITE}/nvidia/cu13/lib/libcublas.so.13",
        *(f"{SITE}/{info}.dist-info/{n}" for info in ("torch-2.14.0", "nvidia_cublas-13.1")
          for n in ("METADATA", "RECORD"))}
    assert set(parts["jit"]) == {f"{SITE}/nvidia/cu13/bin/nvcc", *(
        f"{SITE}/nvidia_cuda_nvcc-13.0.88.dist-info/{n}" for n in ("METADATA", "RECORD"))}
    assert {"opt/venv/cuda", "opt/venv/bin/python", "opt/venv/bin/pip", "opt/venv/include",
            "opt/venv/pyvenv.cfg", f"{SITE}/stray.txt"} <= set(parts["rest"])
    assert not any("tinykern" in name for part in parts.values() for name in part)


def test_the_groups_layers_hold_the_runtime_part_a_shared_folder_alike_in_each(
        tmp_path: Path) -> None:
    runtime_tree(root := tmp_path / "root")
    runtime = venvsplit.split(root, PY, ["tinykern"]).runtime
    whole = layers.entries(layers.from_paths(root, runtime, tmp_path / "all.tar.gz", DATE).path)
    union: dict[str, layers.Entry] = {}
    for name, paths in grouped(root).items():
        entries = layers.entries(layers.from_paths(root, paths, tmp_path / f"{name}.tar.gz",
                                                   DATE).path)
        assert all(union.get(path, entry) == entry for path, entry in entries.items())
        union |= entries
    assert union == whole
    folder = f"{SITE}/nvidia/cu13"  # shared by torch's CUDA library and the JIT's nvcc
    assert all(folder in layers.entries(tmp_path / f"{n}.tar.gz") for n in ("torch", "jit"))


def test_a_group_without_a_layer_leaves_its_files_to_the_rest(tmp_path: Path) -> None:
    runtime_tree(tmp_path)
    runtime = venvsplit.split(tmp_path, PY, ["tinykern"]).runtime
    parts = venvgroups.split(tmp_path, PY, runtime, (venvgroups.GROUPS[0], venvgroups.REST))
    assert list(parts) == ["torch", "rest"]
    assert f"{SITE}/nvidia/cu13/bin/nvcc" in parts["rest"]
    assert sorted([*parts["torch"], *parts["rest"]]) == sorted(
        [*grouped(tmp_path)["torch"], *grouped(tmp_path)["jit"], *grouped(tmp_path)["rest"]])
