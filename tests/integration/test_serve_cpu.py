"""The serve checks against the real vLLM: the cpu-3.73 image (vLLM 0.33.0 and the production
series, compiled for the CPU through the builder) serving tiny models the tests make.

`smoke cpu-3.73 --model DIR` must pass every serve check for two architectures, and for a
model nobody here chose (a GPT-2 of 4,096 positions with a tokenizer of its own), whose
length the smoke fits the suite's to; forced to the suite's 8192, that one fails with the
refusal's own line, the preflight's or vLLM's. Then, on one server started from the image's
entrypoint with the suite's serve env, each check is asked a wrong expectation (a model
name, a counter, a block size) and must fail. The image is built
first if it is not (a cold compile: an hour or more on 2 cores), with oneDNN served from the
mirror; run by `nox -s serve-cpu`, not at every landing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbake.config import versions
from sparkbake.core.smoke_record import CheckFailed
from sparkbake.nodes import preflight, sample_envs, serve_checks, serve_client
from sparkbake.oci import docker_engine
from tests import cpu_image, heldout_model
from tests.cpu_image import sparkbake
from tests.tiny_model import make

pytestmark = [pytest.mark.docker, pytest.mark.required("serve-cpu")]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    return cpu_image.build(tmp_path_factory.mktemp("mirror"))


def recorded_serve_checks(tag: str) -> dict[str, tuple[str, str]]:
    """(status, detail) of each serve check of the tag's last smoke record."""
    record = json.loads((REPO / "build" / "smoke" / f"{tag}.json").read_text())
    return {c["name"]: (c["status"], c["detail"]) for c in record["checks"]
            if c["name"].startswith("serve-")}


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_smoke_with_a_tiny_model_passes_every_serve_check(built: str, arch: str,
                                                          tmp_path: Path) -> None:
    model = make(tmp_path / arch, arch)
    done = sparkbake("smoke", built, "--model", str(model))
    serve = recorded_serve_checks(built)
    assert done.returncode == 0, f"{serve}\n{done.stderr[-3000:]}"
    assert set(serve) == {"serve-health", "serve-models", "serve-completion", "serve-metrics",
                          "serve-prefix-cache"}
    assert {status for status, _ in serve.values()} == {"passed"}, serve
    # ready means a token: /health's 200, then a streamed token, both from the start
    assert re.match(r"ready: /health 200 at [\d.]+ s, first token at [\d.]+ s after the "
                    "container started", serve["serve-health"][1]), serve["serve-health"]


def test_a_model_nobody_here_chose_passes_every_serve_check_at_its_own_length(
        built: str, tmp_path: Path) -> None:
    model = heldout_model.make(tmp_path / "gpt2")
    done = sparkbake("smoke", built, "--model", str(model))
    serve = recorded_serve_checks(built)
    assert done.returncode == 0, f"{serve}\n{done.stderr[-3000:]}"
    assert {status for status, _ in serve.values()} == {"passed"}, serve
    assert serve["serve-health"][1].endswith(
        "(MAX_MODEL_LEN=4096: the suite's 8192 capped at the model's n_positions 4096)")
    assert "max_model_len 4096)" in serve["serve-prefix-cache"][1]


@pytest.mark.parametrize(("preflight", "said"), [
    ("1", "sparkbake preflight: error: MAX_MODEL_LEN=8192 is above the 4096 tokens vLLM takes "
          "for the model in /model (n_positions 4096) [max-model-len-above-model]"),
    # vLLM reads GPT-2's n_positions through transformers' alias max_position_embeddings
    ("0", "Value error, User-specified max_model_len (8192) is greater than the derived "
          "max_model_len (max_position_embeddings=4096.0 or model_max_length=None"),
])
def test_the_suites_length_forced_on_it_fails_with_the_refusals_own_line(
        built: str, tmp_path: Path, preflight: str, said: str) -> None:
    """The suite's serve.env given as a file of its own is served as it is: 8192 tokens."""
    config = versions.load(REPO / "versions.yaml")
    suite = sample_envs.load(config, config.tag(built))
    assert suite.serve_env is not None
    forced = tmp_path / "forced.env"
    forced.write_text(f"{suite.serve_env.read_text()}\nSPARKBAKE_PREFLIGHT={preflight}\n")
    model = heldout_model.make(tmp_path / "gpt2")
    done = sparkbake("smoke", built, "--model", str(model), "--serve-env", str(forced))
    serve = recorded_serve_checks(built)
    assert done.returncode != 0
    status, detail = serve["serve-health"]
    assert status == "failed" and detail.startswith(
        "the server stopped before it was healthy: container exited with "), detail
    assert said in detail, detail


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
         "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 320,
         "max_position_embeddings": 4096, "rope_theta": 10000.0}
