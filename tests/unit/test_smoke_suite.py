"""Smoke suites: the `smoke:` key of versions.yaml, where a suite is found, how its samples
are read, and the shipped suites checked against the host's preflight and the reference."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
from pathlib import Path

import pytest

from sparkbake import resources
from sparkbake.config import versions as config_mod
from sparkbake.config.versions import Config, Tag
from sparkbake.errors import ConfigError, SmokeError
from sparkbake.lock import pins
from sparkbake.nodes import envfile, preflight, sample_envs
from sparkbake.smoke import checks
from tests.conftest import versions_yaml
from tests.nodeenv import ENV_DIR, image_command, write_sysctls

REPO = Path(__file__).resolve().parents[2]
CONFIG = versions_yaml(tags="""\
  plain: {upstream: tree, series: []}
  dsv4: {upstream: tree, series: [], smoke: dsv4-4node}
  child: {extends: dsv4, env: {A: "1"}}
  local: {upstream: tree, series: [], smoke: mine}
""")


@pytest.fixture
def project(tmp_path: Path) -> Config:
    (tmp_path / "upstream").mkdir()
    (tmp_path / "versions.yaml").write_text(CONFIG)
    return config_mod.load(tmp_path / "versions.yaml")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_smoke_key_names_the_suite_is_inherited_and_defaults_to_common(
        project: Config) -> None:
    assert [project.tag(t).smoke for t in ("plain", "dsv4", "child", "local")] == \
        ["common", "dsv4-4node", "dsv4-4node", "mine"]


def test_a_smoke_key_that_is_not_a_name_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "upstream").mkdir()
    bad = write(tmp_path / "versions.yaml", CONFIG.replace("smoke: mine", "smoke: [mine]"))
    with pytest.raises(ConfigError) as caught:
        config_mod.load(bad)
    line = CONFIG.splitlines().index("  local: {upstream: tree, series: [], smoke: mine}") + 1
    assert caught.value.message == f"{bad}:{line}: smoke must be a string, not a list"


def test_a_project_suite_comes_before_the_shipped_one(project: Config) -> None:
    shipped = resources.images_dir() / "smoke" / "dsv4-4node"  # installed or in the checkout
    assert sample_envs.find(project, project.tag("dsv4")) == shipped
    mine = write(project.root / "smoke" / "dsv4-4node" / "accept" / "one.env", "MODEL=/m\n")
    suite = sample_envs.load(project, project.tag("dsv4"))
    assert suite.folder == mine.parents[1]
    assert [s.name for s in suite.accept] == ["accept/one.env"]
    assert (suite.reject, suite.serve_env) == ((), None)


def test_an_unknown_suite_names_both_places_and_the_known_ones(project: Config) -> None:
    with pytest.raises(ConfigError) as caught:
        sample_envs.load(project, project.tag("local"))
    assert caught.value.exit_code == 2
    assert f"smoke suite 'mine' is neither {project.root / 'smoke' / 'mine'}" in \
        caught.value.message
    assert caught.value.remedy.startswith("name one of common, cpu, dsv4-4node in `smoke:`")


def test_samples_carry_the_hosts_command_or_the_expected_rules(project: Config) -> None:
    folder = project.root / "smoke" / "mine"
    write(folder / "accept" / "a.env", "MODEL=/m  API_PORT=9000\n")
    write(folder / "reject" / "r.env", "# why\n# expect: model-unset  bad-value\nMODEL=\n")
    write(folder / "serve.env", "SERVED_MODEL_NAME=x\n")
    tag = project.tag("local")
    suite = sample_envs.load(project, tag)
    (accept,), (reject,) = suite.accept, suite.reject
    command = preflight.entrypoint().serve_command({"MODEL": "/m", "API_PORT": "9000"})
    assert (accept.env, accept.command) == ({"MODEL": "/m", "API_PORT": "9000"},
                                            shlex.join(command))
    assert (reject.name, reject.env, reject.rules) == ("reject/r.env", {"MODEL": ""},
                                                       ("model-unset", "bad-value"))
    assert suite.serve_env == folder / "serve.env"
    assert sample_envs.expected(suite, ["/entry"]) == {
        "suite": "mine", "argv": ["/entry"],
        "accept": [{"name": "accept/a.env", "env": accept.env, "command": accept.command}],
        "reject": [{"name": "reject/r.env", "env": {"MODEL": ""},
                    "rules": ["model-unset", "bad-value"]}],
    }


@pytest.mark.parametrize(("sample", "text", "message"), [
    ("reject/r.env", "MODEL=\n", "a reject sample names the preflight rules it breaks"),
    ("accept/a.env", "API_PORT=1\n",
     "the preflight refuses this accept sample for local: model-unset"),
    ("accept/a.env", "MODEL=/m\nNNODES=two\n",
     "the preflight refuses this accept sample for local: bad-value"),
])
def test_a_sample_that_says_nothing_checkable_is_refused(
        project: Config, sample: str, text: str, message: str) -> None:
    path = write(project.root / "smoke" / "mine" / sample, text)
    with pytest.raises(ConfigError) as caught:
        sample_envs.load(project, project.tag("local"))
    assert caught.value.message.startswith(f"{path}: {message}")


# --- the shipped suites, against the repository's own tags ----------------------------------

REPO_CONFIG = config_mod.load(REPO / "versions.yaml")
SUITE_TAGS = sorted(REPO_CONFIG.tags)


def test_the_production_tags_use_the_reference_suite() -> None:
    assert {t: REPO_CONFIG.tags[t].smoke for t in SUITE_TAGS} == {
        "demo": "common", "demo-sm90": "common", "production-3.72-vision": "dsv4-4node",
        "production-3.73-vision": "dsv4-4node", "production-3.73-vision-seeded": "dsv4-4node",
        "vllm-reuse-sm90": "dsv4-4node", "cpu-3.73": "cpu",
        "production-3.72-vision-vllm0.34": "dsv4-4node",
        "production-3.73-vision-vllm0.34": "dsv4-4node",
        "production-3.73-vision-vllm0.34-seeded": "dsv4-4node"}


@pytest.mark.parametrize(("sample", "rank"), [("head.env", 0), ("worker-1.env", 1),
                                              ("worker-2.env", 2), ("worker-3.env", 3)])
def test_the_reference_suite_prints_what_the_image_can_serve(sample: str, rank: int) -> None:
    suite = sample_envs.load(REPO_CONFIG, REPO_CONFIG.tag("3.73-vision"))
    accepted = {s.name: s for s in suite.accept}[f"accept/{sample}"]
    assert shlex.split(accepted.command) == image_command(rank)


def test_the_reference_dcp_2_file_is_a_refused_sample_refused_for_dcp() -> None:
    suite = sample_envs.load(REPO_CONFIG, REPO_CONFIG.tag("3.73-vision"))
    refused = {s.name: s for s in suite.reject}["reject/reference-dcp2.env"]
    assert refused.rules[0] == "dcp-size-unsupported" and "unknown-backend" in refused.rules
    reference = envfile.read(ENV_DIR / "head.env").values
    assert refused.env == reference  # the reference's head file, as it is


def test_an_accept_sample_naming_a_backend_the_image_lacks_stops_the_suite(
        tmp_path: Path) -> None:
    folder = tmp_path / "smoke" / "dsv4-4node"
    shutil.copytree(sample_envs.places(REPO_CONFIG, "dsv4-4node")[1], folder)
    head = folder / "accept" / "head.env"
    head.write_text(head.read_text() + "ATTENTION_BACKEND=B12X_MLA_SPARSE\n")
    (tmp_path / "versions.yaml").write_text((REPO / "versions.yaml").read_text())
    (tmp_path / "locks").symlink_to(REPO / "locks")
    own = config_mod.load(tmp_path / "versions.yaml")
    with pytest.raises(ConfigError) as caught:
        sample_envs.load(own, own.tag("3.73-vision"))
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith(f"{head}: the preflight refuses this accept sample for "
                                        "production-3.73-vision: unknown-backend: "
                                        "ATTENTION_BACKEND=B12X_MLA_SPARSE is not among")


def errors_of(tag: Tag, sample: sample_envs.Sample, host_root: Path) -> list[str]:
    findings = preflight.evaluate(tag, envfile.read(sample.path), host_root,
                                  pins.runtime_lock_path(REPO_CONFIG, tag))
    return [f.rule for f in findings if f.level == "error"] + \
        [f.rule for f in findings if f.rule == "backend-verdicts-missing"]


def without_verdicts(tag: Tag) -> bool:
    """The tag's vLLM has no backend verdicts written (the 0.34.0 tags, until backend-table
    runs in a built image of theirs)."""
    image = preflight.image_facts(tag, pins.runtime_lock_path(REPO_CONFIG, tag))
    runs = preflight.entrypoint().checks.load_rules()["backends"]["runs"]
    return bool(image.capabilities) and image.vllm not in runs


@pytest.mark.parametrize("tag_name", SUITE_TAGS)
def test_shipped_samples_do_what_they_say_under_the_hosts_preflight(
        tag_name: str, tmp_path: Path) -> None:
    tag = REPO_CONFIG.tags[tag_name]
    suite = sample_envs.load(REPO_CONFIG, tag)
    host_root = write_sysctls(tmp_path / "sys")
    assert suite.accept and suite.reject and suite.serve_env is not None
    said = {"backend-verdicts-missing"} if without_verdicts(tag) else set()
    for sample in suite.accept:
        assert set(errors_of(tag, sample, host_root)) <= said, sample.name
    for sample in suite.reject:
        rules = set(sample.rules)
        if without_verdicts(tag) and "backend-cannot-run" in rules:  # said, not refused
            rules = rules - {"backend-cannot-run"} | {"backend-verdicts-missing"}
        assert rules <= set(errors_of(tag, sample, host_root)), sample.name
    serve = envfile.read(suite.serve_env)
    assert "MODEL" not in serve.values  # the serve check mounts the model and sets it


def test_layer_weights_builds_the_suites_model_or_the_given_one(
        project: Config, tmp_path: Path) -> None:
    suite = sample_envs.load(project, project.tag("dsv4"))
    shipped = checks.layer_model(suite, None)
    assert shipped["path"] == str(suite.folder / checks.SUITE_MODEL)
    assert shipped["config"]["model_type"] == "deepseek_v4"
    write(tmp_path / "mine" / "config.json", '{"model_type": "mine"}')
    assert checks.layer_model(suite, tmp_path / "mine")["config"] == {"model_type": "mine"}
    plain = sample_envs.load(project, project.tag("plain"))
    assert checks.layer_model(plain, None) == {
        "none": f"no config.json in {plain.folder / 'model'}: give --model, or add "
                f"model/config.json to suite common"}


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not a readable JSON file"), ("[1]", "not a JSON object")])
def test_a_model_config_that_is_not_one_is_refused(
        project: Config, tmp_path: Path, text: str, message: str) -> None:
    suite = sample_envs.load(project, project.tag("dsv4"))
    write(tmp_path / "config.json", text)
    with pytest.raises(SmokeError, match=message):
        checks.layer_model(suite, tmp_path)


def test_backends_unchecked_for_want_of_verdicts_are_said(tmp_path: Path) -> None:
    host_root = write_sysctls(tmp_path / "sys")
    head = REPO / "images" / "smoke" / "dsv4-4node" / "accept" / "head.env"
    said = {}
    # both upstreams' tables hold 12.1a; a GPU neither was asked for (12.0f) has none
    for name, arch in (("production-3.73-vision", "12.1a"),
                       ("production-3.73-vision-vllm0.34", "12.1a"),
                       ("production-3.73-vision-vllm0.34", "12.0f")):
        tag = dataclasses.replace(REPO_CONFIG.tag(name), cuda_arch=arch)
        findings = preflight.evaluate(tag, envfile.read(head), host_root,
                                      pins.runtime_lock_path(REPO_CONFIG, tag))
        said[name, arch] = [f.message for f in findings if f.rule == "backend-verdicts-missing"]
    assert said == {
        ("production-3.73-vision", "12.1a"): [],
        ("production-3.73-vision-vllm0.34", "12.1a"): [],
        ("production-3.73-vision-vllm0.34", "12.0f"): [
            "ATTENTION_BACKEND, MOE_BACKEND, LINEAR_BACKEND not checked against vLLM 0.34.0's "
            "own checks: no backend verdicts of it for deepseek_v4 on 12.0f"]}
