"""The host side of the smoke stage: where patched files land in site-packages and what
they must hash to, and the image's labels against the plan's."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from sparkbake.bake import runtime_image
from sparkbake.bases import BaseImage, local_ref
from sparkbake.config.platforms import ARM64
from sparkbake.config.versions import DebootstrapBase, DirUpstream, ImageBase, Tag
from sparkbake.core.smoke_record import CheckFailed
from sparkbake.hashing import file_sha256
from sparkbake.patch.apply import PatchedTree
from sparkbake.planning import Plan, SeriesInfo
from sparkbake.smoke import host
from tests.conftest import fake_engine

CUDA = ImageBase(name="cuda", image="nvidia/cuda:13.0.3-runtime@sha256:" + "c" * 64)
PATCH = """\
diff --git a/pkg/a.py b/pkg/a.py
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1 +1 @@
-a = 1
+a = 2
diff --git a/src/other/b.py b/src/other/b.py
--- a/src/other/b.py
+++ b/src/other/b.py
@@ -1 +1 @@
-b = 1
+b = 2
diff --git a/pkg/gone.py b/pkg/gone.py
deleted file mode 100644
--- a/pkg/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-gone = 1
diff --git a/setup.py b/setup.py
--- a/setup.py
+++ b/setup.py
@@ -1 +1 @@
-x = 1
+x = 2
diff --git a/csrc/k.cu b/csrc/k.cu
--- a/csrc/k.cu
+++ b/csrc/k.cu
@@ -1 +1 @@
-int k;
+int k2;
"""


def make_plan(tmp_path: Path, series: tuple[SeriesInfo, ...] = (),
              runtime: Any = CUDA) -> Plan:
    upstream = tmp_path / "upstream"
    upstream.mkdir(exist_ok=True)
    tag = Tag(name="demo", upstream=DirUpstream(key="up", path=upstream), series=("s",),
              env=(), repository="localhost:5000/demo", platform=ARM64,
              cuda_arch="12.1a", builder=runtime, runtime=runtime)
    return Plan(tag=tag, series=series, problems=(), fetch_key="1" * 64, patch_key="2" * 64,
                kernel_key="3" * 64, wheels_key="4" * 64, inputs="5" * 64)


def with_series(tmp_path: Path) -> Plan:
    folder = tmp_path / "patches" / "s"
    folder.mkdir(parents=True)
    (folder / "0001-x.patch").write_text(PATCH)
    return make_plan(tmp_path, (SeriesInfo("s", folder, (("0001-x.patch", "9" * 64),)),))


def write_wheel(path: Path, members: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name in members:
            archive.writestr(name, f"# {name}\n")
    return path


def patched_tree(root: Path) -> Path:
    for name, text in {"pkg/a.py": "a = 2\n", "src/other/b.py": "b = 2\n", "setup.py": "x\n",
                       "csrc/k.cu": "int k2;\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_wheel_members_leave_out_metadata_and_lift_data_dirs(tmp_path: Path) -> None:
    wheel = write_wheel(tmp_path / "x.whl", ["pkg/__init__.py", "pkg/sub/c.py",
                                             "x-1.dist-info/RECORD",
                                             "x-1.data/purelib/extra/d.py",
                                             "x-1.data/scripts/tool"])
    files, folders = host.wheel_members([wheel])
    assert files == {"pkg/__init__.py", "pkg/sub/c.py", "extra/d.py"}
    assert folders == {"pkg", "pkg/sub", "extra"}


@pytest.mark.parametrize(("path", "deleted", "site"), [
    ("pkg/a.py", False, "pkg/a.py"),  # the same path
    ("src/other/b.py", False, "other/b.py"),  # a src/ layout
    ("pkg/gone.py", True, "pkg/gone.py"),  # deleted where its folder lands
    ("setup.py", False, None),  # never installed
    ("tests/pkg/zzz.py", True, None),  # deleted, and its folder lands nowhere either
    ("tests/pkg/a.py", False, None),  # only src/ is a layout: tests/ is not installed
])
def test_site_path(path: str, deleted: bool, site: str | None) -> None:
    files = {"pkg/a.py", "pkg/__init__.py", "other/b.py"}
    assert host.site_path(path, files, {"pkg", "other"}, deleted) == site


def test_patched_files_hash_what_lands_in_site_packages(tmp_path: Path) -> None:
    plan = with_series(tmp_path)
    tree = patched_tree(tmp_path / "tree")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    write_wheel(wheels / "pkg-1-py3-none-any.whl", ["pkg/__init__.py", "pkg/a.py",
                                                    "other/b.py", "pkg-1.dist-info/RECORD"])
    spec = host.patched_files(plan, tree, wheels)
    assert spec == {
        "files": [
            {"path": "pkg/a.py", "tree": "pkg/a.py", "patch": "s/0001-x.patch",
             "sha256": hashlib.sha256(b"a = 2\n").hexdigest()},
            {"path": "pkg/gone.py", "tree": "pkg/gone.py", "patch": "s/0001-x.patch",
             "sha256": None},
            {"path": "other/b.py", "tree": "src/other/b.py", "patch": "s/0001-x.patch",
             "sha256": file_sha256(tree / "src/other/b.py")},
        ],
        "not_installed": ["setup.py"],
    }


def test_patched_files_without_wheels_is_a_problem_naming_the_command(tmp_path: Path) -> None:
    plan = with_series(tmp_path)
    spec = host.patched_files(plan, patched_tree(tmp_path / "tree"), tmp_path / "none")
    assert spec["problem"].startswith(f"no wheels in {tmp_path / 'none'}")
    assert "run `sparkbake wheels demo`" in spec["problem"]


def test_no_series_or_no_python_patch_says_so(tmp_path: Path) -> None:
    assert host.patched_files(make_plan(tmp_path), tmp_path, tmp_path) == {
        "files": [], "none": "the tag has no patch series"}
    folder = tmp_path / "patches" / "k"
    folder.mkdir(parents=True)
    (folder / "0001.patch").write_text(PATCH[PATCH.index("diff --git a/csrc"):])
    plan = make_plan(tmp_path, (SeriesInfo("k", folder, (("0001.patch", "9" * 64),)),))
    assert host.patched_files(plan, tmp_path, tmp_path)["none"] == \
        "the series patch no Python file"


FACTS = host.Facts(PatchedTree(Path("tree"), "2" * 64, "7" * 64), 1735689600)


def attrs_with(labels: dict[str, str]) -> dict[str, Any]:
    return {"Id": "sha256:" + "e" * 64, "Config": {"Labels": labels}}


def test_labels_as_the_plan_says_pass(tmp_path: Path) -> None:
    plan = make_plan(tmp_path)
    wanted = runtime_image.labels(plan, BaseImage("cuda", CUDA.image, CUDA.digest), FACTS.patched,
                              FACTS.source_date)
    detail = host.check_labels(fake_engine(None), attrs_with({**wanted, "maintainer": "x"}), plan,
                                     FACTS)
    assert detail.startswith(f"11 labels as the plan says (revision {'7' * 12}")


def test_a_wrong_or_missing_label_fails_naming_it(tmp_path: Path) -> None:
    plan = make_plan(tmp_path)
    wanted = runtime_image.labels(plan, BaseImage("cuda", CUDA.image, CUDA.digest), FACTS.patched,
                              FACTS.source_date)
    wanted["org.opencontainers.image.revision"] = "0" * 64
    del wanted["dev.sparkbake.cuda-arch"]
    with pytest.raises(CheckFailed) as caught:
        host.check_labels(fake_engine(None), attrs_with(wanted), plan, FACTS)
    cuda_arch, revision = str(caught.value).split("; ")
    assert cuda_arch == "dev.sparkbake.cuda-arch: image has None, the plan says '12.1a'"
    assert revision.startswith("org.opencontainers.image.revision: image has '0000000000")
    assert revision.endswith("...', the plan says '" + "7" * 43 + "...'")


class Images:
    """The engine's images as check_labels asks for them: only `get`, none there."""

    def get(self, ref: str) -> Any:
        raise docker.errors.ImageNotFound(ref)


class NoImages:
    images = Images()


def test_a_debootstrap_base_missing_here_leaves_its_digest_unchecked(tmp_path: Path) -> None:
    debian = DebootstrapBase(name="debian", suite="bookworm", mirror=None, variant="minbase",
                             packages=())
    plan = make_plan(tmp_path, runtime=debian)
    ref = local_ref(debian, plan.tag.platform)
    wanted = runtime_image.labels(plan, BaseImage("debian", ref, "sha256:old"), FACTS.patched,
                              FACTS.source_date)
    detail = host.check_labels(fake_engine(NoImages()), attrs_with(wanted), plan, FACTS)
    assert detail.endswith(f"; org.opencontainers.image.base.digest not checked: "
                           f"{local_ref(debian, plan.tag.platform)} is not in this engine")
    assert detail.startswith("10 labels as the plan says")
