"""Pure logic of the smoke stage: expected values, output parsing, JUnit XML, the verdict,
the options, the record of another image, and host-side check results."""

from __future__ import annotations

import dataclasses
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from sparkbake import records
from sparkbake.config.platforms import ARM64
from sparkbake.config.versions import Config, DebootstrapBase, GitUpstream, Tag
from sparkbake.console import display
from sparkbake.core import smoke_record
from sparkbake.errors import SmokeError, UsageError
from sparkbake.patch.apply import PatchedTree
from sparkbake.planning import Plan, SeriesInfo
from sparkbake.smoke import checks
from tests.conftest import fake_engine, plain_console, settings_of

BASE = DebootstrapBase(name="local-debian", suite="bookworm", mirror=None, variant="minbase",
                       packages=())
TAG = Tag(name="production-3.73-vision",
          upstream=GitUpstream(key="fork", url="https://example.invalid/vllm.git",
                         source="https://example.invalid/vllm.git",
                               commit="a" * 40),
          series=("dcp-dspark",), env=(("VLLM_DSV4_CKV_GATHER", "1"),),
          repository="localhost:5000/sparkrun", platform=ARM64, cuda_arch="12.1a",
          builder=BASE, runtime=BASE)
SERIES = SeriesInfo(name="dcp-dspark", folder=Path("patches/dcp-dspark"),
                    patches=(("0001-x.patch", "b" * 64),))
PLAN = Plan(tag=TAG, series=(SERIES,), problems=(), fetch_key="1" * 64, patch_key="2" * 64,
            kernel_key="5" * 64, wheels_key="3" * 64, inputs="4" * 64)

CHECKS_JSON: list[dict[str, Any]] = [
    {"name": "manifest", "status": "passed", "detail": "tag x", "seconds": 0.01},
    {"name": "env-defaults", "status": "failed", "detail": "A='b', expected 'c' <&>",
     "seconds": 0.002},
    {"name": "gpu", "status": "skipped", "detail": "no GPU runtime in this engine",
     "seconds": 0.0},
]
CHECKS = [records.from_json(smoke_record.CheckResult, check) for check in CHECKS_JSON]
RECORD_JSON: dict[str, Any] = {  # a smoke record as `smoke` writes it
    "tag": "demo", "image": "repo:demo", "image_id": "sha256:" + "5" * 64, "inputs": "4" * 64,
    "suite": "common", "gpu": "auto", "model": None, "passed": False, "checks": CHECKS_JSON,
    "time": "2025-01-01T00:00:00+00:00"}
RESULTS = records.from_json(smoke_record.SmokeReport, RECORD_JSON)
FACTS = checks.Facts(PatchedTree(Path("tree"), "2" * 64, "6" * 64), 1735689600)


def test_expected_values_come_from_the_plan() -> None:
    expected = checks.expected_values(PLAN, "auto", "no GPU runtime in this engine")
    assert expected == {
        "tag": "production-3.73-vision",
        "inputs": "4" * 64,
        "upstream": {"kind": "git", "url": "https://example.invalid/vllm.git", "commit": "a" * 40},
        "series": [{"name": "dcp-dspark", "sha256": SERIES.sha256}],
        "cuda_arch": "12.1a",
        "sm_arch": "sm_121a",
        # a 12.1 device loads plain and family cubins of 12.0 and 12.1, and sm_121a
        "sass_loadable": ["sm_120", "sm_120f", "sm_121", "sm_121a", "sm_121f"],
        "other_arch": [],
        "env": {"VLLM_DSV4_CKV_GATHER": "1"},
        "jit_required": False,
        "device": "cuda",
        "gpu": {"mode": "auto", "unavailable": "no GPU runtime in this engine"},
    }
    json.dumps(expected)  # it travels as JSON


def test_results_paths_are_under_build_smoke(tmp_path: Path) -> None:
    config = Config(path=tmp_path / "versions.yaml", tags={TAG.name: TAG})
    assert checks.results_paths(config, PLAN) == (
        tmp_path / "build/smoke/production-3.73-vision.json",
        tmp_path / "build/smoke/production-3.73-vision.xml",
    )


