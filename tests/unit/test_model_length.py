"""The context length vLLM takes for a model (images/model_checks.py model_length): derived as
vLLM 0.33.0 derives it from config.json, and MAX_MODEL_LEN above it refused by the preflight
(in the image and in check-env), or warned of where VLLM_ALLOW_LONG_MAX_MODEL_LEN is on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkbake.__main__ import main
from sparkbake.config import versions
from sparkbake.nodes import preflight, sample_envs, serve_checks
from tests.nodeenv import write_sysctls

checks = preflight.entrypoint().checks
model_checks = checks.model_checks
VERSIONS = Path(__file__).parents[2] / "versions.yaml"
REPO_CONFIG = versions.load(VERSIONS)
CPU_TAG = REPO_CONFIG.tag("cpu-3.73")
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_positions": 4096,
        "n_ctx": 4096}
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
         "max_position_embeddings": 4096}
BERT = {"architectures": ["BertModel"], "model_type": "bert", "max_position_embeddings": 512,
        "position_embedding_type": "absolute"}


def folder_of(root: Path, config: dict[str, Any], tokenizer_length: int | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    if tokenizer_length is not None:
        (root / "tokenizer_config.json").write_text(
            json.dumps({"model_max_length": tokenizer_length}))
    return root


@pytest.mark.parametrize(("config", "derived", "how"), [
    (LLAMA, 4096, "max_position_embeddings 4096"),
    (GPT2, 4096, "n_positions 4096"),  # GPT-2's key; n_ctx is not one vLLM reads
    ({"max_position_embeddings": 8192, "seq_length": 2048}, 2048, "seq_length 2048"),
    ({"max_position_embeddings": 2048, "max_seq_len": 2048}, 2048,
     "max_position_embeddings 2048"),  # the first of equals
    # Command-R: model_max_length wins over a shorter key
    ({"max_position_embeddings": 8192, "model_max_length": 131072}, 131072,
     "model_max_length 131072"),
    ({**LLAMA, "rope_scaling": {"type": "linear", "factor": 4.0}}, 16384,
     "max_position_embeddings 4096 x rope factor 4 (linear)"),
    ({**LLAMA, "rope_parameters": {"rope_type": "dynamic", "factor": 2.5,
                                   "rope_theta": 10000.0}}, 10240,
     "max_position_embeddings 4096 x rope factor 2.5 (dynamic)"),
    # YaRN and Llama 3 give max_position_embeddings already scaled
    ({**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                "original_max_position_embeddings": 1024}}, 4096,
     "max_position_embeddings 4096"),
    ({**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 4096,
     "max_position_embeddings 4096"),
    ({**LLAMA, "rope_scaling": {"type": "linear", "factor": None}}, 4096,
     "max_position_embeddings 4096"),  # a null factor counts as 1
    # per layer type: the factor of the scaled one
    ({**LLAMA, "rope_parameters": {"full_attention": {"rope_type": "default"},
                                   "sliding_attention": {"rope_type": "linear",
                                                         "factor": 2.0}}}, 8192,
     "max_position_embeddings 4096 x rope factor 2 (linear)"),
    ({"model_type": "gemma3_text", "max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, 131072,
     "max_position_embeddings 131072"),  # Gemma 3's is given scaled
    ({"architectures": ["LlavaForConditionalGeneration"],
      "text_config": {"max_position_embeddings": 32768}}, 32768,
     "max_position_embeddings 32768"),  # the language model's
])
def test_the_derived_length_is_vllms(config: dict[str, Any], derived: int, how: str) -> None:
    length = model_checks.model_length(config)
    assert (length.derived, length.how) == (derived, how)


def test_a_config_without_a_length_key_has_no_limit() -> None:
    assert model_checks.model_length({"model_type": "llama", "hidden_size": 64}) is None


def test_the_configs_model_max_length_lets_a_longer_one_through() -> None:
    """vLLM accepts up to model_max_length even where a rope factor below 1 derives less."""
    config = {"max_position_embeddings": 4096, "model_max_length": 4096,
              "rope_scaling": {"rope_type": "linear", "factor": 0.5}}
    length = model_checks.model_length(config)
    assert (length.derived, length.ceiling) == (2048, 4096)


def test_the_tokenizers_model_max_length_counts_for_a_pooling_model_only(tmp_path: Path) -> None:
    bert = folder_of(tmp_path / "bert", BERT, tokenizer_length=256)
    assert model_checks.model_length(BERT, bert).how == \
        "tokenizer_config.json's model_max_length 256"
    assert model_checks.model_length(BERT, folder_of(tmp_path / "long", BERT, 10**30)).how \
        == "max_position_embeddings 512"  # transformers' 'no limit'
    llama = folder_of(tmp_path / "llama", LLAMA, tokenizer_length=1024)
    assert model_checks.model_length(LLAMA, llama).derived == 4096  # a generative model's
    assert model_checks.model_length(BERT, tmp_path / "none").derived == 512  # no tokenizer


def findings(env: dict[str, str], folder: Path, host_root: Path) -> list[Any]:
    found = checks.check({"MODEL": "/model", **env}, series=None, host_root=host_root,
                         model_dir=folder, gpu_memory=lambda: None, free_memory=lambda: None)
    return [f for f in found if f.rule.startswith("max-model-len")]


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    return write_sysctls(tmp_path / "sys")


def test_a_max_model_len_above_the_models_is_refused_naming_both(
        tmp_path: Path, host_root: Path) -> None:
    model = folder_of(tmp_path / "gpt2", GPT2)
    [finding] = findings({"MAX_MODEL_LEN": "8192"}, model, host_root)
    assert (finding.rule, finding.level, finding.at) == \
        ("max-model-len-above-model", "error", "MAX_MODEL_LEN")
    assert finding.message == (f"MAX_MODEL_LEN=8192 is above the 4096 tokens vLLM takes for "
                               f"the model in {model} (n_positions 4096)")
    assert "set MAX_MODEL_LEN=4096 or less, or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in finding.reason
    assert "'User-specified max_model_len ... is greater than the derived" in finding.reason


@pytest.mark.parametrize("allowed", ["1", "true"])
def test_vllm_allow_long_max_model_len_makes_it_a_warning(
        tmp_path: Path, host_root: Path, allowed: str) -> None:
    model = folder_of(tmp_path / "llama", LLAMA)
    env = {"MAX_MODEL_LEN": "8192", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": allowed}
    [finding] = findings(env, model, host_root)
    assert (finding.rule, finding.level) == ("max-model-len-above-model-allowed", "warning")
    assert finding.message.endswith(f"(max_position_embeddings 4096); "
                                    f"VLLM_ALLOW_LONG_MAX_MODEL_LEN={allowed} lets vLLM start "
                                    "with it")


@pytest.mark.parametrize("env", [{"MAX_MODEL_LEN": "4096"}, {},
                                 {"MAX_MODEL_LEN": "16384", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"}])
def test_a_length_within_the_models_or_unset_passes(tmp_path: Path, host_root: Path,
                                                    env: dict[str, str]) -> None:
    scaled = {**LLAMA, "rope_scaling": {"type": "linear", "factor": 4.0}}
    assert findings(env, folder_of(tmp_path / "m", scaled), host_root) == []


def test_check_env_shows_the_line_and_both_numbers(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = folder_of(tmp_path / "gpt2", GPT2)
    env = tmp_path / "node.env"
    env.write_text(f"MODEL=/model\nMODEL_HOST_PATH={model}\nLIMIT_MM_IMAGES=0\n"
                   "NUM_SPECULATIVE_TOKENS=6\nMAX_MODEL_LEN=8192\n")
    assert main(["--config", str(VERSIONS), "check-env", str(env), "--tag", "3.73-vision",
                 "--host-root", str(host_root)]) == 2
    out = capsys.readouterr().out
    assert f"{env}:5: error: MAX_MODEL_LEN=8192 is above the 4096 tokens vLLM takes for the " \
           f"model in {model} (n_positions 4096) [max-model-len-above-model]" in out.splitlines()


# --- smoke --model: the suite's MAX_MODEL_LEN fitted to the model it is given -----------


def served(model: Path, env_file: Path | None = None) -> serve_checks.Served:
    return serve_checks.prepare(CPU_TAG, sample_envs.load(REPO_CONFIG, CPU_TAG), env_file, model)


def value_of(command: list[str], flag: str) -> str:
    return command[len(command) - 1 - command[::-1].index(flag) + 1]


def test_the_suites_length_is_capped_at_the_models_and_says_so(tmp_path: Path) -> None:
    run = served(folder_of(tmp_path / "gpt2", GPT2))
    assert run.env["MAX_MODEL_LEN"] == "4096" and value_of(run.command, "--max-model-len") == "4096"
    assert run.describe() == " (MAX_MODEL_LEN=4096: the suite's 8192 capped at the model's " \
                             "n_positions 4096)"


@pytest.mark.parametrize("config", [
    {**LLAMA, "max_position_embeddings": 16384},
    {**LLAMA, "rope_scaling": {"type": "linear", "factor": 4.0}},
    {"model_type": "llama"},  # no length key: vLLM takes any
])
def test_a_model_that_takes_the_suites_length_gets_it(tmp_path: Path,
                                                      config: dict[str, Any]) -> None:
    run = served(folder_of(tmp_path / "m", config))
    assert (run.env["MAX_MODEL_LEN"], run.describe()) == ("8192", "")


def test_a_given_serve_env_is_served_as_it_is(tmp_path: Path) -> None:
    suite = sample_envs.load(REPO_CONFIG, CPU_TAG)
    assert suite.serve_env is not None
    mine = tmp_path / "mine.env"
    mine.write_text(suite.serve_env.read_text())
    run = served(folder_of(tmp_path / "gpt2", GPT2), mine)
    assert (run.env["MAX_MODEL_LEN"], run.describe()) == ("8192", "")


@pytest.mark.parametrize(("allowed", "kept"), [("1", "8192"), ("TRUE", "8192"), ("yes", "4096")])
def test_a_suite_that_allows_a_longer_length_keeps_it(tmp_path: Path, allowed: str,
                                                      kept: str) -> None:
    env = {"MAX_MODEL_LEN": "8192", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": allowed}
    fitted, _ = serve_checks.fitted_length(env, folder_of(tmp_path / "gpt2", GPT2))
    assert fitted["MAX_MODEL_LEN"] == kept  # vLLM reads 1 or true as on, nothing else
