"""The releases index and the diff of two release records: pure file work, no Docker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkbake import records
from sparkbake.__main__ import main
from sparkbake.errors import UsageError
from sparkbake.oci import image_layout, layers
from sparkbake.publish import releases
from sparkbake.publish.record import Change, IndexEntry, Release, ReleaseDiff
from tests.conftest import plain_console, settings_of, versions_yaml

SHA = {c: c * 64 for c in "abcdef"}


def record_json(tag: str, **changes: Any) -> dict[str, Any]:
    """A release record as publish writes it."""
    base: dict[str, Any] = {
        "tag": tag, "repository": "127.0.0.1:5000/sparkrun",
        "images": [f"127.0.0.1:5000/sparkrun:{tag}", f"127.0.0.1:5000/sparkrun:{tag}-cccccccccccc"],
        "digest": "sha256:" + SHA["a"], "pinned": f"127.0.0.1:5000/sparkrun@sha256:{SHA['a']}",
        "smoke": {"result": "passed", "image_id": "sha256:" + SHA["b"],
                  "time": "2025-12-31T00:00:00+00:00", "checks": {"passed": 20, "skipped": 3}},
        "manifest": {"wheels": [{"name": "vllm", "file": "vllm-0.33.0-cp312-linux_aarch64.whl",
                                 "sha256": SHA["b"]}],
                     "base": {"image": "nvidia/cuda:13.0.2-runtime",
                              "digest": "sha256:" + SHA["c"]}},
        "transfer": {"sent": {"blobs": 1, "bytes": 10}, "present": {"blobs": 1, "bytes": 5},
                     "blobs": [{"digest": "sha256:" + SHA["d"], "size": 10, "sent": True},
                               {"digest": "sha256:" + SHA["e"], "size": 5, "sent": False}]},
        "image_id": "sha256:" + SHA["b"], "build": {"nvcc": "13.0.88"}, "inputs": SHA["c"],
        "upstream": {"key": "vllm-0.33.0", "kind": "pypi", "name": "vllm", "version": "0.33.0",
                     "sha256": SHA["d"]},
        "series": [{"name": "dcp-dspark", "sha256": SHA["e"],
                    "patches": [["0001-dcp.patch", SHA["e"]], ["0002-dspark.patch", SHA["f"]]]},
                   {"name": "vision", "sha256": SHA["f"], "patches": [["0001-vision.patch",
                                                                       SHA["a"]]]}],
        "env": {"VLLM_DSV4_CKV_GATHER": "1"},
        "labels": {"dev.sparkbake.inputs": SHA["c"]},
        "published": "2026-01-01T00:00:00+00:00",
        "locks": {"builder": {"path": "locks/cuda-devel.vllm-0.33.0.arm64.txt",
                              "sha256": SHA["a"]},
                  "runtime": {"path": "locks/runtime/cuda-runtime.vllm-0.33.0.arm64.txt",
                              "sha256": SHA["b"],
                              "packages": {"torch": "2.14.0", "flashinfer-python": "0.7.2",
                                           "xgrammar": "0.1.30"}}},
        "verdicts": {"vllm": "0.33.0", "cuda_arch": "12.1a", "model": "deepseek_v4",
                     "listed": True,
                     "backends": {"attention": {"FLASHINFER_MLA_SPARSE_DSV4": ""},
                                  "moe": {"b12x": ""}, "linear": {"deep_gemm": ""}}},
    }
    base.update(changes)
    return base


def record(tag: str, **changes: Any) -> Release:
    return records.from_json(Release, record_json(tag, **changes))


def write_records(folder: Path, *written: Release) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for item in written:
        (folder / f"{item.tag}.json").write_text(json.dumps(records.to_json(item)))


def test_a_release_record_reads_back_as_written() -> None:
    written = record_json("production-3.73-vision")
    assert records.to_json(record("production-3.73-vision")) == written
    assert list(records.to_json(record("production-3.73-vision"))) == list(written)  # --json's
    skipped = {"result": "skipped", "override": "--skip-smoke", "found": "missing"}
    assert records.to_json(record("x", smoke=skipped))["smoke"] == skipped


def test_a_release_record_from_before_smoke_gating_reads_with_none_in_place() -> None:
    """The first records had no smoke, manifest, transfer, build, env, locks, verdicts, nor the
    upstream's key."""
    older = {key: value for key, value in record_json("old").items()
             if key not in ("smoke", "manifest", "transfer", "build", "env", "locks", "verdicts")}
    older["upstream"] = {"kind": "pypi", "name": "vllm", "version": "0.33.0", "sha256": SHA["d"]}
    old = records.from_json(Release, older)
    assert (old.smoke, old.manifest, old.transfer, old.build, old.env, old.locks,
            old.verdicts) == (None,) * 7
    assert "locks" not in records.to_json(old) and "verdicts" not in records.to_json(old)
    assert releases.entry(old).smoke == "unknown"
    assert releases.entry(old).upstream == "pypi vllm 0.33.0"
    assert releases.diff(old, old).sections["env"] == ()


