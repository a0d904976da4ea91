"""check-env --ask-image's pure parts (smoke/image_planner.py): the planner's command for a
file's layout, and its figures set beside the host model's."""

from __future__ import annotations

from typing import Any

from sparkbake.smoke import image_planner

HEAD: dict[str, Any] = {"role": "head", "kv_room": 37_000_000_000, "kv_tokens": 1_770_189,
                        "starts": True, "tp_size": 4, "dspark": True, "max_model_len": 393216,
                        "max_num_batched_tokens": 8192}
WORKER = {**HEAD, "role": "worker", "kv_room": 39_000_000_000}
RECORD: dict[str, Any] = {"vllm": "0.33.0", "plans": [{
    "block_bytes": 1_002_240, "request_bytes": 8_236_408_320,
    "trials": [{"refused": None, "tokens": 1_770_189, "concurrency": 4.5}]}]}


def test_each_rank_s_room_is_one_trial_the_head_first() -> None:
    assert image_planner.planner_command([HEAD, WORKER]) == [
        "-B", "/opt/sparkbake-smoke/smoke_kv.py", "/model/config.json", "--tp", "4",
        "--dspark", "--max-model-len", "393216", "--max-num-batched-tokens", "8192",
        "--available", "37000000000,39000000000,39000000000,39000000000"]
    one = image_planner.planner_command([{**HEAD, "tp_size": 1, "dspark": False}])
    assert one[-2:] == ["--available", "37000000000"] and "--dspark" not in one


def test_the_planner_s_figures_stand_beside_the_host_model_s() -> None:
    assert image_planner.compare(RECORD, [HEAD, WORKER]) == [
        "vLLM 0.33.0's planner in the image: a block 1,002,240 B, one request 8,236,408,320 B, "
        "KV cache size 1,770,189 tokens, 4.50x"]
    off = image_planner.compare(RECORD, [{**HEAD, "kv_tokens": 1_700_000}, WORKER])
    assert off[1] == ("the host model differs: KV cache size 1700000 where vLLM's planner "
                      "gives 1770189")
    refused = {**RECORD, "plans": [{**RECORD["plans"][0], "trials": [
        {"refused": "To serve at least one request ...", "tokens": None}]}]}
    said = image_planner.compare(refused, [HEAD, WORKER])
    assert said[0].endswith("refused: To serve at least one request ...")
    assert "the host model differs: starts True where vLLM's planner gives False" in said