def test_junit_xml_has_one_testcase_per_check() -> None:
    text = checks.junit_xml(RESULTS)
    assert text.startswith("<?xml version='1.0' encoding='utf-8'?>")
    suites = ET.fromstring(text)
    assert suites.tag == "testsuites"
    assert (suites.get("tests"), suites.get("failures"), suites.get("skipped")) == ("3", "1", "1")
    suite = suites.find("testsuite")
    assert suite is not None
    assert suite.get("name") == "sparkbake.smoke.demo"
    assert suite.get("timestamp") == "2025-01-01T00:00:00+00:00"
    assert suite.get("time") == "0.012"
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties == {"image": "repo:demo", "image_id": "sha256:" + "5" * 64,
                          "inputs": "4" * 64, "suite": "common"}
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["manifest", "env-defaults", "gpu"]
    assert {c.get("classname") for c in cases} == {"sparkbake.smoke.demo"}
    assert cases[0].get("time") == "0.010"
    assert list(cases[0]) == []


def test_junit_xml_failure_and_skipped_elements_carry_the_detail() -> None:
    suite = ET.fromstring(checks.junit_xml(RESULTS)).find("testsuite")
    assert suite is not None
    failure = suite.find("testcase[@name='env-defaults']/failure")
    assert failure is not None
    assert failure.get("message") == "A='b', expected 'c' <&>"
    assert failure.text == "A='b', expected 'c' <&>"
    skipped = suite.find("testcase[@name='gpu']/skipped")
    assert skipped is not None
    assert skipped.get("message") == "no GPU runtime in this engine"
    assert suite.find("testcase[@name='gpu']/failure") is None


def test_parse_checks_takes_the_last_json_line() -> None:
    output = "warning: something\n" + json.dumps({"checks": CHECKS_JSON}) + "\n"
    assert checks.parse_checks(output) == CHECKS
    noisy = '{"not": "checks"}\n' + json.dumps({"checks": CHECKS_JSON}) + "\n{broken\n"
    assert checks.parse_checks(noisy) == CHECKS


def test_parse_checks_without_a_result_is_none() -> None:
    assert checks.parse_checks("Traceback (most recent call last):\n  boom\n") is None
    assert checks.parse_checks(json.dumps({"checks": [{"name": "x", "status": "odd"}]})) is None


def test_failed_checks_raise_exit_6_naming_them(tmp_path: Path) -> None:
    with pytest.raises(SmokeError) as caught:
        checks.raise_if_failed(PLAN, CHECKS, tmp_path / "demo.json", settings=settings_of())
    assert caught.value.exit_code == 6
    assert "env-defaults" in caught.value.message
    assert str(tmp_path / "demo.json") in caught.value.message
    assert "sparkbake build-image production-3.73-vision" in caught.value.remedy


def test_a_gpu_only_failure_points_at_the_gpu_runtime(tmp_path: Path) -> None:
    gpu_failed = [CHECKS[0], smoke_record.CheckResult("gpu", "failed", "none")]
    with pytest.raises(SmokeError) as caught:
        checks.raise_if_failed(PLAN, gpu_failed, tmp_path / "demo.json", settings=settings_of())
    assert "NVIDIA container runtime" in caught.value.remedy


def test_passing_and_skipped_checks_do_not_raise(tmp_path: Path) -> None:
    checks.raise_if_failed(PLAN, [CHECKS[0], CHECKS[2]], tmp_path / "demo.json",
                           settings=settings_of())


@pytest.mark.parametrize(("options", "message"), [
    (checks.Options(gpu="maybe"),  # type: ignore[arg-type]  # what the type keeps out
     "--gpu 'maybe' is not one of auto, require, skip"),
    (checks.Options(model=Path("/no/such/model")), "--model /no/such/model: no such file"),
    (checks.Options(serve_env=Path("/no/such.env")), "--serve-env /no/such.env: no such file"),
])
def test_bad_options_are_usage_errors_before_any_engine_call(
        tmp_path: Path, options: checks.Options, message: str) -> None:
    config = Config(path=tmp_path / "versions.yaml", tags={TAG.name: TAG})
    with pytest.raises(UsageError) as caught:
        checks.run(fake_engine(None), config, PLAN, FACTS, options, console=plain_console(),
                   settings=settings_of())  # never reaches the engine
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(message)


def test_a_gpu_capability_failure_names_the_tags_capability(tmp_path: Path) -> None:
    failed = [smoke_record.CheckResult("gpu-capability", "failed", "device 0 is 9.0")]
    with pytest.raises(SmokeError) as caught:
        checks.raise_if_failed(PLAN, failed, tmp_path / "demo.json", settings=settings_of())
    assert "compute capability 12.1 and the NVIDIA container runtime" in caught.value.remedy