def test_an_index_line_reads_back_as_written() -> None:
    line = records.to_json(releases.entry(record("production-3.73-vision")))
    assert records.to_json(records.from_json(IndexEntry, line)) == line
    assert list(line) == ["tag", "digest", "image_id", "repository", "upstream", "series",
                          "smoke", "published", "record"]


def test_a_diff_reads_back_as_written() -> None:
    report = records.to_json(releases.diff(record("production-3.72-vision"), changed_release()))
    assert records.to_json(records.from_json(ReleaseDiff, report)) == report


# --- the index --------------------------------------------------------------------------------


def test_add_keeps_one_line_per_tag_the_latest_last(tmp_path: Path) -> None:
    folder = tmp_path / "releases"
    releases.add(folder, record("production-3.72-vision"))
    releases.add(folder, record("production-3.73-vision", digest="sha256:" + SHA["f"]))
    again = record("production-3.72-vision", digest="sha256:" + SHA["e"],
                   smoke={"result": "skipped", "override": "--skip-smoke", "found": "missing"})
    path = releases.add(folder, again)
    index = json.loads(path.read_text())
    assert index["schema"] == 1
    assert [(e["tag"], e["digest"][-4:], e["smoke"]) for e in index["releases"]] == [
        ("production-3.73-vision", "ffff", "passed"),
        ("production-3.72-vision", "eeee", "skipped")]
    assert sorted(p.name for p in folder.iterdir()) == [".index.json.lock", "index.json"]


def test_an_entry_names_upstream_series_smoke_and_date() -> None:
    line = releases.entry(record("production-3.73-vision"))
    assert line.upstream == "vllm-0.33.0 (pypi vllm 0.33.0)"
    assert line.series == ("dcp-dspark", "vision")
    assert line.smoke == "passed"
    assert line.published == "2026-01-01T00:00:00+00:00"
    assert line.record == "production-3.73-vision.json"


@pytest.mark.parametrize(("upstream", "text"), [
    ({"key": "fork", "kind": "git", "url": "https://example.invalid/v.git",
      "commit": "0123456789abcdef" * 2}, "fork (git https://example.invalid/v.git @ 0123456789ab)"),
    ({"kind": "dir", "path": "upstream", "tree": SHA["c"]}, "dir upstream tree cccccccccccc"),
])
def test_describe_upstream(upstream: dict[str, Any], text: str) -> None:
    assert releases.describe_upstream(upstream) == text


def test_without_an_index_the_records_are_listed(tmp_path: Path) -> None:
    folder = tmp_path / "releases"
    write_records(folder, record("b", published="2026-02-01T00:00:00+00:00"),
                  record("a", published="2026-03-01T00:00:00+00:00"))
    (folder / "broken.json").write_text("{")
    assert [e.tag for e in releases.entries(folder)] == ["b", "a"]
    assert releases.entries(tmp_path / "none") == []


def test_the_table_has_a_column_per_field() -> None:
    lines = releases.render_table([releases.entry(record("production-3.73-vision"))])
    assert lines[0].split() == ["TAG", "DIGEST", "UPSTREAM", "SERIES", "SMOKE", "PUBLISHED"]
    assert lines[1].startswith("production-3.73-vision  sha256:aaaaaaaaaaaa  vllm-0.33.0 (pypi")
    assert "dcp-dspark,vision  passed  2026-01-01T00:00:00+00:00" in lines[1]


