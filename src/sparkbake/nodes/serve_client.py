"""The serve checks' client: vLLM's OpenAI-compatible API and its Prometheus /metrics.

Each check takes a Server and returns its one-line detail, or raises CheckFailed. The
server is anything that speaks the API: `vllm serve` in the image (smoke_serve), or a small
fake in the unit tests.
"""

from __future__ import annotations

import base64
import re
import struct
import time
import uuid
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkbake.core.smoke_record import CheckFailed

if TYPE_CHECKING:
    # imported where used at run time: requests takes ~0.1 s to import and only a smoke
    # run talks to a server
    import requests

__all__ = ["COUNTERS", "PREFIX_HITS", "Server", "chat", "check_completion", "check_health",
           "check_image", "check_metrics", "check_models", "check_prefix_cache",
           "expected_hits", "fitted_prompt", "long_prompt", "parse_metrics", "png", "tokenize"]

COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:request_success_total")
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PROMPT = "The capital of France is"
SAMPLE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{.*\})?\s+(\S+)")  # name{labels} value
SETTLE = 10.0  # seconds for /metrics to catch up with a finished request
# the prefix-cache prompt, in the server's tokens: many scheduler blocks (512 on the
# reference), and this far below max_model_len at most (the one token it generates, spare)
PREFIX_TOKENS = 6000
HEADROOM = 16


class Server:
    """An OpenAI-compatible server at base_url; requests never go through a proxy."""

    def __init__(self, base_url: str, timeout: float = 300.0) -> None:
        import requests

        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = False  # 127.0.0.1 must not go to an HTTP(S)_PROXY

    def get(self, path: str, timeout: float | None = None) -> requests.Response:
        return self.session.get(self.base_url + path, timeout=timeout or self.timeout)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.session.post(self.base_url + path, json=body, timeout=self.timeout)
        if response.status_code != 200:
            raise CheckFailed(f"POST {path}: HTTP {response.status_code}: "
                              f"{' '.join(response.text.split())[:160]}")
        document: dict[str, Any] = response.json()
        return document

    def metrics(self) -> dict[str, float]:
        response = self.get("/metrics")
        if response.status_code != 200:
            raise CheckFailed(f"GET /metrics: HTTP {response.status_code}")
        return parse_metrics(response.text)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format: each metric's samples summed over their labels."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line.strip())
        if match is None:
            continue
        try:
            value = float(match.group(2))
        except ValueError:
            continue
        totals[match.group(1)] = totals.get(match.group(1), 0.0) + value
    return totals


def check_health(server: Server, timeout: float, exited: Callable[[], str | None],
                 poll: float = 2.0) -> str:
    """Poll /health until it answers 200; exited() says why the server is gone, if it is."""
    import requests

    start = time.monotonic()
    last = "no answer yet"
    while time.monotonic() - start < timeout:
        gone = exited()
        if gone:
            raise CheckFailed(f"the server stopped before it was healthy: {gone}")
        try:
            response = server.get("/health", timeout=10)
            if response.status_code == 200:
                return f"healthy after {time.monotonic() - start:.0f}s"
            last = f"HTTP {response.status_code}"
        except requests.RequestException as exc:
            last = type(exc).__name__
        time.sleep(poll)
    raise CheckFailed(f"/health did not answer 200 within {timeout:.0f}s (last: {last}); "
                      "raise --serve-timeout or read the serve log")


def check_models(server: Server, model: str) -> str:
    response = server.get("/v1/models")
    if response.status_code != 200:
        raise CheckFailed(f"GET /v1/models: HTTP {response.status_code}")
    ids = [str(m.get("id")) for m in response.json().get("data", [])]
    if model not in ids:
        raise CheckFailed(f"/v1/models lists {ids or 'nothing'}, not {model!r}")
    return f"/v1/models lists {', '.join(ids)}"


