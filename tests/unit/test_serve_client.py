"""The serve checks against a small fake of vLLM's OpenAI-compatible server (a real HTTP
server on 127.0.0.1, speaking the same JSON and Prometheus text), and the serve run's
decisions that need no server."""

from __future__ import annotations

import base64
import json
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkbake.config.platforms import ARM64
from sparkbake.config.versions import DebootstrapBase, DirUpstream, Tag
from sparkbake.core.smoke_record import CheckFailed, CheckResult, GpuMode
from sparkbake.nodes import serve_checks, serve_client
from sparkbake.nodes.sample_envs import Suite
from sparkbake.nodes.serve_client import Server
from tests.conftest import fake_engine, plain_console

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class FakeVllm:
    """What the fake server does; tokens are whitespace-separated words, each cut into
    tokens_per_word tokens (another tokenizer), and a prompt must leave one token of
    max_model_len for the answer, as vLLM's must."""

    model: str = "smoke"
    tokens_per_word: int = 1
    max_model_len: int = 8192
    cache_block: int = 512  # hits come in blocks of this many tokens
    unhealthy_polls: int = 0
    count_generation: bool = True
    prefix_caching: bool = True
    answer: str = " Paris."
    image_tokens: int = 293  # prompt tokens an image counts for
    counters: dict[str, float] = field(default_factory=lambda: {
        "prompt_tokens": 0, "generation_tokens": 0, "success_stop": 0, "success_length": 0,
        "prefix_hits": 0})
    seen: set[str] = field(default_factory=set)
    images: list[bytes] = field(default_factory=list)

    def metrics(self) -> str:
        c = self.counters
        lines = ["# HELP vllm:prompt_tokens_total Prompt tokens.",
                 "# TYPE vllm:prompt_tokens_total counter",
                 f'vllm:prompt_tokens_total{{engine="0",model_name="{self.model}"}} '
                 f'{c["prompt_tokens"]}',
                 'vllm:prompt_tokens_created{engine="0"} 1.7e9',
                 f'vllm:generation_tokens_total{{engine="0"}} {c["generation_tokens"]}',
                 f'vllm:request_success_total{{finished_reason="stop"}} {c["success_stop"]}',
                 f'vllm:request_success_total{{finished_reason="length"}} {c["success_length"]}']
        if self.prefix_caching:
            lines.append(f'vllm:prefix_cache_hits_total{{engine="0"}} {c["prefix_hits"]}')
        return "\n".join(lines) + "\n"

    def tokens(self, prompt: str) -> int:
        return len(prompt.split()) * self.tokens_per_word

    def tokenize(self, prompt: str) -> dict[str, Any]:
        count = self.tokens(prompt)
        return {"count": count, "max_model_len": self.max_model_len, "tokens": [7] * count}

    def complete(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        tokens = self.tokens(prompt)
        if prompt in self.seen:
            self.counters["prefix_hits"] += tokens // self.cache_block * self.cache_block
        self.seen.add(prompt)
        self.counters["prompt_tokens"] += tokens
        self.counters["generation_tokens"] += max_tokens if self.count_generation else 0
        self.counters["success_length"] += 1
        return {"choices": [{"text": self.answer, "finish_reason": "length"}],
                "usage": {"prompt_tokens": tokens, "completion_tokens": max_tokens}}

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        parts = body["messages"][0]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        self.images += [base64.b64decode(url.split(",", 1)[1]) for url in urls]
        words = sum(len(p["text"].split()) for p in parts if p["type"] == "text")
        return {"choices": [{"message": {"role": "assistant", "content": self.answer}}],
                "usage": {"prompt_tokens": words + self.image_tokens * len(urls),
                          "completion_tokens": 2}}


def handler_for(fake: FakeVllm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, body: str, kind: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                fake.unhealthy_polls -= 1
                self.reply(503 if fake.unhealthy_polls >= 0 else 200, "")
            elif self.path == "/v1/models":
                self.reply(200, json.dumps({"object": "list",
                                            "data": [{"id": fake.model, "object": "model"}]}))
            elif self.path == "/metrics":
                self.reply(200, fake.metrics(), "text/plain; version=0.0.4")
            else:
                self.reply(404, "{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if body.get("model") != fake.model:
                self.reply(404, json.dumps({"error": f"model {body.get('model')} not found"}))
            elif self.path == "/tokenize":
                self.reply(200, json.dumps(fake.tokenize(body["prompt"])))
            elif self.path == "/v1/completions" and \
                    fake.tokens(body["prompt"]) + body["max_tokens"] > fake.max_model_len:
                self.reply(400, json.dumps({"error": {"message": "This model's maximum context "
                                                      f"length is {fake.max_model_len} tokens"}}))
            elif self.path == "/v1/completions":
                self.reply(200, json.dumps(fake.complete(body["prompt"], body["max_tokens"])))
            else:
                self.reply(200, json.dumps(fake.chat(body)))
    return Handler


@pytest.fixture
def fake() -> FakeVllm:
    return FakeVllm()


@pytest.fixture
def server(fake: FakeVllm, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.setattr(serve_client, "SETTLE", 0.3)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(fake))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield Server(f"http://127.0.0.1:{httpd.server_address[1]}", timeout=10)
    httpd.shutdown()
    httpd.server_close()


def running() -> str | None:
    return None


def test_parse_metrics_sums_samples_over_labels() -> None:
    text = FakeVllm(counters={"prompt_tokens": 5, "generation_tokens": 2, "success_stop": 1,
                              "success_length": 3, "prefix_hits": 512}).metrics()
    parsed = serve_client.parse_metrics(text + "garbage line\nvllm:x{a=\"b c\"} 2.5 1700000000\n")
    assert parsed == {"vllm:prompt_tokens_total": 5.0, "vllm:prompt_tokens_created": 1.7e9,
                      "vllm:generation_tokens_total": 2.0, "vllm:request_success_total": 4.0,
                      "vllm:prefix_cache_hits_total": 512.0, "vllm:x": 2.5}


def test_png_is_a_valid_one_colour_image() -> None:
    data = serve_client.png(5, 3, (1, 2, 3))
    assert data.startswith(PNG_SIGNATURE)
    assert struct.unpack(">II", data[16:24]) == (5, 3)
    idat = data.index(b"IDAT")
    size = struct.unpack(">I", data[idat - 4:idat])[0]
    assert zlib.decompress(data[idat + 4:idat + 4 + size]) == (b"\x00" + bytes([1, 2, 3]) * 5) * 3


@pytest.mark.parametrize(("tokens", "block", "wanted"), [
    (2765, 512, {2560}), (1024, 512, {1024, 512}), (100, 512, {0}), (300, 256, {256})])
def test_expected_hits_round_down_to_the_scheduler_block(
        tokens: int, block: int, wanted: set[int]) -> None:
    assert serve_client.expected_hits(tokens, block) == wanted


def test_health_waits_for_200(fake: FakeVllm, server: Server) -> None:
    fake.unhealthy_polls = 2
    assert serve_client.check_health(server, 10, running, poll=0.01).startswith("healthy after")
    assert fake.unhealthy_polls < 0


def test_health_fails_when_the_server_exits(fake: FakeVllm, server: Server) -> None:
    fake.unhealthy_polls = 100
    with pytest.raises(CheckFailed) as caught:
        serve_client.check_health(server, 10, lambda: "container exited with 2: refused",
                                  poll=0.01)
    assert str(caught.value) == ("the server stopped before it was healthy: container exited "
                                 "with 2: refused")


def test_health_fails_after_the_timeout_with_the_last_answer(
        fake: FakeVllm, server: Server) -> None:
    fake.unhealthy_polls = 10_000
    with pytest.raises(CheckFailed, match=r"within 0s \(last: HTTP 503\); raise --serve-timeout"):
        serve_client.check_health(server, 0.2, running, poll=0.01)


def test_models_lists_the_served_name(server: Server) -> None:
    assert serve_client.check_models(server, "smoke") == "/v1/models lists smoke"
    with pytest.raises(CheckFailed, match=r"/v1/models lists \['smoke'\], not 'other'"):
        serve_client.check_models(server, "other")


def test_a_greedy_completion(fake: FakeVllm, server: Server) -> None:
    detail = serve_client.check_completion(server, "smoke")
    assert detail == "'The capital of France is' -> 'Paris.' (5 prompt, 16 completion tokens)"
    fake.answer = "  "
    with pytest.raises(CheckFailed, match="the greedy completion of 'The capital"):
        serve_client.check_completion(server, "smoke")
    assert serve_client.check_completion(server, "smoke", any_text=True) == \
        "'The capital of France is' -> '' (5 prompt, 16 completion tokens)"  # dummy weights
    with pytest.raises(CheckFailed, match=r"POST /v1/completions: HTTP 404: .*model x not found"):
        serve_client.check_completion(server, "x")


def test_metrics_count_one_completion(fake: FakeVllm, server: Server) -> None:
    assert serve_client.check_metrics(server, "smoke") == (
        "vllm:prompt_tokens_total +5, vllm:generation_tokens_total +8, "
        "vllm:request_success_total +1")
    fake.count_generation = False
    with pytest.raises(CheckFailed) as caught:
        serve_client.check_metrics(server, "smoke")
    assert str(caught.value) == "vllm:generation_tokens_total grew by 0, the request used 8"


def test_metrics_without_the_counters_fail(server: Server,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_client, "COUNTERS", ("vllm:num_requests_running",))
    with pytest.raises(CheckFailed, match="/metrics lacks vllm:num_requests_running"):
        serve_client.check_metrics(server, "smoke")


def test_an_image_request(fake: FakeVllm, server: Server) -> None:
    assert serve_client.check_image(server, "smoke") == \
        "image request -> 'Paris.' (300 prompt tokens, 293 of them the image's)"
    assert len(fake.images) == 1 and fake.images[0].startswith(PNG_SIGNATURE)
    fake.answer = ""
    with pytest.raises(CheckFailed, match="the image request gave no answer"):
        serve_client.check_image(server, "smoke")


def test_with_dummy_weights_an_image_request_may_answer_nothing(
        fake: FakeVllm, server: Server) -> None:
    fake.answer = ""
    assert serve_client.check_image(server, "smoke", any_text=True) == \
        "image request -> '' (300 prompt tokens, 293 of them the image's)"


@pytest.mark.parametrize("any_text", [False, True])
def test_an_image_that_adds_no_prompt_tokens_fails(fake: FakeVllm, server: Server,
                                                   any_text: bool) -> None:
    fake.image_tokens = 0
    with pytest.raises(CheckFailed) as caught:
        serve_client.check_image(server, "smoke", any_text)
    assert str(caught.value) == ("the image request counts 7 prompt tokens, the same text alone "
                                 "7: the image did not reach the model")


def test_a_chat_answer_without_a_choice_fails(fake: FakeVllm, server: Server,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake, "chat", lambda body: {"choices": [], "usage": {}})
    with pytest.raises(CheckFailed) as caught:
        serve_client.check_image(server, "smoke", any_text=True)
    assert str(caught.value) == "the chat request gave no answer: {'choices': [], 'usage': {}}"


def test_prefix_cache_hits_grow_by_the_prompt_rounded_to_the_block(
        fake: FakeVllm, server: Server) -> None:
    detail = serve_client.check_prefix_cache(server, "smoke", block_size=256, dcp=2)
    tokens = len(next(iter(fake.seen)).split())
    hits = tokens // 512 * 512
    assert detail.startswith(f"second {tokens}-token prompt hit {hits} cached tokens "
                             "(blocks of 512 = 256 x DCP 2")
    assert fake.counters["prefix_hits"] == hits


@pytest.mark.parametrize(("per_word", "longest", "wanted"), [
    (1, 8192, serve_client.PREFIX_TOKENS), (3, 8192, serve_client.PREFIX_TOKENS),
    (3, 4096, 4096 - serve_client.HEADROOM), (5, 16384, serve_client.PREFIX_TOKENS)])
def test_the_prefix_prompt_is_sized_by_the_servers_own_tokenizer(
        fake: FakeVllm, server: Server, per_word: int, longest: int, wanted: int) -> None:
    """Another tokenizer cuts the same text into more tokens: the prompt stays within the
    server's max_model_len, and within a few items of what the check wants."""
    fake.tokens_per_word, fake.max_model_len, fake.cache_block = per_word, longest, 128
    detail = serve_client.check_prefix_cache(server, "smoke", block_size=128, dcp=1)
    [prompt] = fake.seen
    tokens = fake.tokens(prompt)
    assert wanted - 8 * per_word < tokens <= wanted  # an item is 6 words
    assert detail.endswith(f"sized to {tokens} by the server's /tokenize, max_model_len "
                           f"{longest})")


def test_fitted_prompt_is_the_longest_within_the_target() -> None:
    def count(text: str) -> int:  # about 3 characters a token, 2 special tokens
        return len(text) // 3 + 2
    prompt, tokens = serve_client.fitted_prompt(count, 4080)
    assert tokens == count(prompt) <= 4080
    items = prompt.count(" is ")
    nonce = prompt[1:33]
    assert count(serve_client.long_prompt(items + 1, nonce)) > 4080
    with pytest.raises(CheckFailed, match="needs 28 tokens without its list, more than the 20 "):
        serve_client.fitted_prompt(count, 20)


def test_a_context_too_short_for_two_blocks_fails_with_its_length(
        fake: FakeVllm, server: Server) -> None:
    fake.max_model_len = 600
    with pytest.raises(CheckFailed, match=r"max_model_len 600 leaves room for a prompt of "
                                          r"5\d\d tokens, less than two blocks of 512"):
        serve_client.check_prefix_cache(server, "smoke", block_size=256, dcp=2)


def test_no_prefix_hits_fail_with_the_reason(fake: FakeVllm, server: Server) -> None:
    fake.cache_block = 10**9  # the cache never hits
    with pytest.raises(CheckFailed) as caught:
        serve_client.check_prefix_cache(server, "smoke", block_size=256, dcp=2)
    assert "vllm:prefix_cache_hits_total grew by 0 on the second of two" in str(caught.value)
    assert str(caught.value).endswith(
        "(blocks of 512 = block size 256 x DCP 2) (zero: is VLLM_DSV4_DCP_PREFIX_CACHE=1 in "
        "the serve env?)")


def test_hits_in_blocks_of_the_wrong_size_fail(fake: FakeVllm, server: Server) -> None:
    fake.cache_block = 64  # blocks of another size than block size x DCP
    with pytest.raises(CheckFailed, match=r"expected .* \(blocks of 512"):
        serve_client.check_prefix_cache(server, "smoke", block_size=256, dcp=2)


def test_prefix_cache_without_its_counter_fails(fake: FakeVllm, server: Server) -> None:
    fake.prefix_caching = False
    with pytest.raises(CheckFailed, match="lacks vllm:prefix_cache_hits_total: is prefix"):
        serve_client.check_prefix_cache(server, "smoke", block_size=256, dcp=1)


# --- smoke_serve: what runs, with what, and how it reports ---------------------------------

BASE = DebootstrapBase(name="d", suite="bookworm", mirror=None, variant="minbase", packages=())


def tag_named(name: str, series: tuple[str, ...]) -> Tag:
    return Tag(name=name, upstream=DirUpstream(key="u", path=Path("u")), series=series, env=(),
               repository="r", platform=ARM64, cuda_arch="12.1a", builder=BASE,
               runtime=BASE)


def test_vision_and_prefix_cache_tags_add_their_checks() -> None:
    base = ["serve-health", "serve-models", "serve-completion", "serve-metrics"]
    assert serve_checks.names(tag_named("fixture", ("tinykern",))) == base
    assert serve_checks.names(tag_named("production-3.72-vision", ("vision",))) == \
        [*base, "serve-image"]
    assert serve_checks.names(tag_named("production-3.73-vision", ("prefix-cache", "vision"))) \
        == [*base, "serve-image", "serve-prefix-cache"]


@pytest.mark.parametrize(("model", "gpu", "unavailable", "status", "detail"), [
    (None, "require", None, "skipped", "no --model given"),
    (Path("/m"), "skip", None, "skipped", "--gpu skip (vllm serve needs a GPU)"),
    (Path("/m"), "auto", "no GPU runtime in this engine", "skipped",
     "vllm serve needs a GPU: no GPU runtime in this engine"),
    (Path("/m"), "require", "no GPU runtime in this engine", "failed",
     "vllm serve needs a GPU: no GPU runtime in this engine"),
])
def test_serve_checks_that_cannot_run_say_why(tmp_path: Path, model: Path | None, gpu: GpuMode,
                                              unavailable: str | None, status: str,
                                              detail: str) -> None:
    tag = tag_named("production-3.73-vision", ("prefix-cache",))
    suite = Suite("common", tmp_path, (), (), None)
    request = serve_checks.Request(model, None, 1, gpu, unavailable)
    results = serve_checks.run(fake_engine(None), "sha256:x", tag, suite, request,
                          tmp_path / "serve.log", console=plain_console())
    assert [(r.name, r.status, r.detail) for r in results] == \
        [(name, status, detail) for name in serve_checks.names(tag)]


@pytest.mark.parametrize("gpu", ["auto", "skip", "require"])
def test_an_image_built_for_the_cpu_serves_without_a_gpu(gpu: GpuMode) -> None:
    request = serve_checks.Request(Path("/m"), None, 1, gpu, "no GPU runtime in this engine")
    assert serve_checks.not_running(request, "cpu") is None
    assert serve_checks.not_running(request, "cuda") is not None
    assert serve_checks.not_running(serve_checks.Request(None, None, 1, gpu, None), "cpu") == \
        ("skipped", "no --model given")


def test_serve_env_is_the_suites_or_the_given_file_with_model_host_and_port(
        tmp_path: Path) -> None:
    (tmp_path / "serve.env").write_text("SERVED_MODEL_NAME=a\nMODEL=/elsewhere\nAPI_PORT=1\n")
    (tmp_path / "mine.env").write_text("SERVED_MODEL_NAME=b\n")
    suite = Suite("s", tmp_path, (), (), tmp_path / "serve.env")
    forced = {"MODEL": "/model", "API_HOST": "0.0.0.0", "API_PORT": "8000"}
    assert serve_checks.serve_env(suite, None) == {"SERVED_MODEL_NAME": "a", **forced}
    assert serve_checks.serve_env(suite, tmp_path / "mine.env") == \
        {"SERVED_MODEL_NAME": "b", **forced}
    assert serve_checks.serve_env(Suite("s", tmp_path, (), (), None), None) == forced


def test_flag_takes_the_last_value_or_the_default() -> None:
    command = ["vllm", "serve", "/m", "--block-size", "256", "--x", "--block-size", "64"]
    assert serve_checks.flag(command, "--block-size", 16) == 64
    assert serve_checks.flag(command, "--decode-context-parallel-size", 1) == 1
    assert serve_checks.value([*command, "--load-format", "dummy"], "--load-format") == "dummy"
    assert serve_checks.value(command, "--load-format") is None


def test_after_a_failed_health_check_the_rest_fail_as_not_run() -> None:
    def unhealthy() -> str:
        raise CheckFailed("/health did not answer 200")
    checks = {"serve-health": unhealthy, "serve-models": lambda: "fine"}
    assert serve_checks.probe(["serve-health", "serve-models"], checks)[1] == \
        CheckResult("serve-models", "failed", "not run: the server did not become healthy")
    checks["serve-health"] = lambda: "healthy"
    assert [r.status for r in serve_checks.probe(["serve-health", "serve-models"], checks)] \
        == ["passed", "passed"]