def test_read_record_of_an_unknown_release_names_the_known_ones(tmp_path: Path) -> None:
    folder = tmp_path / "releases"
    releases.add(folder, record("production-3.72-vision"))
    with pytest.raises(UsageError) as caught:
        releases.read_record(folder, "production-9.99", settings=settings_of())
    assert caught.value.exit_code == 2
    assert "released: production-3.72-vision" in str(caught.value)


# --- the diff ---------------------------------------------------------------------------------


def changed_release() -> Release:
    """3.72 -> 3.73: a series added, a patch refreshed, one env variable added, one changed,
    the wheel rebuilt."""
    b = record_json("production-3.73-vision", digest="sha256:" + SHA["d"])
    b["series"][0]["patches"][1] = ["0002-dspark.patch", SHA["b"]]
    b["series"].insert(1, {"name": "prefix-cache", "sha256": SHA["c"],
                           "patches": [["0001-prefix-cache.patch", SHA["d"]]]})
    b["env"] = {"VLLM_DSV4_CKV_GATHER": "0", "VLLM_DSV4_DCP_PREFIX_CACHE": "1"}
    b["manifest"]["wheels"][0]["sha256"] = SHA["e"]
    return records.from_json(Release, b)


def test_diff_names_each_changed_patch_env_variable_and_wheel() -> None:
    report = releases.diff(record("production-3.72-vision"), changed_release())
    sections = json.loads(json.dumps(records.to_json(report)))["sections"]  # as --json prints it
    assert sections["upstream"] == [] and sections["base"] == [] and sections["smoke"] == []
    assert sections["patches"] == [
        {"op": "~", "what": "dcp-dspark/0002-dspark.patch", "a": "sha256:ffffffffffff",
         "b": "sha256:bbbbbbbbbbbb"},
        {"op": "+", "what": "prefix-cache/0001-prefix-cache.patch", "a": None,
         "b": "sha256:dddddddddddd"}]
    assert report.sections["series"] == (
        Change("+", "prefix-cache", None, "1 patch"),
        Change("~", "order", "dcp-dspark, vision", "dcp-dspark, prefix-cache, vision"))
    assert [(c["op"], c["what"]) for c in sections["env"]] == [
        ("~", "VLLM_DSV4_CKV_GATHER"), ("+", "VLLM_DSV4_DCP_PREFIX_CACHE")]
    assert sections["wheels"][0]["what"] == "vllm"
    assert sections["digest"][0]["b"] == "sha256:" + SHA["d"]


def test_the_rendered_diff_reads_section_by_section() -> None:
    lines = releases.render_diff(releases.diff(record("production-3.72-vision"),
                                               changed_release()))
    assert lines[0] == "diff production-3.72-vision -> production-3.73-vision"
    assert "upstream: same" in lines and "env: changed" in lines
    assert "  ~ dcp-dspark/0002-dspark.patch: sha256:ffffffffffff -> sha256:bbbbbbbbbbbb" in lines
    assert "  + VLLM_DSV4_DCP_PREFIX_CACHE: '1'" in lines
    assert "  ~ VLLM_DSV4_CKV_GATHER: '1' -> '0'" in lines
    assert lines.index("patches: changed") < lines.index("env: changed")


def test_diff_of_a_release_with_itself_is_all_same() -> None:
    report = releases.diff(record("x"), record("x"))
    assert all(changes == () for changes in report.sections.values())
    assert releases.render_diff(report)[1:] == [f"{s}: same" for s in releases.SECTIONS]


def test_diff_says_when_no_image_manifest_was_recorded() -> None:
    report = releases.diff(record("a", manifest=None), record("b"))
    assert report.no_manifest == ("a",)
    assert report.sections["wheels"] is None and report.sections["base"] is None
    assert report.sections["env"] == ()
    lines = releases.render_diff(report)
    assert "wheels: unknown (no image manifest recorded for a)" in lines
    assert "env: same" in lines