def complete(server: Server, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """One greedy completion; its choices and usage must be there."""
    answer = server.post("/v1/completions", {"model": model, "prompt": prompt,
                                             "max_tokens": max_tokens, "temperature": 0})
    choices, usage = answer.get("choices") or [], answer.get("usage") or {}
    if not choices or not isinstance(choices[0].get("text"), str):
        raise CheckFailed(f"/v1/completions gave no text: {str(answer)[:160]}")
    if int(usage.get("prompt_tokens", 0)) < 1 or int(usage.get("completion_tokens", 0)) < 1:
        raise CheckFailed(f"/v1/completions reports no token usage: {usage}")
    return answer


def check_completion(server: Server, model: str, any_text: bool = False) -> str:
    """A greedy completion with text; with any_text (dummy weights) its text may be empty."""
    answer = complete(server, model, PROMPT, 16)
    text, usage = answer["choices"][0]["text"], answer["usage"]
    if not text.strip() and not any_text:
        raise CheckFailed(f"the greedy completion of {PROMPT!r} is empty")
    return (f"{PROMPT!r} -> {text.strip()[:60]!r} ({usage['prompt_tokens']} prompt, "
            f"{usage['completion_tokens']} completion tokens)")


def settled(server: Server, name: str, target: float, before: float) -> float:
    """The growth of counter `name` since before, once it reaches target (or SETTLE passes)."""
    deadline = time.monotonic() + SETTLE
    while True:
        grown = server.metrics().get(name, 0.0) - before
        if grown >= target or time.monotonic() > deadline:
            return grown
        time.sleep(0.2)


def check_metrics(server: Server, model: str) -> str:
    """The request counters exist and count one completion's tokens."""
    before = server.metrics()
    missing = [name for name in COUNTERS if name not in before]
    if missing:
        raise CheckFailed(f"/metrics lacks {', '.join(missing)}")
    usage = complete(server, model, PROMPT, 8)["usage"]
    wanted = {"vllm:prompt_tokens_total": usage["prompt_tokens"],
              "vllm:generation_tokens_total": usage["completion_tokens"],
              "vllm:request_success_total": 1}
    grown = {name: settled(server, name, want, before[name]) for name, want in wanted.items()}
    wrong = [f"{name} grew by {grown[name]:g}, the request used {want}"
             for name, want in wanted.items() if grown[name] != want]
    if wrong:
        raise CheckFailed("; ".join(wrong))
    return ", ".join(f"{name} +{grown[name]:g}" for name in wanted)


def png(width: int = 64, height: int = 64, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A small one-colour PNG (8-bit RGB), made with zlib alone."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


def chat(server: Server, model: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    """One greedy chat request without thinking; its choice and usage must be there."""
    answer = server.post("/v1/chat/completions", {
        "model": model, "max_tokens": 32, "temperature": 0,
        "chat_template_kwargs": {"thinking": False},
        "messages": [{"role": "user", "content": content}]})
    choices, usage = answer.get("choices") or [], answer.get("usage") or {}
    if not choices or not isinstance(choices[0].get("message"), dict) \
            or int(usage.get("prompt_tokens", 0)) < 1:
        raise CheckFailed(f"the chat request gave no answer: {str(answer)[:160]}")
    return answer


def check_image(server: Server, model: str, any_text: bool = False) -> str:
    """One chat request with an image (the reference's first request after boot), whose
    prompt must count the image's tokens: more than the same request without the image. Its
    answer must have text; with any_text (dummy weights) it may have none."""
    url = "data:image/png;base64," + base64.b64encode(png()).decode()
    question = {"type": "text", "text": "What colour is this image? One word."}
    answer = chat(server, model, [{"type": "image_url", "image_url": {"url": url}}, question])
    with_image = int(answer["usage"]["prompt_tokens"])
    alone = int(chat(server, model, [question])["usage"]["prompt_tokens"])
    if with_image <= alone:
        raise CheckFailed(f"the image request counts {with_image} prompt tokens, the same text "
                          f"alone {alone}: the image did not reach the model")
    content = answer["choices"][0]["message"].get("content")
    if not any_text and (not isinstance(content, str) or not content.strip()):
        raise CheckFailed(f"the image request gave no answer: {str(answer)[:160]}")
    return (f"image request -> {str(content or '').strip()[:60]!r} ({with_image} prompt "
            f"tokens, {with_image - alone} of them the image's)")


def long_prompt(items: int, nonce: str) -> str:
    """A prompt of `items` list items (about 12 tokens an item with DeepSeek-V4's tokenizer,
    more with a small one) that no earlier request shares a prefix with: it starts with a
    nonce."""
    body = " ".join(f"item {i} of list {nonce[:8]} is {(i * 7919) % 1000}." for i in range(items))
    return f"[{nonce}] Remember this list. {body} Which item is largest?"


def tokenize(server: Server, model: str, prompt: str) -> tuple[int, int]:
    """(tokens, max_model_len): the prompt as the server's own tokenizer counts it, special
    tokens included as a completion adds them (vLLM's /tokenize)."""
    answer = server.post("/tokenize", {"model": model, "prompt": prompt})
    count, longest = answer.get("count"), answer.get("max_model_len")
    if type(count) is not int or type(longest) is not int:
        raise CheckFailed(f"/tokenize gave no count and max_model_len: {str(answer)[:160]}")
    return count, longest


def fitted_prompt(count: Callable[[str], int], target: int) -> tuple[str, int]:
    """(prompt, tokens): the long_prompt of the most items whose count() stays within
    target tokens: the items doubled until over, then bisected. A tokenizer cuts
    the same text into more or fewer tokens, so only its own count sizes the prompt."""
    nonce = uuid.uuid4().hex
    fits, tokens = 0, count(long_prompt(0, nonce))
    if tokens > target:
        raise CheckFailed(f"the prefix-cache prompt needs {tokens} tokens without its list, "
                          f"more than the {target} it may have")
    over = 1
    while (measured := count(long_prompt(over, nonce))) <= target:
        fits, tokens, over = over, measured, over * 2
    while over - fits > 1:
        middle = (fits + over) // 2
        measured = count(long_prompt(middle, nonce))
        fits, tokens, over = (middle, measured, over) if measured <= target else \
            (fits, tokens, middle)
    return long_prompt(fits, nonce), tokens


def expected_hits(prompt_tokens: int, block: int) -> set[int]:
    """What the hit counter may grow by on the second of two same prompts: the prompt length
    rounded down to the scheduler block; when it is a whole number of blocks the last block
    is computed again (a request needs one token to compute), so one block less."""
    whole = prompt_tokens // block * block
    return {whole, whole - block} if whole == prompt_tokens else {whole}


def sized_prompt(server: Server, model: str, block: int) -> tuple[str, int, int]:
    """(prompt, tokens, max_model_len): the prefix-cache prompt sized with the server's own
    tokenizer to PREFIX_TOKENS, or HEADROOM below max_model_len where that is less; at least
    two blocks, or the hits say nothing."""
    longest = tokenize(server, model, PROMPT)[1]
    target = min(PREFIX_TOKENS, longest - HEADROOM)
    prompt, tokens = fitted_prompt(lambda text: tokenize(server, model, text)[0], target)
    if tokens < 2 * block:
        raise CheckFailed(f"max_model_len {longest} leaves room for a prompt of {tokens} "
                          f"tokens, less than two blocks of {block}: serve a longer context")
    return prompt, tokens, longest


def check_prefix_cache(server: Server, model: str, block_size: int, dcp: int) -> str:
    """The reference's check: the same long prompt twice; the second hits the cache for the
    prompt rounded down to the scheduler block (block size x DCP)."""
    block = block_size * dcp
    prompt, sized, longest = sized_prompt(server, model, block)
    first = complete(server, model, prompt, 1)["usage"]["prompt_tokens"]
    before = server.metrics().get(PREFIX_HITS)
    if before is None:
        raise CheckFailed(f"/metrics lacks {PREFIX_HITS}: is prefix caching on?")
    tokens = complete(server, model, prompt, 1)["usage"]["prompt_tokens"]
    wanted = expected_hits(int(tokens), block)
    grown = settled(server, PREFIX_HITS, min(wanted), before)
    if grown not in wanted:
        hint = " (zero: is VLLM_DSV4_DCP_PREFIX_CACHE=1 in the serve env?)" if grown == 0 else ""
        raise CheckFailed(f"{PREFIX_HITS} grew by {grown:g} on the second of two {tokens}-token "
                          f"prompts, expected {max(wanted)} (blocks of {block} = block size "
                          f"{block_size} x DCP {dcp}){hint}")
    return (f"second {tokens}-token prompt hit {grown:g} cached tokens (blocks of {block} = "
            f"{block_size} x DCP {dcp}; first prompt {first} tokens, sized to {sized} by the "
            f"server's /tokenize, max_model_len {longest})")
