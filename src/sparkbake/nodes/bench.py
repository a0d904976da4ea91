"""The acceptance measured: a short decode benchmark against a cluster's head with vLLM's
own `vllm bench serve`, run from the cluster's image on the head's engine (host network,
the head's mounts read-only for the tokenizer). Its figures are decode tokens per second,
time to first token and, where the tag speculates, the acceptance length from the head's
/metrics over the run.

Foreign traffic spoils the figures, so the run is guarded by the head's own counters: no
request in flight before it, never more than the bench's concurrency during it, and no
more finished requests than it sent; otherwise it runs once more, then refuses. The pure
decisions are here; bench_run.py runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkbake import records
from sparkbake.nodes import cluster_readout

__all__ = ["FINISHED", "IN_FLIGHT", "BenchFigures", "Load", "base_url", "bench_command",
           "figures", "foreign", "in_flight"]

IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")
FINISHED = "vllm:request_success_total"  # every finished request, by any reason
ANY_HOST = ("", "0.0.0.0", "::")  # API_HOST values that listen on every address


@dataclass(frozen=True)
class Load:
    """What the bench sends: prompts of random tokens, each generating output_len tokens
    (EOS ignored), concurrency at a time, greedy."""

    prompts: int = 8
    input_len: int = 512
    output_len: int = 128
    concurrency: int = 1


@dataclass(frozen=True)
class BenchFigures:
    """A bench's figures, as the cluster record keeps them (its "bench" key)."""

    date: str
    load: Load
    decode_tok_s: float  # one stream's decode speed: 1000 / median time per output token
    output_tok_s: float  # all generated tokens over the run's duration
    ttft_median_ms: float
    ttft_mean_ms: float
    tpot_median_ms: float
    speculates: bool
    acceptance_length: float | None = field(default=None, metadata=records.key(omit="none"))

    def describe(self) -> str:
        accepted = "none (the tag does not speculate here)" if not self.speculates else \
            f"{self.acceptance_length:.2f}" if self.acceptance_length else "no draft"
        return (f"decode {self.decode_tok_s:.1f} tok/s per stream (TPOT median "
                f"{self.tpot_median_ms:.2f} ms), output {self.output_tok_s:.1f} tok/s, TTFT "
                f"median {self.ttft_median_ms:.1f} ms (mean {self.ttft_mean_ms:.1f} ms); "
                f"acceptance: {accepted} ({self.load.prompts} prompts of "
                f"{self.load.input_len} tokens, {self.load.output_len} out, "
                f"{self.load.concurrency} at a time)")


def base_url(env: dict[str, str]) -> str:
    """The head's API as a container on the head's host network reaches it."""
    host = env.get("API_HOST", "")
    host = "127.0.0.1" if host in ANY_HOST else f"[{host}]" if ":" in host else host
    return f"http://{host}:{env.get('API_PORT') or 8000}"


def bench_command(url: str, model: str, tokenizer: str, load: Load, out: str) -> list[str]:
    """`vllm bench serve`'s arguments (vLLM 0.33.0): no ready check and no warm-up, so
    that the head finishes exactly the prompts sent; the result saved as out/result.json."""
    return ["bench", "serve", "--backend", "openai", "--base-url", url, "--model", model,
            "--tokenizer", tokenizer, "--dataset-name", "random",
            "--random-input-len", str(load.input_len),
            "--random-output-len", str(load.output_len), "--num-prompts", str(load.prompts),
            "--max-concurrency", str(load.concurrency), "--ignore-eos", "--temperature", "0",
            "--disable-tqdm", "--save-result", "--result-dir", out,
            "--result-filename", "result.json"]


def in_flight(metrics: dict[str, float]) -> int:
    return int(sum(metrics.get(name, 0.0) for name in IN_FLIGHT))


def foreign(before: dict[str, float], during: list[dict[str, float]],
            after: dict[str, float], load: Load) -> str | None:
    """Why the head served requests the bench did not send while it ran, or None."""
    if in_flight(before):
        return f"{in_flight(before)} request(s) were in flight at the head before the run"
    most = max((in_flight(sample) for sample in during), default=0)
    if most > load.concurrency:
        return (f"{most} requests were in flight at the head during the run, the bench "
                f"sends {load.concurrency} at a time")
    extra = int(after.get(FINISHED, 0.0) - before.get(FINISHED, 0.0)) - load.prompts
    if extra > 0:
        return f"{extra} request(s) the bench did not send finished at the head during the run"
    return None


def acceptance(before: dict[str, float], after: dict[str, float]) -> float | None:
    """The acceptance length over the run: cluster_readout's, of the counters' growth."""
    grown = {name: after.get(name, 0.0) - before.get(name, 0.0)
             for name in (cluster_readout.ACCEPTED, cluster_readout.DRAFTS)}
    return cluster_readout.acceptance_length(grown)


def figures(result: dict[str, Any], before: dict[str, float], after: dict[str, float],
            load: Load, date: str) -> BenchFigures:
    """The figures of `vllm bench serve`'s result JSON and the head's counters around it;
    ValueError when a request failed or the result lacks a figure."""
    done, failed = int(result.get("completed", 0)), int(result.get("failed", 0))
    if failed or done != load.prompts:
        raise ValueError(f"{failed} of {load.prompts} requests failed, {done} completed")
    try:
        tpot = float(result["median_tpot_ms"])
        measured = (float(result["output_throughput"]), float(result["median_ttft_ms"]),
                    float(result["mean_ttft_ms"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the result lacks {exc}") from exc
    output, ttft_median, ttft_mean = (round(value, 2) for value in measured)
    length = acceptance(before, after)
    return BenchFigures(date, load, round(1000 / tpot, 1) if tpot > 0 else 0.0, output,
                        ttft_median, ttft_mean, round(tpot, 3), cluster_readout.DRAFTS in after,
                        None if length is None else round(length, 4))