LENGTHS: dict[str, dict[str, Any]] = {  # configs whose lengths vLLM derives each its way
    "llama": LLAMA,
    "seq-length": {**LLAMA, "seq_length": 2048},
    "linear": {**LLAMA, "rope_scaling": {"type": "linear", "factor": 4.0}},
    "dynamic": {**LLAMA, "rope_scaling": {"rope_type": "dynamic", "factor": 2.5}},
    "parameters": {**LLAMA, "rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                                "rope_theta": 10000.0}},
    "yarn": {**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                       "original_max_position_embeddings": 1024}},
    "llama3": {**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 1024}},
    "command-r": {**LLAMA, "architectures": ["CohereForCausalLM"], "model_type": "cohere",
                  "max_position_embeddings": 8192, "model_max_length": 16384},
}
DERIVE = """import json, sys
from vllm.config import ModelConfig
print(json.dumps({f: ModelConfig(model=f).max_model_len for f in sys.argv[1:]}))
"""


def test_the_preflights_length_is_the_one_vllm_derives_in_the_image(
        built: str, docker_client: docker_engine.Client, tmp_path: Path) -> None:
    """model_checks.model_length against the image's own vLLM: ModelConfig's max_model_len
    when none is given is the length it derives."""
    heldout = heldout_model.make(tmp_path / "gpt2")
    for name, config in LENGTHS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        for tokenizer in heldout.glob("tokenizer*.json"):
            (tmp_path / name / tokenizer.name).write_bytes(tokenizer.read_bytes())
    names = ["gpt2", *LENGTHS]
    out: bytes = docker_client.containers.run(
        versions.load(REPO / "versions.yaml").tag(built).image_ref,
        ["-c", DERIVE, *(f"/models/{name}" for name in names)],
        entrypoint="/opt/venv/bin/python", environment={"HF_HUB_OFFLINE": "1"},
        volumes={str(tmp_path): {"bind": "/models", "mode": "ro"}}, remove=True,
        network_disabled=True, stderr=False)
    vllms = json.loads(out.decode().strip().splitlines()[-1])
    model_checks = preflight.entrypoint().checks.model_checks
    ours = {f"/models/{name}": model_checks.model_length(
        json.loads((tmp_path / name / "config.json").read_text())).derived for name in names}
    assert ours == vllms


@pytest.fixture(scope="module")
def server(built: str, docker_client: docker_engine.Client,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[serve_client.Server]:
    """The image's entrypoint serving a tiny Llama with the cpu suite's serve env, healthy."""
    config = versions.load(REPO / "versions.yaml")
    tag = config.tag(built)
    model = make(tmp_path_factory.mktemp("model") / "llama")
    served = serve_checks.prepare(tag, sample_envs.load(config, tag), None, model)
    port = serve_checks.free_port()
    with docker_engine.started_container(
            docker_client, tag.image_ref, [], environment=served.env,
            ports={f"{serve_checks.CONTAINER_PORT}/tcp": ("127.0.0.1", port)},
            volumes={str(model): {"bind": serve_checks.MODEL_MOUNT, "mode": "ro"}},
            ipc_mode="host") as box:  # as the smoke runs it: the engine's shared memory
        found = serve_client.Server(f"http://127.0.0.1:{port}")
        serve_client.check_health(found, 600, serve_checks.exited(box))
        yield found


def test_health_of_a_port_nothing_serves_fails_at_its_timeout(server: serve_client.Server) -> None:
    elsewhere = serve_client.Server(f"http://127.0.0.1:{serve_checks.free_port()}")
    with pytest.raises(CheckFailed, match="did not answer 200 within 3s"):
        serve_client.check_health(elsewhere, 3, lambda: None, poll=0.5)


def test_models_names_the_served_model_and_not_another(server: serve_client.Server) -> None:
    assert "tiny" in serve_client.check_models(server, "tiny")
    with pytest.raises(CheckFailed, match="lists \\['tiny'\\], not 'smoke'"):
        serve_client.check_models(server, "smoke")


def test_a_greedy_completion_is_the_same_twice(server: serve_client.Server) -> None:
    first = serve_client.complete(server, "tiny", serve_client.PROMPT, 8)
    again = serve_client.complete(server, "tiny", serve_client.PROMPT, 8)
    assert first["choices"][0]["text"] == again["choices"][0]["text"]
    with pytest.raises(CheckFailed, match="HTTP 404"):
        serve_client.complete(server, "smoke", serve_client.PROMPT, 8)


def test_metrics_count_a_request_and_a_wrong_counter_name_fails(
        server: serve_client.Server, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "vllm:request_success_total +1" in serve_client.check_metrics(server, "tiny")
    monkeypatch.setattr(serve_client, "COUNTERS", ("vllm:request_success_count",))
    with pytest.raises(CheckFailed, match="lacks vllm:request_success_count"):
        serve_client.check_metrics(server, "tiny")


def test_prefix_cache_hits_come_in_the_servers_blocks_and_not_others(
        server: serve_client.Server) -> None:
    assert "blocks of 128" in serve_client.check_prefix_cache(server, "tiny", 128, 1)
    # 127: no multiple of it below 16256 tokens is one of 128 (96 would pass a prompt of
    # 6144 to 6239 tokens, whose hits are 6144 for both)
    with pytest.raises(CheckFailed, match="blocks of 127"):
        serve_client.check_prefix_cache(server, "tiny", 127, 1)