# --- the locks and backend verdicts each release shipped with ---------------------------------


def on_vllm_034() -> Release:
    """3.73-vision -> 3.73-vision-vllm0.34: the other upstream's locks (flashinfer moved,
    xgrammar gone, b12x added, torch kept), and no verdicts of vLLM 0.34.0 in the table."""
    b = record_json("production-3.73-vision-vllm0.34")
    b["locks"] = {"builder": {"path": "locks/cuda-devel.vllm-0.34.0.arm64.txt",
                              "sha256": SHA["c"]},
                  "runtime": {"path": "locks/runtime/cuda-runtime.vllm-0.34.0.arm64.txt",
                              "sha256": SHA["d"],
                              "packages": {"torch": "2.14.0", "flashinfer-python": "0.7.3",
                                           "b12x": "0.2.0"}}}
    b["verdicts"] = {"vllm": "0.34.0", "cuda_arch": "12.1a", "model": "deepseek_v4",
                     "listed": False,
                     "backends": {"attention": {"FLASHINFER_MLA_SPARSE_DSV4": None},
                                  "moe": {"b12x": None}, "linear": {"deep_gemm": None}}}
    return records.from_json(Release, b)


def unrecorded(tag: str) -> Release:
    """A record from before publish kept the locks and the backend verdicts."""
    older = {k: v for k, v in record_json(tag).items() if k not in ("locks", "verdicts")}
    return records.from_json(Release, older)


def test_diff_names_each_lock_that_moved_and_the_runtime_packages_that_did() -> None:
    report = releases.diff(record("production-3.73-vision"), on_vllm_034())
    assert report.sections["locks"] == (
        Change("~", "builder", "locks/cuda-devel.vllm-0.33.0.arm64.txt sha256:aaaaaaaaaaaa",
               "locks/cuda-devel.vllm-0.34.0.arm64.txt sha256:cccccccccccc"),
        Change("~", "runtime",
               "locks/runtime/cuda-runtime.vllm-0.33.0.arm64.txt sha256:bbbbbbbbbbbb",
               "locks/runtime/cuda-runtime.vllm-0.34.0.arm64.txt sha256:dddddddddddd"),
        Change("+", "runtime b12x", None, "0.2.0"),
        Change("~", "runtime flashinfer-python", "0.7.2", "0.7.3"),
        Change("-", "runtime xgrammar", "0.1.30", None))
    lines = releases.render_diff(report)
    assert lines.index("base: same") < lines.index("locks: changed") < \
        lines.index("verdicts: changed") < lines.index("smoke: same")
    assert "  ~ runtime flashinfer-python: 0.7.2 -> 0.7.3" in lines


def test_diff_says_a_vllm_without_verdicts_and_each_backend_without_one() -> None:
    report = releases.diff(record("production-3.73-vision"), on_vllm_034())
    assert report.sections["verdicts"] == (
        Change("~", "table", "vLLM 0.33.0 on 12.1a for deepseek_v4",
               "vLLM 0.34.0 on 12.1a for deepseek_v4 (none in images/backend-verdicts.json)"),
        Change("~", "attention FLASHINFER_MLA_SPARSE_DSV4", "runs", "no verdict"),
        Change("~", "linear deep_gemm", "runs", "no verdict"),
        Change("~", "moe b12x", "runs", "no verdict"))
    assert "  ~ moe b12x: runs -> no verdict" in releases.render_diff(report)


def test_diff_names_a_backend_the_env_changed_with_what_vllm_says_of_it() -> None:
    why = "its experts (TrtLlmMxfp4ExpertsModular) do not run on compute capability 12.1"
    b = record_json("b")
    b["verdicts"]["backends"] = {"attention": {"FLASHINFER_MLA_SPARSE_DSV4": ""},
                                 "moe": {"flashinfer_trtllm": why}, "linear": {"cutlas": None}}
    report = releases.diff(record("a"), records.from_json(Release, b))
    assert report.sections["verdicts"] == (
        Change("+", "linear cutlas", None, "not a backend of vLLM 0.33.0"),
        Change("-", "linear deep_gemm", "runs", None),
        Change("-", "moe b12x", "runs", None),
        Change("+", "moe flashinfer_trtllm", None, why))