def test_a_serve_only_failure_points_at_the_serve_log(tmp_path: Path) -> None:
    failed = [smoke_record.CheckResult("serve-health", "failed", "exited"),
              smoke_record.CheckResult("serve-models", "failed", "not run")]
    with pytest.raises(SmokeError) as caught:
        checks.raise_if_failed(PLAN, failed, tmp_path / "demo.json", settings=settings_of())
    assert "serve-health, serve-models" in caught.value.message
    assert str(tmp_path / "production-3.73-vision-serve.log") in caught.value.remedy


def write_record(folder: Path, image_id: str) -> tuple[Path, Path]:
    json_path, xml_path = folder / "demo.json", folder / "demo.xml"
    json_path.write_text(json.dumps({**RECORD_JSON, "image_id": image_id}))
    xml_path.write_text(checks.junit_xml(dataclasses.replace(RESULTS, image_id=image_id)))
    return json_path, xml_path


def test_the_record_of_another_image_is_removed(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    json_path, xml_path = write_record(tmp_path, "sha256:" + "a" * 64)
    assert checks.drop_stale_record(json_path, xml_path, "sha256:" + "b" * 64,
                                    console=plain_console()) is True
    assert not json_path.exists() and not xml_path.exists()
    assert "the record of image sha256:aaaaaaaaaaaa" in capsys.readouterr().err


def test_the_record_of_the_same_image_stays(tmp_path: Path) -> None:
    json_path, xml_path = write_record(tmp_path, "sha256:" + "a" * 64)
    assert checks.drop_stale_record(json_path, xml_path, "sha256:" + "a" * 64,
                                    console=plain_console()) is False
    assert json_path.exists() and xml_path.exists()
    assert checks.drop_stale_record(tmp_path / "none.json", tmp_path / "none.xml", "x",
                                    console=plain_console()) is False


def test_an_unreadable_record_is_removed(tmp_path: Path) -> None:
    json_path, xml_path = tmp_path / "demo.json", tmp_path / "demo.xml"
    json_path.write_text("{not json")
    assert checks.drop_stale_record(json_path, xml_path, "sha256:" + "a" * 64,
                                    console=plain_console()) is True
    assert not json_path.exists()


def raise_(error: Exception) -> str:
    raise error


@pytest.mark.parametrize(("check", "status", "detail"), [
    (lambda: "fine", "passed", "fine"),
    (lambda: raise_(smoke_record.CheckFailed("wrong")), "failed", "wrong"),
    (lambda: raise_(smoke_record.CheckSkipped("no GPU")), "skipped", "no GPU"),
    (lambda: raise_(KeyError("Labels")), "failed", "KeyError: 'Labels'"),
])
def test_a_host_check_always_gives_a_result(check: Any, status: str, detail: str) -> None:
    result = smoke_record.timed("labels", check)
    assert (result.name, result.status, result.detail) == ("labels", status, detail)
    assert isinstance(result.seconds, float)


def test_a_smoke_record_reads_back_as_written() -> None:
    assert records.to_json(RESULTS) == RECORD_JSON
    assert list(records.to_json(RESULTS)) == list(RECORD_JSON)  # the order --json prints
    assert [records.to_json(check) for check in CHECKS] == CHECKS_JSON


def test_a_smoke_record_from_before_suites_reads_without_suite_gpu_and_model() -> None:
    older = {key: value for key, value in RECORD_JSON.items()
             if key not in ("suite", "gpu", "model")}
    report = records.from_json(smoke_record.SmokeReport, older)
    assert (report.suite, report.gpu, report.model) == (None, None, None)
    assert report.checks == tuple(CHECKS)
    assert "suite" not in {p.get("name") for p in ET.fromstring(checks.junit_xml(report))
                           .iter("property")}


def test_a_check_needs_only_its_name_and_status() -> None:
    assert records.from_json(smoke_record.CheckResult, {"name": "gpu", "status": "skipped"}) == \
        smoke_record.CheckResult("gpu", "skipped", "", 0.0)


@pytest.mark.parametrize(("verbosity", "shown"), [
    (display.Verbosity.QUIET, ["failed"]),
    (display.Verbosity.NORMAL, ["passed", "skipped", "failed"]),
])
def test_quiet_shows_only_the_failed_checks(monkeypatch: pytest.MonkeyPatch,
                                            verbosity: display.Verbosity,
                                            shown: list[str]) -> None:
    stream = io.StringIO()
    checks.report([smoke_record.CheckResult("imports", "passed"),
                   smoke_record.CheckResult("gpu", "skipped", "no GPU"),
                   smoke_record.CheckResult("entrypoint", "failed", "exit 1")],
                  display.Console({}, verbosity, stream))
    assert [line.split()[0] for line in stream.getvalue().splitlines()] == shown
