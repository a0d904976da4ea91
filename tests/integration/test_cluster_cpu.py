"""up, status, logs and down on two nodes of this host: the cpu-3.73 image at TP 2 over two
containers with host networking and an IPC namespace each (`--nnodes 2`, the worker
headless, gloo over loopback),
serving a tiny Llama through the head. A head that never answers and a worker started without
`--headless` each end `up` in one line naming the node; down leaves no container.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbake.config import versions
from sparkbake.console.display import Console
from sparkbake.errors import BakeError
from sparkbake.nodes import serve_checks, serve_client
from sparkbake.oci import docker_engine
from tests import cpu_image
from tests.cpu_image import TAG, sparkbake
from tests.tiny_model import make

pytestmark = [pytest.mark.docker, pytest.mark.required("serve-cpu")]

REPO = Path(__file__).resolve().parents[2]
LABEL = f"dev.sparkbake.cluster={TAG}"
NO_HEADLESS = "sparkbake-test/no-headless:cpu-3.73"
# two nodes on one host: each its own /dev/shm, as two hosts have (with the host's, vLLM
# takes both for one node and waits for a socket in the other container's /tmp)
ONE_HOST = ("--shm-size", "2g")
# an image as another builder makes it: its entrypoint serves with the same command as ours,
# less --headless (what vLLM then does to a worker is what the test is about)
DROP_HEADLESS = """\
import os, sys
sys.path.insert(0, "/opt/sparkbake")
import entrypoint
if sys.argv[1:]:  # --print, a command: as the image's own entrypoint
    sys.exit(entrypoint.main(sys.argv[1:]))
command = [word for word in entrypoint.serve_command(os.environ) if word != "--headless"]
os.execvp(command[0], command)
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    return cpu_image.build(tmp_path_factory.mktemp("mirror"))


