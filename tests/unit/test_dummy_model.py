"""A model served cut, with dummy weights: the --hf-overrides made from its config.json, the
serve env that declares it, what the dsv4-4node suite's serve checks run, and each bad input
with the line the user sees."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from sparkbake.config import versions as config_mod
from sparkbake.lock import pins
from sparkbake.nodes import dummy_model, envfile, preflight, sample_envs, serve_checks
from sparkbake.nodes.dummy_model import LAYERS_VARIABLE, Cut, UnusableModel
from tests.conftest import fake_engine, plain_console
from tests.nodeenv import write_sysctls

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "tests" / "data" / "models" / "dsv4-flash-vision"
CONFIG = json.loads((MODEL / "config.json").read_text())
REPO_CONFIG = config_mod.load(REPO / "versions.yaml")
DSV4_TAGS = sorted(name for name, tag in REPO_CONFIG.tags.items() if tag.smoke == "dsv4-4node")
# 4 layers of DeepSeek-V4-Flash-Vision: the first 4 compress ratios, then the 3 MTP layers'
CUT_4 = {"num_hidden_layers": 4, "compress_ratios": [0, 0, 4, 128, 0, 0, 0]}


def write_model(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(text)
    return folder


def test_the_cut_keeps_the_first_layers_and_the_mtp_layers_entries() -> None:
    made = dummy_model.cut(CONFIG, 4, MODEL / "config.json")
    assert made == Cut(4, 43, CUT_4)  # architectures, dspark_target_layer_ids: not per layer
    assert made.args() == ["--load-format", "dummy", "--hf-overrides",
                           '{"num_hidden_layers":4,"compress_ratios":[0,0,4,128,0,0,0]}']


def test_per_layer_type_lists_are_cut_to_the_layers_kept() -> None:
    config = {key: value for key, value in CONFIG.items() if key != "compress_ratios"}
    config["layer_types"] = (["sliding_attention"] * 2 + ["compressed_sparse_attention",
                             "heavily_compressed_attention"] * 20 + ["compressed_sparse_attention"])
    config["mlp_layer_types"] = ["hash_moe"] * 3 + ["moe"] * 40
    assert dummy_model.cut(config, 4, Path("config.json")).overrides == {
        "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "sliding_attention",
                        "compressed_sparse_attention", "heavily_compressed_attention"],
        "mlp_layer_types": ["hash_moe", "hash_moe", "hash_moe", "moe"]}


def test_a_nested_text_config_is_cut_where_its_layer_count_lives() -> None:
    config = {"architectures": ["X"], "text_config": CONFIG,
              "vision_config": {"num_hidden_layers": 24}}
    made = dummy_model.cut(config, 2, Path("config.json"))
    assert (made.layers, made.total) == (2, 43)
    assert made.overrides == {"text_config": {"num_hidden_layers": 2,
                                              "compress_ratios": [0, 0, 0, 0, 0]}}


def test_all_the_layers_may_be_kept() -> None:
    assert dummy_model.cut(CONFIG, 43, Path("c")).overrides["compress_ratios"] == \
        CONFIG["compress_ratios"]


def test_the_suites_layers_hold_every_kind_of_layer_the_model_has() -> None:
    suite = sample_envs.load(REPO_CONFIG, REPO_CONFIG.tag("3.73-vision"))
    assert suite.serve_env is not None
    kept = int(envfile.read(suite.serve_env).values[LAYERS_VARIABLE])
    ratios = CONFIG["compress_ratios"][:CONFIG["num_hidden_layers"]]
    assert set(ratios[:kept]) == set(ratios) == {0, 4, 128}  # sliding, CSA, HCA attention
    assert 0 < CONFIG["num_hash_layers"] < kept  # hash-routed MoE first, then score-routed


def test_the_declaration_is_removed_and_the_flags_end_the_extra_args(tmp_path: Path) -> None:
    env = {LAYERS_VARIABLE: "4", "SERVE_EXTRA_ARGS": "--seed 7", "MODEL": "/model"}
    container, made = dummy_model.container_env(env, MODEL, tmp_path / "serve.env")
    assert made == Cut(4, 43, CUT_4)
    assert set(container) == {"SERVE_EXTRA_ARGS", "MODEL"}
    extra = shlex.split(container["SERVE_EXTRA_ARGS"])  # as the entrypoint splits it
    assert extra[:5] == ["--seed", "7", "--load-format", "dummy", "--hf-overrides"]
    assert json.loads(extra[5]) == CUT_4
    alone, _ = dummy_model.container_env({LAYERS_VARIABLE: "4"}, MODEL, None)
    assert shlex.split(alone["SERVE_EXTRA_ARGS"])[:2] == ["--load-format", "dummy"]


@pytest.mark.parametrize("env", [{"A": "b"}, {"A": "b", LAYERS_VARIABLE: ""}])
def test_without_a_declaration_the_env_is_served_as_it_is(env: dict[str, str]) -> None:
    # the model folder is never read: it has no config.json
    assert dummy_model.container_env(env, Path("/no/such/model"), None) == ({"A": "b"}, None)


BAD_CONFIGS = [
    (None, "{path}: no such file; --model must be the model's folder, with its config.json"),
    ("{\n", "{path}: not JSON: Expecting property name enclosed in double quotes at line 2 "
            "column 1"),
    ("[43]", "{path}: not a JSON object"),
    ('{"model_type": "deepseek_v4", "text_config": {"hidden_size": 4096}}',
     "{path}: no num_hidden_layers, neither at the top nor in text_config: nothing says how "
     "many layers the model has"),
    ('{"num_hidden_layers": "43"}', "{path}: num_hidden_layers is '43', not a whole number"),
    ('{"num_hidden_layers": 43, "num_nextn_predict_layers": -1}',
     "{path}: num_nextn_predict_layers is -1, not a whole number"),
    (json.dumps({**CONFIG, "num_hidden_layers": 3}),
     f"{LAYERS_VARIABLE}=4, but {{path}} has 3 layers: keep at most 3"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CONFIGS)
def test_a_config_json_that_cannot_be_cut_is_one_line_naming_it(
        tmp_path: Path, text: str | None, message: str) -> None:
    model = write_model(tmp_path, text) if text is not None else tmp_path
    with pytest.raises(UnusableModel) as caught:
        dummy_model.container_env({LAYERS_VARIABLE: "4"}, model, None)
    assert str(caught.value) == message.format(path=tmp_path / "config.json")


@pytest.mark.parametrize("value", ["four", "0", "-1", "4.5", " 4"])
def test_a_declaration_that_is_not_a_number_of_layers_names_its_file(
        tmp_path: Path, value: str) -> None:
    with pytest.raises(UnusableModel) as caught:
        dummy_model.container_env({LAYERS_VARIABLE: value}, MODEL, tmp_path / "serve.env")
    assert str(caught.value) == (f"{tmp_path / 'serve.env'}: {LAYERS_VARIABLE}={value!r} is "
                                 "not a number of layers (a whole number, 1 or more)")


def test_a_serve_check_run_with_an_uncuttable_model_fails_each_check_with_the_line(
        tmp_path: Path) -> None:
    (tmp_path / "serve.env").write_text(f"{LAYERS_VARIABLE}=4\nSERVED_MODEL_NAME=x\n")
    suite = sample_envs.Suite("s", tmp_path, (), (), tmp_path / "serve.env")
    tag = REPO_CONFIG.tag("3.73-vision")
    model = write_model(tmp_path / "model", "{not json")
    request = serve_checks.Request(model, None, 1, "require", None)
    results = serve_checks.run(fake_engine(None), "sha256:x", tag, suite, request,
                          tmp_path / "serve.log", console=plain_console())
    detail = (f"{model / 'config.json'}: not JSON: Expecting property name enclosed in double "
              "quotes at line 1 column 2")
    assert [(r.name, r.status, r.detail) for r in results] == \
        [(name, "failed", detail) for name in serve_checks.names(tag)]
    assert not (tmp_path / "serve.log").exists()  # no container, no log


def served(tag_name: str) -> serve_checks.Served:
    tag = REPO_CONFIG.tags[tag_name]
    return serve_checks.prepare(tag, sample_envs.load(REPO_CONFIG, tag), None, MODEL)


def value_of(command: list[str], flag: str) -> str:
    assert command.count(flag) == 1, flag
    return command[command.index(flag) + 1]


@pytest.mark.parametrize("tag_name", DSV4_TAGS)
def test_the_dsv4_suite_serves_the_cut_model_on_one_node(tag_name: str) -> None:
    run = served(tag_name)
    command = run.command
    assert value_of(command, "--load-format") == "dummy"
    assert json.loads(value_of(command, "--hf-overrides")) == CUT_4
    assert [value_of(command, f) for f in ("--nnodes", "--tensor-parallel-size",
                                           "--decode-context-parallel-size")] == ["1", "1", "1"]
    assert value_of(command, "--attention-backend") == \
        dict(REPO_CONFIG.tags[tag_name].env)["ATTENTION_BACKEND"]  # the image's
    assert "--speculative-config" not in command  # DSpark off (the serve.env says why)
    assert "--enable-prefix-caching" in command
    assert run.cut == Cut(4, 43, CUT_4) and LAYERS_VARIABLE not in run.env
    assert run.describe() == " (dummy weights, first 4 of 43 layers)"


@pytest.mark.parametrize("tag_name", DSV4_TAGS)
def test_the_dsv4_serve_env_passes_the_images_preflight(tag_name: str, tmp_path: Path) -> None:
    tag = REPO_CONFIG.tags[tag_name]
    run = served(tag_name)
    env_file = envfile.EnvFile(Path("serve.env"), run.env, {})
    findings = preflight.evaluate(tag, env_file, write_sysctls(tmp_path),
                                  pins.runtime_lock_path(REPO_CONFIG, tag))
    assert [f.rule for f in findings if f.level == "error"] == []


def test_a_serve_env_without_the_declaration_serves_the_real_weights(tmp_path: Path) -> None:
    (tmp_path / "mine.env").write_text("SERVED_MODEL_NAME=x\n")
    tag = REPO_CONFIG.tag("3.73-vision")
    run = serve_checks.prepare(tag, sample_envs.load(REPO_CONFIG, tag), tmp_path / "mine.env",
                               MODEL)
    assert run.cut is None and run.describe() == ""
    assert "--load-format" not in run.command and "--hf-overrides" not in run.command