def test_the_same_locks_and_verdicts_are_same() -> None:
    report = releases.diff(record("a"), record("b"))
    assert report.sections["locks"] == () and report.sections["verdicts"] == ()
    assert report.unrecorded == {}
    lines = releases.render_diff(report)
    assert "locks: same" in lines and "verdicts: same" in lines


def test_diff_says_when_a_record_is_from_before_locks_and_verdicts() -> None:
    report = releases.diff(record("a"), unrecorded("b"))
    assert report.sections["locks"] is None and report.sections["verdicts"] is None
    assert report.unrecorded == {"locks": ("b",), "verdicts": ("b",)}
    assert report.sections["wheels"] == ()  # its manifest is there
    lines = releases.render_diff(report)
    assert "locks: unknown (no locks recorded for b)" in lines
    assert "verdicts: unknown (no backend verdicts recorded for b)" in lines
    assert records.from_json(ReleaseDiff, records.to_json(report)) == report


# --- the image's manifest from the layout -------------------------------------------------------


def layout_with(tmp_path: Path,
                files: dict[str, bytes]) -> tuple[image_layout.Layout, image_layout.Descriptor]:
    layout = image_layout.Layout(tmp_path / "oci", console=plain_console())
    layer = layers.from_files({p: (data, 0o644) for p, data in files.items()},
                              tmp_path / "layer.tgz", 0)
    blob = layout.add_file(layer.path, layer.digest, layers.MEDIA_TYPE)
    config = layout.add_bytes(b"{}", image_layout.CONFIG_TYPE)
    image = layout.add_bytes(image_layout.canonical(image_layout.manifest(config, [blob])),
                             image_layout.MANIFEST_TYPE)
    return layout, image


def test_image_manifest_is_read_from_the_last_layer(tmp_path: Path) -> None:
    layout, image = layout_with(tmp_path, {"opt/sparkbake/manifest.json": b'{"tag": "x"}',
                                           "opt/sparkbake/entrypoint.py": b""})
    assert releases.image_manifest(layout, image) == {"tag": "x"}


def test_an_image_without_a_manifest_gives_none(tmp_path: Path) -> None:
    layout, image = layout_with(tmp_path, {"payload": b"one"})
    assert releases.image_manifest(layout, image) is None


# --- the commands -------------------------------------------------------------------------------


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "setup.py").write_text("# upstream\n")
    (tmp_path / "versions.yaml").write_text(
        versions_yaml(tags="  production-3.72-vision: {upstream: tree, series: []}\n"))
    return tmp_path / "versions.yaml"


def test_releases_and_diff_commands(config_file: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "releases"]) == 0
    assert "no releases in" in capsys.readouterr().out
    folder = config_file.parent / "build" / "releases"
    for item in (record("production-3.72-vision"), changed_release()):
        write_records(folder, item)
        releases.add(folder, item)
    assert main(["--config", str(config_file), "releases", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["releases"]
    assert [e["tag"] for e in listed] == ["production-3.72-vision", "production-3.73-vision"]
    assert main(["--config", str(config_file), "diff", "3.72-vision",
                 "production-3.73-vision"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("diff production-3.72-vision -> production-3.73-vision")
    assert "+ prefix-cache/0001-prefix-cache.patch" in out


def test_diff_of_an_unpublished_tag_is_exit_2(config_file: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_file), "diff", "3.72-vision", "nothing"]) == 2
    err = capsys.readouterr().err
    assert "no release record of production-3.72-vision" in err


def test_rendered_digests_are_short_and_the_json_keeps_them_whole() -> None:
    report = releases.diff(record("a"), record("b", digest="sha256:" + SHA["d"]))
    assert json.loads(json.dumps(records.to_json(report)))["sections"]["digest"][0]["b"] == \
        "sha256:" + SHA["d"]
    assert "  ~ digest: sha256:aaaaaaaaaaaa -> sha256:dddddddddddd" in \
        releases.render_diff(report)