@pytest.fixture(scope="module")
def node_files(built: str, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """head.env and worker-1.env from node-files: the cpu suite's serve env on two loopback
    addresses, the tiny model's folder mounted on both."""
    root = tmp_path_factory.mktemp("cluster")
    model = make(root / "llama")
    template = root / "template.env"
    template.write_text((REPO / "images" / "smoke" / "cpu" / "serve.env").read_text()
                        + f"MODEL=/model\nMODEL_HOST_PATH={model}\n"
                        f"API_PORT={serve_checks.free_port()}\nMASTER_PORT={serve_checks.free_port()}\n")
    done = sparkbake("node-files", built, "--nodes", "127.0.0.1,127.0.0.2", "--iface", "lo",
                     "--from", str(template), "--out", str(root / "nodes"))
    assert done.returncode == 0, done.stderr
    files = [root / "nodes" / "head.env", root / "nodes" / "worker-1.env"]
    for core, path in enumerate(files):  # two nodes on one host: a core each, not both on 0
        path.write_text(path.read_text() + f"VLLM_CPU_OMP_THREADS_BIND={core}\n")
    return files


@pytest.fixture
def taken_down(docker_client: docker_engine.Client) -> Iterator[None]:
    """Whatever a test brought up is taken down by the command, and nothing is left."""
    yield
    sparkbake("down", TAG)
    assert docker_client.containers.list(all=True, filters={"label": LABEL}) == []


# ngram speculation: vLLM's CPU backend takes it without async scheduling; greedy decoding of
# dummy weights repeats itself, so its drafts are accepted and the acceptance length shows
NGRAM = ("SERVE_EXTRA_ARGS=\"--load-format dummy --kv-cache-dtype auto --block-size 128 "
         "--no-async-scheduling --speculative-config '{\\\"method\\\":\\\"ngram\\\","
         "\\\"num_speculative_tokens\\\":3,\\\"prompt_lookup_max\\\":4,"
         "\\\"prompt_lookup_min\\\":2}'\"\n")
SHORT_BENCH = ("--prompts", "4", "--input-len", "64", "--output-len", "64")
FOREIGN = (r"\d+ request\(s\) were in flight at the head before the run|\d+ requests were in "
           r"flight at the head during the run, the bench sends 1 at a time|\d+ request\(s\) "
           r"the bench did not send finished at the head during the run")


def first_line(done: str) -> str:
    return done.strip().splitlines()[0] if done.strip() else ""


def test_up_serves_through_the_head_and_reads_out_each_rank(
        node_files: list[Path], docker_client: docker_engine.Client) -> None:
    up = sparkbake("up", TAG, *map(str, node_files), *ONE_HOST, "--timeout", "600")
    try:
        output = up.stdout + up.stderr
        assert up.returncode == 0, output[-4000:]
        record = json.loads((REPO / "build" / "clusters" / f"{TAG}.json").read_text())
        assert [c["status"] for c in record["checks"]] == ["passed"] * 4, record["checks"]
        assert re.search(r"KV cache size: [\d,]+ tokens", " ".join(record["kv_cache"]["0"]))
        assert "KV cache, rank 0: " in output and "KV cache, rank 1: " in output
        assert f"{TAG}: up on 2 node(s)" in output and "serve checks 4/4 passed" in output
        assert "acceptance: none (the tag does not speculate here)" in output
        # each rank's KV cache beside check-env's prediction for its file, and recorded
        ranks = {rank["rank"]: rank for rank in record["memory"]["ranks"]}
        assert ranks[0]["kv_room"] == ranks[0]["predicted_kv_room"] == 1 << 30  # pinned
        assert ranks[1]["kv_room"] == ranks[1]["predicted_kv_room"] == 1 << 30
        assert ranks[0]["kv_tokens"] == ranks[0]["predicted_kv_tokens"], ranks[0]
        assert "memory, rank 0: KV room 1.00 GiB (predicted 1.00 GiB)" in output
        assert "away from the predicted" not in output
        kept = json.loads((REPO / "build" / "clusters" / f"{TAG}.memory.json").read_text())
        assert kept[record["memory"]["layout"]]["ranks"] == record["memory"]["ranks"]

        status = sparkbake("status", TAG)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "rank 0  head (head.env on unix://" in status.stdout + status.stderr
        assert "rank 1  worker 1 (worker-1.env on unix://" in status.stdout + status.stderr
        logs = sparkbake("logs", TAG, "--tail", "3")
        assert "== rank 0, head (head.env" in logs.stdout + logs.stderr
        assert "== rank 1, worker 1 (worker-1.env" in logs.stdout + logs.stderr
    finally:
        down = sparkbake("down", TAG)
    assert down.returncode == 0, down.stderr
    assert docker_client.containers.list(all=True, filters={"label": LABEL}) == []
    assert sparkbake("status", TAG).returncode == 2  # no record left: nothing is up


def test_a_head_that_never_answers_ends_at_the_timeout_with_its_last_lines(
        node_files: list[Path], taken_down: None) -> None:
    up = sparkbake("up", TAG, *map(str, node_files), *ONE_HOST, "--timeout", "5")
    assert up.returncode == 6, up.stdout + up.stderr
    line = first_line(up.stderr.split("error: ", 1)[-1])
    assert re.match(rf"{TAG}: head \(head\.env on unix://\S+\): http://127\.0\.0\.1:\d+/health "
                    r"did not answer 200 within 5 s; its last lines: \S", line), up.stderr


def test_a_worker_without_headless_fails_as_vllm_fails_it_and_is_named(
        built: str, node_files: list[Path], docker_client: docker_engine.Client,
        tmp_path: Path, taken_down: None) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "drop_headless.py").write_text(DROP_HEADLESS)
    (context / "Dockerfile").write_text(
        f"FROM {versions.load(REPO / 'versions.yaml').tag(TAG).image_ref}\n"
        "COPY drop_headless.py /opt/drop_headless.py\n"
        'ENTRYPOINT ["/opt/venv/bin/python", "/opt/drop_headless.py"]\n')
    docker_engine.build_image(docker_client, Console({}), context, NO_HEADLESS, error=BakeError)
    files = []
    for path in node_files:  # the image named, and the worker's own API port (one host)
        text = re.sub(r"(?m)^IMAGE=\S+", f"IMAGE={NO_HEADLESS}", path.read_text())
        if path.name == "worker-1.env":
            text += f"API_PORT={serve_checks.free_port()}\n"
        files.append(tmp_path / path.name)
        files[-1].write_text(text)
    up = sparkbake("up", TAG, *map(str, files), *ONE_HOST, "--image", NO_HEADLESS,
                   "--timeout", "600")
    assert up.returncode == 6, up.stdout + up.stderr
    line = first_line(up.stderr.split("error: ", 1)[-1])
    assert re.match(rf"{TAG}: worker 1 \(worker-1\.env on unix://\S+\): container "
                    rf"sparkbake-{TAG}-rank1 exited with \d+: a worker started without "
                    r"--headless .*; vLLM: .*collective_rpc should not be called on follower "
                    "node", line), up.stderr


