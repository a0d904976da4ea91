"""clean and gc of build/ and wheels/ on a fake tree: what stays, what goes, dry runs, and
symlinks that would lead outside. No Docker: DOCKER_HOST points at a closed port."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sparkbake import planning
from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.errors import UsageError
from sparkbake.housekeeping import cachetrim, tidy
from sparkbake.housekeeping.sweep import Item, report
from sparkbake.oci import local_registry
from tests.conftest import versions_yaml

STALE = "f" * 64
HOUR_AGO = time.time() - 2 * 3600

CONFIG = versions_yaml(repository="localhost:5000/sparkbake-gc", tags="""\
  one:
    upstream: tree
    series: [demo]
  two:
    upstream: tree
    series: []
""")


@pytest.fixture(autouse=True)
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    monkeypatch.setenv("SPARKBAKE_CACHE", str(tmp_path / "host-cache"))


@pytest.fixture
def project(tmp_path: Path) -> versions.Config:
    root = tmp_path / "project"
    (root / "upstream").mkdir(parents=True)
    (root / "upstream" / "demo.py").write_text("print('demo')\n")
    (root / "patches" / "demo").mkdir(parents=True)
    (root / "patches" / "demo" / "series").write_text("0001-demo.patch\n")
    (root / "patches" / "demo" / "0001-demo.patch").write_text("--- a/demo.py\n+++ b/demo.py\n")
    (root / "versions.yaml").write_text(CONFIG)
    return versions.load(root / "versions.yaml")


def plans(loaded: versions.Config) -> dict[str, planning.Plan]:
    return {name: planning.make(loaded, tag) for name, tag in loaded.tags.items()}


def put(path: Path, data: bytes = b"x" * 100, age: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if age is not None:
        for touched in (path, path.parent):
            os.utime(touched, (age, age))
    return path


def fake_tree(loaded: versions.Config) -> dict[str, Path]:
    """Current entries of both tags, stale ones, a failed tree, leftovers, foreign files."""
    one, two = plans(loaded)["one"], plans(loaded)["two"]
    build, wheels = loaded.build_dir, loaded.wheels_dir
    return {
        "sources": put(build / "sources" / one.fetch_key / "tree" / "demo.py"),
        "patched-one": put(build / "patched" / one.patch_key / "patches.json"),
        "patched-two": put(build / "patched" / two.patch_key / "patches.json"),
        "wheels-one": put(wheels / one.wheels_key / "wheels.json"),
        "kernels-one": put(wheels / "kernels" / one.kernel_key / "kernels.json"),
        "stale-sources": put(build / "sources" / STALE / "tree" / "a.py", b"y" * 1000),
        "stale-wheels": put(wheels / STALE / "a.whl", b"w" * 2000),
        "stale-kernels": put(wheels / "kernels" / STALE / "k.so"),
        "stale-runtime": put(wheels / "runtime" / ("a" * 16) / "r.whl"),
        "failed": put(build / "patched" / f"{one.patch_key}.failed" / "demo.py"),
        "old-context": put(build / "contexts" / "builder.abc" / "Dockerfile", age=HOUR_AGO),
        "new-context": put(build / "contexts" / "bake.xyz" / "layer.tar"),
        "half-written": put(wheels / f".{STALE}.k2j3.tmp" / "a.whl", age=HOUR_AGO),
        "foreign": put(wheels / "NOTES.txt"),
        "release": put(build / "releases" / "one.json"),
        "smoke-one": put(build / "smoke" / "one.json"),
        "smoke-two": put(build / "smoke" / "two.json"),
        "oci-lock": put(build / ".oci.lock", b""),
    }


def labels(items: list[Item]) -> set[str]:
    return {item.label for item in items if not item.refused}


def entry(loaded: versions.Config, path: Path, below: str) -> str:
    """The label of the entry of path that lies directly under build/<below> (or wheels/)."""
    relative = path.relative_to(loaded.root / below)
    return str(Path(below) / relative.parts[0])


def test_gc_removes_what_no_tag_uses_and_keeps_current_keys(project: versions.Config) -> None:
    tree = fake_tree(project)
    items = tidy.gc_items(project, list(plans(project).values()))
    gone = {"stale-sources": "build/sources", "stale-wheels": "wheels",
            "stale-kernels": "wheels/kernels", "stale-runtime": "wheels/runtime",
            "failed": "build/patched", "old-context": "build/contexts", "half-written": "wheels"}
    assert labels(items) == {entry(project, tree[name], below) for name, below in gone.items()}
    freed = report("gc", items, dry_run=False, say=lambda line: None)
    assert freed == 1000 + 2000 + 100 * 5
    for name, path in tree.items():
        assert path.exists() == (name not in gone), name


def test_dry_run_removes_nothing_and_says_what_would_go(project: versions.Config) -> None:
    tree = fake_tree(project)
    said: list[str] = []
    freed = report("gc", tidy.gc_items(project, list(plans(project).values())),
                   dry_run=True, say=said.append)
    assert all(path.exists() for path in tree.values())
    assert freed == 3500
    assert said[-1] == "gc: would free 3.5 kB (7 items; dry run, nothing removed)"
    assert f"gc: would remove build/sources/{STALE} (1.0 kB; no tag's current fetch key)" in said


def test_gc_with_nothing_stale_says_so(project: versions.Config) -> None:
    said: list[str] = []
    assert report("gc", tidy.gc_items(project, []), False, said.append) == 0
    assert said == ["gc: nothing to remove"]


def test_a_symlinked_folder_leading_outside_is_refused(project: versions.Config,
                                                       tmp_path: Path) -> None:
    elsewhere = put(tmp_path / "elsewhere" / STALE / "precious.txt").parent.parent
    project.build_dir.mkdir(parents=True)
    (project.build_dir / "sources").symlink_to(elsewhere)
    said: list[str] = []
    items = tidy.gc_items(project, list(plans(project).values()))
    report("gc", items, dry_run=False, say=said.append)
    assert (elsewhere / STALE / "precious.txt").is_file()
    assert said[0].startswith(f"gc: kept build/sources/{STALE}: it resolves to ")
    assert said[-1] == "gc: nothing to remove"


def test_a_stale_entry_that_is_a_symlink_is_unlinked_not_followed(project: versions.Config,
                                                                  tmp_path: Path) -> None:
    target = put(tmp_path / "elsewhere" / "precious.txt").parent
    (project.build_dir / "sources").mkdir(parents=True)
    (project.build_dir / "sources" / STALE).symlink_to(target)
    items = tidy.gc_items(project, list(plans(project).values()))
    report("gc", items, dry_run=False, say=lambda line: None)
    assert not (project.build_dir / "sources" / STALE).is_symlink()
    assert (target / "precious.txt").is_file()


def test_clean_tag_keeps_what_another_tag_uses(project: versions.Config) -> None:
    tree = fake_tree(project)
    every = plans(project)
    items = tidy.clean_tag_items(project, every["one"], {"two": every["two"]})
    said: list[str] = []
    report("clean", items, dry_run=False, say=said.append)
    gone = {"patched-one", "wheels-one", "failed", "smoke-one"}
    for name, path in tree.items():
        assert path.exists() == (name not in gone), name
    # the same upstream, and no patch touches a kernel: the same fetch and kernel keys
    assert f"clean: kept build/sources/{every['one'].fetch_key}: two uses it too" in said
    assert f"clean: kept wheels/kernels/{every['one'].kernel_key}: two uses it too" in said


def test_clean_all_keeps_records_locks_and_a_running_registry(
        project: versions.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = fake_tree(project)
    put(project.build_dir / "registry" / "data" / "blob")
    monkeypatch.setattr(local_registry, "running", lambda loaded: 4242)
    said: list[str] = []
    report("clean", tidy.clean_all_items(project), False, said.append)
    assert sorted(p.name for p in project.build_dir.iterdir()) == [".oci.lock", "registry",
                                                                   "releases"]
    assert list(project.wheels_dir.iterdir()) == []
    assert tree["release"].is_file()
    assert any(line.startswith("clean: kept build/registry: the embedded registry runs (pid "
                               "4242)") for line in said)


def test_clean_all_keeps_the_record_of_a_cluster_that_is_up(project: versions.Config) -> None:
    clusters = project.build_dir / "clusters"
    up, up_memory = put(clusters / "cpu-3.73.json"), put(clusters / "cpu-3.73.memory.json")
    up_bench = put(clusters / "cpu-3.73.bench.json"), put(clusters / "cpu-3.73.bench.log")
    taken_down = put(clusters / "fixture.memory.json")  # down removed fixture.json
    lock = put(clusters / "cpu-3.73.up.lock")
    said: list[str] = []
    report("clean", tidy.clean_all_items(project), False, said.append)
    assert (up.is_file(), up_memory.is_file(), lock.is_file()) == (True, True, True)
    assert [path.is_file() for path in up_bench] == [True, True]
    assert not taken_down.exists()
    assert [line for line in said if "clusters" in line] == [
        "clean: kept build/clusters/cpu-3.73.json: the record of cpu-3.73's cluster, up on its "
        "nodes (its measurements stay with it); `sparkbake down cpu-3.73` first",
        "clean: removed build/clusters/fixture.memory.json (100 B; clean --all)"]


def test_compile_cache_trimmed_oldest_first(tmp_path: Path) -> None:
    folder = tmp_path / "sccache"
    old, middle, new = (put(folder / name[0] / name, b"c" * 400, age=time.time() - 3000 + i)
                        for i, name in enumerate(("old", "middle", "new")))
    assert cachetrim.trim_item(folder, 1200) is None
    item = cachetrim.trim_item(folder, 500)
    assert item is not None and item.size == 800
    item.remove()
    assert (old.exists(), middle.exists(), new.exists()) == (False, False, True)


def test_sizes_parse_in_powers_of_1000() -> None:
    assert cachetrim.parse_size("20G") == 20 * 10**9
    assert cachetrim.parse_size("1.5M") == 1_500_000
    assert cachetrim.parse_size("512") == 512
    with pytest.raises(UsageError):
        cachetrim.parse_size("twenty")


def test_cli_gc_and_clean(project: versions.Config, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    tree = fake_tree(project)
    put(tmp_path / "host-cache" / "sccache" / "a" / "obj", b"o" * 3000, age=HOUR_AGO)
    put(tmp_path / "host-cache" / "bytecode" / "ab" / "abcd", b"b" * 2000, age=HOUR_AGO)
    path = str(project.path)
    assert main(["--config", path, "gc", "--dry-run", "--max-cache-size", "1K"]) == 0
    out = capsys.readouterr().out
    # each cache is trimmed to the size: the compile cache's file and the bytecode's
    assert out.count("(1 files)") == 2 and "would free 8.5 kB (9 items" in out
    assert all(p.exists() for p in tree.values())
    assert main(["--config", path, "clean", "two"]) == 0
    assert not tree["smoke-two"].exists() and tree["smoke-one"].exists()
    assert main(["--config", path, "clean"]) == 2
    assert main(["--config", path, "clean", "one", "--all"]) == 2
    assert main(["--config", path, "gc", "--max-cache-size", "lots"]) == 2
