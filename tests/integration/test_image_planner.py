"""check-env --ask-image: vLLM's own planner in a real image (cpu-3.73, vLLM 0.33.0 with the
production series, native here) plans a node's DeepSeek-V4 layout, and its figures stand
beside the host model's: the same KV cache size, to the token."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests import cpu_image
from tests.cpu_image import sparkbake
from tests.nodeenv import write_sysctls

pytestmark = [pytest.mark.docker, pytest.mark.required("serve-cpu")]

REPO = Path(__file__).resolve().parents[2]
HEAD = REPO / "images" / "smoke" / "dsv4-4node" / "accept" / "head.env"
DSV4 = REPO / "tests" / "data" / "models" / "dsv4-flash"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    return cpu_image.build(tmp_path_factory.mktemp("mirror"))


def node_file(root: Path, pin: int) -> Path:
    """The reference head's file on DeepSeek-V4-Flash's shapes (its DSpark draft's rank,
    which vLLM needs to build the draft, added), the pool pinned: the CPU tag declares no
    device memory."""
    model = root / "model"
    model.mkdir(parents=True)
    shutil.copy(DSV4 / "model.safetensors.index.json", model)
    config = json.loads((DSV4 / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "dspark_markov_rank": 256}))
    kept = [line for line in HEAD.read_text().splitlines()
            if not line.startswith(("IMAGE=", "MODEL_HOST_PATH=", "KV_CACHE_MEMORY_BYTES="))]
    path = root / "head.env"
    path.write_text("\n".join([*kept, f"MODEL_HOST_PATH={model}", "LIMIT_MM_IMAGES=0",
                               f"KV_CACHE_MEMORY_BYTES={pin}"]) + "\n")
    return path


def test_the_image_s_planner_gives_the_host_model_s_kv_cache(built: str,
                                                             tmp_path: Path) -> None:
    path = node_file(tmp_path, 26_000_000_000)
    done = sparkbake("check-env", str(path), "--tag", built, "--host-root",
                     str(write_sysctls(tmp_path / "sys")), "--ask-image", "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    answer = json.loads(done.stdout)
    head = next(numbers for numbers in answer["memory"] if numbers["role"] == "head")
    assert head["kv_tokens"] == 1_241_228
    [said] = answer["image_planner"]
    assert said.startswith("vLLM 0.33.0+")
    assert said.endswith("planner in the image: a block 1,002,240 B, one request "
                         "8,236,408,320 B, KV cache size 1,241,228 tokens, 3.16x")


def test_a_pin_one_request_does_not_fit_is_refused_by_both(built: str, tmp_path: Path) -> None:
    """Below one request and its null block (8,237,410,560 B) the preflight refuses the
    file; given one byte more, vLLM's planner in the image starts where the host model
    does."""
    refused = sparkbake("check-env", str(node_file(tmp_path / "low", 8_237_410_559)), "--tag",
                        built, "--host-root", str(write_sysctls(tmp_path / "sys")))
    assert refused.returncode == 2
    assert "cannot hold one request of 393216 tokens, which needs 7.7 GiB" in refused.stdout
    enough = sparkbake("check-env", str(node_file(tmp_path / "enough", 8_237_410_560)), "--tag",
                       built, "--host-root", str(write_sysctls(tmp_path / "sys")), "--ask-image")
    assert enough.returncode == 0, enough.stdout[-2000:] + enough.stderr[-2000:]
    assert "the host model differs" not in enough.stdout
    assert "KV cache size 393,263 tokens, 1.00x" in enough.stdout  # 8,219 blocks of 8,218
