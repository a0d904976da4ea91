"""Each record's JSON, byte for byte, against golden files in tests/data/records, written as
the code writes it (the baked manifest's bytes are in the image's digest), and read back to
the same value. Every optional part is present in one case and absent in another."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sparkbake import records
from sparkbake.bake import runtime_image
from sparkbake.bases import BaseImage
from sparkbake.config.model import Capabilities, ImageBase, Listed, PypiUpstream, Tag
from sparkbake.config.platforms import ARM64
from sparkbake.console.display import StageRun
from sparkbake.core.smoke_record import CheckResult, SmokeReport
from sparkbake.core.stages import Stage
from sparkbake.deploy.report import DeployReport, HostReport, NodeEngine, NodeSmoke, NodeTransfer
from sparkbake.nodes import bench_store, memory_readout
from sparkbake.nodes.bench import BenchFigures, Load
from sparkbake.nodes.bench_store import Measured
from sparkbake.nodes.cluster import Cluster, ClusterNode
from sparkbake.nodes.engines import Node
from sparkbake.oci import image_layout, layers
from sparkbake.patch.apply import PatchedTree
from sparkbake.pipeline import verify
from sparkbake.pipeline.tags import TagRow
from sparkbake.planning import Plan, SeriesInfo
from sparkbake.publish import releases
from sparkbake.publish.record import (
    Attached,
    Change,
    Release,
    ReleaseBench,
    ReleaseDiff,
    ReleaseSeries,
    ReleaseSmoke,
)
from sparkbake.wheels.container_build import WheelSet
from sparkbake.wheels.report import (
    CompileCacheUse,
    Jobs,
    Kernel,
    KernelsUsed,
    ThirdPartySource,
    Wheel,
    WheelsReport,
    read_report,
    write_report,
)
from tests.conftest import DATA, plain_console

GOLDEN = DATA / "records"
SHA = {c: c * 64 for c in "abcdef0123456789"}
TIME = "2026-01-01T00:00:00+00:00"


def indented(record: Any, _unused: Path | None = None) -> str:
    """How the smoke, deploy, verify and cluster records are written (a case's folder is
    not needed: no function of theirs writes them alone)."""
    return json.dumps(records.to_json(record), indent=2) + "\n"


# wheels.json -----------------------------------------------------------------------------

KERNEL = Kernel("pkg/_k.so", SHA["1"], ("sm_121a", "sm_120"))
THIRDPARTY = ThirdPartySource("cutlass", "https://example.com/cutlass.git", "v4.0",
                              SHA["2"][:40], SHA["3"])
BUILT = WheelsReport(
    cuda_arch="12.1a", sm_arch="sm_121a", nvcc="Build cuda_13.0",
    wheels=(Wheel("pkg-1.0+sb.1-cp312-linux_aarch64.whl", SHA["4"], "pkg", (KERNEL,)),
            Wheel("other-2.0-py3-none-any.whl", SHA["5"], "other", ())),
    local_version="sb.1", kernels=KernelsUsed(SHA["6"], reused=False),
    jobs=Jobs(4, 2, "64 GiB / 6 GiB per job"),
    compile_cache=CompileCacheUse("local", "local", {"hits": 1, "misses": 2, "hit_rate": 0.5,
                                                     "version": None}),
    thirdparty=(THIRDPARTY,))
MADE_HERE = WheelsReport(
    cuda_arch="12.1a", sm_arch="sm_121a", nvcc="none: kernels from seed.whl",
    wheels=(Wheel("pkg-1.0+sb.2-cp312-linux_aarch64.whl", SHA["7"], "pkg", (KERNEL,)),),
    local_version="sb.2", kernels=KernelsUsed(SHA["8"], reused=True, seed="seed.whl"),
    series_files=("pkg/a.py", "pkg/b.py"))
WHEELS_REPORTS = {
    "wheels-built": BUILT,
    "wheels-built-bare": WheelsReport("12.1a", "sm_121a", "Build cuda_13.0", ()),
    "wheels-built-empty-thirdparty": dataclasses.replace(BUILT, thirdparty=(), jobs=None,
                                                         compile_cache=CompileCacheUse(
                                                             "off", "off", {})),
    "wheels-made-here": MADE_HERE,
    "wheels-made-here-assembled": dataclasses.replace(
        MADE_HERE, kernels=KernelsUsed(SHA["8"], reused=True, assembled_from="pristine.whl")),
    "wheels-made-here-no-kernels": dataclasses.replace(MADE_HERE, kernels=None,
                                                       series_files=()),
}
# reports of earlier versions, and those of the fixtures, read and written again
WHEELS_READ = {
    "wheels-early": {"wheels": [{"file": "a.whl", "sha256": SHA["9"]}]},
    "wheels-compiled": json.loads((DATA / "reports" / "wheels-compiled.json").read_text()),
    "wheels-assembled": json.loads((DATA / "reports" / "wheels-assembled.json").read_text()),
}


def wheels_text(report: WheelsReport, tmp_path: Path) -> str:
    write_report(tmp_path, report)
    assert read_report(tmp_path) == report
    return (tmp_path / "wheels.json").read_text()


def wheels_read_text(data: dict[str, Any], tmp_path: Path) -> str:
    (tmp_path / "wheels.json").write_text(json.dumps(data))
    return wheels_text(read_report(tmp_path), tmp_path)


# the baked manifest ----------------------------------------------------------------------

def plan(tmp_path: Path, *, full: bool) -> Plan:
    upstream = PypiUpstream("vllm-0.33.0", name="vllm", version="0.33.0", sha256=SHA["a"],
                            source_date_epoch=1735689600 if full else None)
    base = ImageBase("cuda", "nvidia/cuda:13.0.2-runtime@sha256:" + SHA["c"])
    capabilities = Capabilities(dcp_sizes=(1, 2), speculative=("dspark",), model="deepseek_v4",
                                device_memory_gib=121.7, because=(("dcp_sizes", "why"),))
    tag = Tag(name="demo", upstream=upstream, series=("s",) if full else (),
              env=(("A", "1"), ("B", "2")) if full else (), repository="localhost:5000/demo",
              platform=ARM64, cuda_arch="12.1a", builder=base, runtime=base,
              capabilities=capabilities if full else None,
              pins=Listed(("torch==2.9.0",), "versions.yaml:3") if full else Listed())
    series = (SeriesInfo("s", tmp_path, (("0001-x.patch", SHA["b"]),
                                         ("https://example.com/x.patch", SHA["d"]))),)
    return Plan(tag=tag, series=series if full else (), problems=(), fetch_key=SHA["1"],
                patch_key=SHA["2"], kernel_key=SHA["3"], wheels_key=SHA["4"], inputs=SHA["5"])


def manifest_text(tmp_path: Path, *, full: bool) -> str:
    report = BUILT if full else WheelsReport("12.1a", "sm_121a", "Build cuda_13.0",
                                             BUILT.wheels[1:])
    recorded = runtime_image.manifest(
        plan(tmp_path, full=full), BaseImage("cuda", "nvidia/cuda:13.0.2-runtime", SHA["c"]),
        WheelSet(tmp_path, "k", report), PatchedTree(tmp_path, SHA["6"], SHA["7"]),
        1735689600, "/usr/local/cuda" if full else None)
    # as the bake writes /opt/sparkbake/manifest.json (runtime_image._files_layer)
    return json.dumps(recorded, indent=2, sort_keys=True) + "\n"


# release records, the index and a diff -------------------------------------------------

ATTACHED = Attached(SHA["1"], SHA["2"], None, "fallback tag", SHA["3"])
RELEASE = Release(
    tag="demo", repository="r", images=("r:demo", "r:demo-1"), digest=SHA["a"],
    pinned=f"r@{SHA['a']}",
    smoke=ReleaseSmoke("passed", image_id=SHA["b"], time=TIME,
                       checks={"passed": 3, "skipped": 1}),
    manifest={"schema": 1, "tag": "demo", "wheels": [{"file": "a.whl", "sha256": SHA["9"]}]},
    transfer={"sent": {"blobs": 1, "bytes": 10}, "present": {"blobs": 0, "bytes": 0},
              "blobs": [{"digest": SHA["d"], "size": 10, "sent": True}]},
    image_id=SHA["b"], build={"jobs": {"MAX_JOBS": 4, "NVCC_THREADS": 2, "why": "w"}},
    inputs=SHA["c"], upstream={"key": "vllm", "kind": "pypi"},
    series=(ReleaseSeries("s", SHA["e"], (("0001-x.patch", SHA["f"]),)),),
    env={"A": "1"}, labels={"l": "v"}, published=TIME, attestations=ATTACHED,
    locks={"runtime": {"path": "locks/r.txt", "sha256": SHA["0"], "packages": {"torch": "2"}}},
    verdicts={"vllm": None, "cuda_arch": "12.1a", "model": None, "listed": False,
              "backends": {"moe": {"b12x": None}}})
BARE = Release(
    tag="demo-1", repository="r", images=("r:demo-1",), digest=SHA["d"], pinned=f"r@{SHA['d']}",
    smoke=None, manifest=None, transfer=None, image_id=SHA["e"], build=None, inputs=SHA["c"],
    upstream={}, series=(ReleaseSeries("empty", SHA["f"], ()),), env=None, labels={},
    published=TIME)
MULTI = dataclasses.replace(
    BARE, tag="multi", smoke=ReleaseSmoke("skipped", found="missing"), platforms=(RELEASE, BARE),
    attestations=dataclasses.replace(ATTACHED, smoke=SHA["4"], signature=None))
RELEASES = {"release": RELEASE, "release-bare": BARE, "release-multi": MULTI,
            "release-passed-platforms": dataclasses.replace(
                BARE, tag="p", smoke=ReleaseSmoke("passed", checks={"platforms": 2}))}
# a record from before smoke gating, manifests, transfer counts, env, locks and verdicts
RELEASE_EARLY = {"tag": "old", "repository": "r", "images": ["r:old"], "digest": SHA["a"],
                 "pinned": "r@x", "image_id": SHA["b"], "inputs": SHA["c"], "upstream": {},
                 "series": [{"name": "s", "sha256": SHA["d"]}], "labels": {},
                 "published": TIME}
DIFF = ReleaseDiff("a", "b", {"wheels": (Change("+", "pkg", None, "1.0"),
                                         Change("~", "other", "1", "2")),
                              "base": None, "locks": ()},
                   ("a",), {"locks": ("a", "b")})
# with the benches of the releases' images: one speculating, one not
BENCHED = (Measured("demo", "r:demo", SHA["b"], (SHA["a"],),
                    BenchFigures("2026-12-05", Load(4, 64, 64), 2102.5, 1234.05, 17.76, 18.62,
                                 0.476, True, 3.7647)),
           Measured("demo", "r@x", SHA["e"], (),
                    BenchFigures("2026-12-06", Load(), 369.0, 148.78, 47.5, 50.1, 2.71, False)))
DIFF_BENCH = dataclasses.replace(DIFF, bench=ReleaseBench(*BENCHED, (
    Change("~", "decode tok/s", "2102.5", "369.0"),)))


def release_text(release: Release, tmp_path: Path) -> str:
    releases.write_record(tmp_path, release, console=plain_console())
    text = (tmp_path / f"{release.tag}.json").read_text()
    assert records.from_json(Release, json.loads(text)) == release
    return text


def index_text(tmp_path: Path) -> str:
    for release in (RELEASE, BARE, MULTI):
        releases.add(tmp_path, release)
    assert [e.tag for e in releases.entries(tmp_path)] == ["demo", "demo-1", "multi"]
    return (tmp_path / releases.INDEX).read_text()


# smoke records and deploy reports ------------------------------------------------------

CHECKS = (CheckResult("manifest", "passed", "tag demo", 0.125),
          CheckResult("gpu", "skipped", "no GPU"),
          CheckResult("layer-weights", "failed", "2 layers", 1.5, {"layers": [{"n": 1}]}))
SMOKE = SmokeReport("demo", "r:demo", SHA["b"], SHA["c"], "default", "auto", "/models/tiny",
                    False, CHECKS, TIME)
SMOKES = {"smoke": SMOKE,
          "smoke-bare": SmokeReport("demo", "r:demo", SHA["b"], SHA["c"], None, None, None, True,
                                    (), TIME)}
# a record from before smoke suites, with checks from before details and times
SMOKE_EARLY = {"tag": "old", "image": "r:old", "image_id": SHA["b"], "inputs": SHA["c"],
               "passed": True, "checks": [{"name": "imports", "status": "passed"}],
               "time": TIME}

ENGINE = NodeEngine("spark-1", "28.0.1", "arm64", True)
DEPLOYED = HostReport(
    "ssh://spark-1", "deployed", engine=ENGINE,
    transfer=NodeTransfer("pull", {"pulled": {"layers": 2, "bytes": 300},
                                   "present": {"layers": 1, "bytes": 50}}),
    image_id=SHA["a"], repo_digest=f"r@{SHA['d']}",
    smoke=NodeSmoke(True, CHECKS[:2], "build/smoke/demo.json"), seconds=12.5)
FAILED = HostReport(
    "ssh://spark-2", "failed", engine=ENGINE,
    transfer=NodeTransfer("stream", {"streamed": {"bytes": 1000}}, pull_failed="denied"),
    image_id=SHA["a"], smoke=NodeSmoke(False, (), None), error="smoke failed", seconds=30.0)
DEPLOY = DeployReport("demo", SHA["d"], SHA["a"], f"r@{SHA['d']}", False, "auto", "failed", TIME,
                      (DEPLOYED, FAILED, HostReport("ssh://spark-3", "not attempted")), TIME)
DEPLOYS = {"deploy": DEPLOY,
           "deploy-present": dataclasses.replace(
               DEPLOY, result="deployed", stream=True, report="build/deploys/demo.json",
               hosts=(HostReport("unix:///var/run/docker.sock", "deployed", ENGINE,
                                 NodeTransfer("present", {"pulled": {"layers": 0, "bytes": 0},
                                                          "present": {"layers": 3,
                                                                      "bytes": 10}})),))}


# up's cluster record, verify's report, tags --json and a run's stages ------------------

CLUSTER = Cluster("demo", "r:demo", "http://127.0.0.1:8000",
                  (ClusterNode(0, Path("head.env"), Node("unix:///var/run/docker.sock"), {}),
                   ClusterNode(1, Path("nodes/w1.env"), Node("ssh://root@spark-2"), {})))
RANKS = [memory_readout.RankMemory(0, "head", 20 << 30, 100000,
                                   {"layout": "tp2", "requested": 30 << 30, "kv_room": 21 << 30,
                                    "kv_tokens": 110000, "non_kv": 9 << 30}),
         memory_readout.RankMemory(1, "worker", None, None, None)]
ENTRY = layers.Entry("file", 0o644, "0:0", 0, 10, SHA["1"], "")
VERIFY = verify.Report(
    False, SHA["a"], SHA["b"], (verify.KeyChange("created", '"x"', None),),
    (verify.LayerChange(0, "files", image_layout.Descriptor("m", SHA["c"], 10), None,
                        (verify.FileChange("opt/a", ENTRY, None),)),
     verify.LayerChange(1, "venv", None, image_layout.Descriptor("m", SHA["d"], 20), (),
                        "gzip header differs")))
TAG_ROWS = [TagRow("demo", "linux/arm64", ("s", "t"), None, "yes", "no", "?"),
            TagRow("demo-x86", "linux/amd64", (), "demo", "no", "no", "no")]
STAGES = [StageRun(Stage.BAKE, SHA["1"], Path("build/logs/demo/bake.log"), "cached", 1.234),
          StageRun(Stage.SMOKE, SHA["2"], Path("build/logs/demo/smoke.log"))]


def bench_store_text(tmp_path: Path) -> str:
    """build/clusters/TAG.bench.json: the benches of two images, as bench keeps them."""
    for measured in BENCHED:
        bench_store.remember(tmp_path / "demo.bench.json", measured)
    assert bench_store.lookup(tmp_path, {SHA["a"]}) == BENCHED[0]
    return (tmp_path / "demo.bench.json").read_text()


def views_text(view: Callable[[], Any]) -> str:
    return json.dumps(view(), indent=2) + "\n"


CASES: dict[str, Callable[[Path], str]] = {
    **{name: partial(wheels_text, report) for name, report in WHEELS_REPORTS.items()},
    **{name: partial(wheels_read_text, data) for name, data in WHEELS_READ.items()},
    "manifest": lambda tmp: manifest_text(tmp, full=True),
    "manifest-bare": lambda tmp: manifest_text(tmp, full=False),
    **{name: partial(release_text, release) for name, release in RELEASES.items()},
    "release-early": lambda tmp: release_text(records.from_json(Release, RELEASE_EARLY), tmp),
    "release-index": index_text,
    "release-diff": lambda tmp: indented(DIFF),
    "release-diff-bench": lambda tmp: indented(DIFF_BENCH),
    **{name: partial(indented, smoke) for name, smoke in SMOKES.items()},
    "smoke-early": lambda tmp: indented(records.from_json(SmokeReport, SMOKE_EARLY)),
    **{name: partial(indented, deploy) for name, deploy in DEPLOYS.items()},
    "cluster": lambda tmp: views_text(CLUSTER.to_json),
    "cluster-bench": bench_store_text,
    "cluster-memory": lambda tmp: views_text(lambda: memory_readout.memory_record(RANKS, "d")),
    "verify": lambda tmp: views_text(lambda: verify.report_json(VERIFY)),
    "tags": lambda tmp: views_text(lambda: [records.to_json(row) for row in TAG_ROWS]),
    "stages": lambda tmp: views_text(lambda: [stage.to_json() for stage in STAGES]),
}
ROUND_TRIPS: dict[str, tuple[type[Any], Any]] = {
    **{name: (Release, release) for name, release in RELEASES.items()},
    "release-diff": (ReleaseDiff, DIFF),
    "release-diff-bench": (ReleaseDiff, DIFF_BENCH),
    **{name: (SmokeReport, smoke) for name, smoke in SMOKES.items()},
    **{name: (DeployReport, deploy) for name, deploy in DEPLOYS.items()},
}


@pytest.mark.parametrize("name", CASES)
def test_a_record_is_written_byte_for_byte_as_before(name: str, tmp_path: Path) -> None:
    assert CASES[name](tmp_path) == (GOLDEN / f"{name}.json").read_text()


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_a_record_reads_back_to_itself(name: str) -> None:
    cls, record = ROUND_TRIPS[name]
    assert records.from_json(cls, json.loads(json.dumps(records.to_json(record)))) == record


def test_the_golden_files_are_each_a_case() -> None:
    assert sorted(path.stem for path in GOLDEN.glob("*.json")) == sorted(CASES)


def test_up_s_cluster_record_reads_back_to_itself() -> None:
    """Its own pair: a node's engine is its URL, and its container is named from the tag."""
    assert Cluster.from_json(json.loads(json.dumps(CLUSTER.to_json()))) == CLUSTER
