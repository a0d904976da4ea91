"""The bench figures of two releases in their diff: kept per image where bench passed
(nodes.bench_store, build/clusters/TAG.bench.json), found by a release's image ID or digest,
shown and compared. Figures from `vllm bench serve`'s results recorded from the cpu-3.73
image (tests/data/bench)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sparkbake import records
from sparkbake.__main__ import main
from sparkbake.nodes import bench, bench_store
from sparkbake.nodes.bench import BenchFigures, Load
from sparkbake.nodes.bench_store import Measured
from sparkbake.publish import release_bench, releases
from sparkbake.publish.record import Change, Release, ReleaseBench, ReleaseDiff
from tests.conftest import versions_yaml
from tests.unit.test_bench import AFTER, BEFORE, SPEC, result
from tests.unit.test_releases import SHA, changed_release, record, write_records

ID_A, ID_B = "sha256:" + SHA["b"], "sha256:" + "7" * 64  # the releases' image IDs
DIGEST_B = "sha256:" + "8" * 64  # b's manifest digest
NGRAM = bench.figures(result("result-ngram"), BEFORE, AFTER, SPEC, "2026-12-05")
PLAIN = bench.figures(result("result-plain"), {bench.FINISHED: 1.0}, {bench.FINISHED: 5.0},
                      Load(4, 64, 32), "2026-12-06")


def measured(image_id: str, figures: BenchFigures, digests: tuple[str, ...] = ()) -> Measured:
    return Measured("cpu-3.73", "sparkbake/cpu-3.73:latest", image_id, digests, figures)


def release_b() -> Release:
    return dataclasses.replace(changed_release(), image_id=ID_B, digest=DIGEST_B)


# --- the store ---------------------------------------------------------------------------


def test_a_bench_is_found_by_the_image_id_or_a_manifest_digest(tmp_path: Path) -> None:
    bench_store.remember(tmp_path / "cpu-3.73.bench.json", measured(ID_A, NGRAM))
    bench_store.remember(tmp_path / "other.bench.json",
                         measured("sha256:" + "9" * 64, PLAIN, (DIGEST_B,)))
    assert bench_store.lookup(tmp_path, {ID_A}) == measured(ID_A, NGRAM)
    found = bench_store.lookup(tmp_path, {DIGEST_B, "sha256:" + "0" * 64})
    assert found is not None and found.figures == PLAIN
    assert bench_store.lookup(tmp_path, {"sha256:" + "0" * 64, ""}) is None
    assert bench_store.lookup(tmp_path / "missing", {ID_A}) is None


def test_the_latest_bench_of_an_image_is_kept_and_found(tmp_path: Path) -> None:
    kept = tmp_path / "cpu-3.73.bench.json"
    bench_store.remember(kept, measured(ID_A, NGRAM))
    bench_store.remember(kept, measured(ID_B, PLAIN))
    later = dataclasses.replace(NGRAM, date="2026-12-07", decode_tok_s=1.0)
    bench_store.remember(kept, measured(ID_A, later))
    assert list(json.loads(kept.read_text())) == [ID_A, ID_B]  # one entry per image
    bench_store.remember(tmp_path / "again.bench.json", measured(ID_A, NGRAM))  # earlier date
    assert bench_store.lookup(tmp_path, {ID_A}) == measured(ID_A, later)


def test_a_damaged_file_or_entry_hides_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "bad.bench.json").write_text("{not json")
    (tmp_path / "odd.bench.json").write_text(json.dumps({ID_A: {"cluster": 1}}))
    bench_store.remember(tmp_path / "odd.bench.json", measured(ID_B, PLAIN))
    assert bench_store.lookup(tmp_path, {ID_A}) is None
    assert bench_store.lookup(tmp_path, {ID_B}) == measured(ID_B, PLAIN)


def test_repo_digests_give_the_manifest_digests() -> None:
    assert bench_store.digests_of([f"r@{DIGEST_B}", f"s@{DIGEST_B}", "r:latest"]) == (DIGEST_B,)


def test_a_multi_platform_release_is_matched_by_each_platforms_image() -> None:
    multi = dataclasses.replace(release_b(), image_id="", platforms=(record("p"),))
    assert release_bench.image_ids(multi) == {DIGEST_B, ID_A, "sha256:" + SHA["a"]}


# --- the diff ----------------------------------------------------------------------------


def test_two_benched_releases_show_each_figure_and_its_change() -> None:
    report = release_bench.compare(measured(ID_A, NGRAM), measured(ID_B, PLAIN))
    assert release_bench.render(report, ("a", "b")) == [
        "bench: changed",
        "  a: decode 2102.5 tok/s, TTFT median 17.8 ms, acceptance 3.76; 4 prompts of 64 "
        "tokens, 64 out, 1 at a time; measured 2026-12-05 on cpu-3.73's cluster "
        "(sha256:bbbbbbbbbbbb)",
        f"  b: decode {PLAIN.decode_tok_s:.1f} tok/s, TTFT median {PLAIN.ttft_median_ms:.1f} "
        "ms, acceptance none; 4 prompts of 64 tokens, 32 out, 1 at a time; measured "
        "2026-12-06 on cpu-3.73's cluster (sha256:777777777777)",
        f"  ~ decode tok/s: 2102.5 -> {PLAIN.decode_tok_s:.1f} "
        f"({(PLAIN.decode_tok_s - 2102.5) / 2102.5:+.1%})",
        f"  ~ TTFT median ms: 17.8 -> {PLAIN.ttft_median_ms:.1f} "
        f"({(round(PLAIN.ttft_median_ms, 1) - 17.8) / 17.8:+.1%})",
        "  ~ acceptance length: 3.76 -> none",
        "  ~ load: 4 prompts of 64 tokens, 64 out, 1 at a time -> 4 prompts of 64 tokens, "
        "32 out, 1 at a time"]


def test_the_same_figures_are_same() -> None:
    report = release_bench.compare(measured(ID_A, NGRAM), measured(ID_B, NGRAM))
    assert report.changes == ()
    assert release_bench.render(report, ("a", "b"))[0] == "bench: same"


def test_a_release_never_benched_says_not_measured_in_one_line(tmp_path: Path) -> None:
    bench_store.remember(tmp_path / "cpu-3.73.bench.json", measured(ID_A, NGRAM))
    a, b = record("production-3.72-vision"), release_b()
    report = dataclasses.replace(releases.diff(a, b),
                                 bench=release_bench.measured(tmp_path, a, b))
    lines = releases.render_diff(report)
    assert lines[-3:] == [
        "bench: unknown (not measured: production-3.73-vision)",
        "  production-3.72-vision: decode 2102.5 tok/s, TTFT median 17.8 ms, acceptance "
        "3.76; 4 prompts of 64 tokens, 64 out, 1 at a time; measured 2026-12-05 on "
        "cpu-3.73's cluster (sha256:bbbbbbbbbbbb)",
        "  production-3.73-vision: not measured: no bench of its image is kept (`sparkbake "
        "bench production-3.73-vision` on a cluster up with it)"]
    written = records.to_json(report)["bench"]
    assert (written["a"]["figures"]["acceptance_length"], written["b"], written["changes"]) \
        == (NGRAM.acceptance_length, None, [])
    assert records.from_json(ReleaseDiff, json.loads(json.dumps(records.to_json(report)))) \
        == report


def test_a_diff_without_benches_asked_has_no_bench_key() -> None:
    report = releases.diff(record("a"), record("b"))
    assert "bench" not in records.to_json(report)
    assert not any(line.startswith("bench") for line in releases.render_diff(report))


def test_a_change_between_words_has_no_ratio() -> None:
    report = ReleaseBench(measured(ID_A, NGRAM), measured(ID_B, NGRAM),
                          (Change("~", "acceptance length", "none", "3.76"),))
    assert release_bench.render(report, ("a", "b"))[-1] == "  ~ acceptance length: none -> 3.76"


# --- the command -------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "setup.py").write_text("# upstream\n")
    (tmp_path / "versions.yaml").write_text(
        versions_yaml(tags="  production-3.72-vision: {upstream: tree, series: []}\n"))
    folder = tmp_path / "build" / "releases"
    write_records(folder, record("production-3.72-vision"), release_b())
    return tmp_path


def test_diff_shows_the_bench_of_the_release_benched_and_not_the_other(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # b's image as the engine listed it on the head: another ID, b's manifest digest
    bench_store.remember(project / "build" / "clusters" / "cpu-3.73.bench.json",
                         measured("sha256:" + "9" * 64, PLAIN, (DIGEST_B,)))
    argv = ["--config", str(project / "versions.yaml"), "diff", "production-3.72-vision",
            "production-3.73-vision"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[out.index("bench: unknown (not measured: production-3.72-vision)") + 1] == (
        "  production-3.72-vision: not measured: no bench of its image is kept (`sparkbake "
        "bench production-3.72-vision` on a cluster up with it)")
    assert main([*argv, "--json"]) == 0
    written = json.loads(capsys.readouterr().out)["bench"]
    assert (written["a"], written["b"]["figures"]["decode_tok_s"]) == (None, PLAIN.decode_tok_s)