def foreign_traffic(api: str, stop: threading.Event) -> None:
    """Requests another client sends to the head while the bench runs, two at a time."""
    server = serve_client.Server(api, timeout=120)

    def send() -> None:
        with contextlib.suppress(Exception):  # the cluster may go down under it
            while not stop.is_set():
                server.post("/v1/completions", {"model": "tiny", "prompt": "busy " * 40,
                                                "max_tokens": 200, "ignore_eos": True})
    for _ in range(2):
        threading.Thread(target=send, daemon=True).start()


def test_up_bench_measures_decode_and_the_acceptance_and_refuses_foreign_traffic(
        node_files: list[Path], tmp_path: Path, docker_client: docker_engine.Client,
        taken_down: None) -> None:
    files = []
    for path in node_files:  # the same nodes, speculating with ngram
        files.append(tmp_path / path.name)
        files[-1].write_text(path.read_text() + NGRAM)
    up = sparkbake("up", TAG, *map(str, files), *ONE_HOST, "--timeout", "600", "--bench")
    output = up.stdout + up.stderr
    assert up.returncode == 0, output[-4000:]
    record = json.loads((REPO / "build" / "clusters" / f"{TAG}.json").read_text())
    assert 0 < record["healthy_after_s"] <= record["first_token_after_s"], record
    assert re.search(r"ready: /health 200 at [\d.]+ s, first token at [\d.]+ s after the "
                     "container started", output), output[-3000:]
    figures = record["bench"]
    assert figures["load"] == {"prompts": 8, "input_len": 512, "output_len": 128,
                               "concurrency": 1}
    assert figures["decode_tok_s"] > 0 and figures["ttft_median_ms"] > 0, figures
    assert figures["speculates"] and figures["acceptance_length"] > 1.0, figures
    assert re.search(rf"{TAG}: bench: decode [\d.]+ tok/s per stream .* acceptance: "
                     r"\d\.\d\d \(8 prompts of 512 tokens, 128 out, 1 at a time\)", output)

    again = sparkbake("bench", TAG, *SHORT_BENCH)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((REPO / "build" / "clusters" / f"{TAG}.json").read_text())["bench"][
        "load"]["prompts"] == 4
    # kept by the image the head ran, its ID as the engine gives it, where diff looks
    image = versions.load(REPO / "versions.yaml").tag(TAG).image_ref
    image_id = docker_engine.image_attrs(docker_client, image)["Id"]
    kept = json.loads((REPO / "build" / "clusters" / f"{TAG}.bench.json").read_text())
    assert (kept[image_id]["cluster"], kept[image_id]["figures"]["load"]["prompts"]) == \
        (TAG, 4), kept

    stop = threading.Event()
    foreign_traffic(record["api"], stop)
    try:
        refused = sparkbake("bench", TAG, *SHORT_BENCH)
    finally:
        stop.set()
    assert refused.returncode == 6, refused.stdout + refused.stderr
    line = first_line(refused.stderr.split("error: ", 1)[-1])
    assert re.fullmatch(rf"{TAG}: bench refused: ({FOREIGN}), on each of 2 runs", line), \
        refused.stderr
