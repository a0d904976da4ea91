"""The preflight rules (images/preflight.json) on the reference deployment's .env, one by one."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from sparkbake.config import versions
from sparkbake.lock import pins
from sparkbake.nodes import envfile, preflight
from tests.nodeenv import ENV_DIR, HEAD_IP, write_sysctls

from .test_docs import ROOT

SERIES_373 = ("dcp-dspark", "prefix-cache", "ckv-gather", "vision")
SERIES_372 = ("dcp-dspark", "ckv-gather", "vision")
FUNCTIONS = {"given", "has_series", "max", "can", "capability", "because", "backends"}

checks = preflight.entrypoint().checks
RULES: dict[str, Any] = checks.load_rules()
RULE_IDS = [rule["id"] for rule in RULES["rules"]]


def node(name: str = "worker", **changes: str) -> dict[str, str]:
    """The reference's .env for a node, with the entrypoint's defaults, some values changed."""
    values = {**envfile.read(ENV_DIR / f"{name}.env").values, **changes}
    env: dict[str, str] = preflight.entrypoint().effective_env(values)
    return env


def no_gpu() -> None:
    """The GPU memory probe for rules that are not about it: this machine's GPU, if any, is
    not the node's (test_model_checks.py tests the memory rules)."""


def findings(env: dict[str, str], host_root: Path, series: tuple[str, ...] | None = SERIES_373,
             known: tuple[str, ...] = ()) -> list[Any]:
    return list(checks.check(env, series=series, host_root=host_root, known=known,
                             gpu_memory=no_gpu))


def fired(env: dict[str, str], host_root: Path, series: tuple[str, ...] | None = SERIES_373
          ) -> dict[str, str]:
    """rule id -> level of every finding."""
    return {f.rule: f.level for f in findings(env, host_root, series)}


@pytest.fixture
def sysctls(tmp_path: Path) -> Path:
    return write_sysctls(tmp_path / "sys")


# a ring of more than two nodes as node-files writes it
RING_NCCL = {"FABRIC_TOPOLOGY": "ring", "NCCL_ALGO": "Ring", "NCCL_NET_PLUGIN": "none",
             "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_MERGE_NICS": "0"}
# (rule, level, changes to the worker's .env that make it fire)
FIRING: list[tuple[str, str, dict[str, str]]] = [
    ("bad-value", "error", {"MAX_NUM_BATCHED_TOKENS": "8192  # comment"}),
    ("bad-value", "error", {"IB_GID_INDEX": "abc"}),
    ("fabric-topology-unknown", "error", {"FABRIC_TOPOLOGY": "star"}),
    ("ring-without-nccl-settings", "error", {"FABRIC_TOPOLOGY": "ring"}),
    ("ring-without-nccl-settings", "error", {**RING_NCCL, "NCCL_ALGO": "Tree"}),
    ("value-too-long", "error", {"SERVE_EXTRA_ARGS": "--x " + "y" * 131_055}),
    ("model-unset", "error", {"MODEL": ""}),
    ("multi-node-identity", "error", {"VLLM_HOST_IP": ""}),
    ("multi-node-identity", "error", {"NODE_RANK": ""}),
    ("rank-names-disagree", "error", {"RANK": "2"}),
    ("rank-out-of-range", "error", {"NODE_RANK": "", "RANK": "4"}),
    ("rank-out-of-range", "error", {"NODE_RANK": "4"}),
    ("rank-out-of-range", "error", {"NODE_RANK": "-1"}),
    ("worker-has-head-address", "error", {"VLLM_HOST_IP": HEAD_IP}),
    ("worker-api-server-options", "error", {"SERVE_EXTRA_ARGS": "--api-server-count 2"}),
    ("worker-api-server-options", "error", {"SERVE_EXTRA_ARGS": "--grpc-port=50051"}),
    ("head-headless", "error", {"NODE_RANK": "0", "VLLM_HOST_IP": HEAD_IP,
                                "SERVE_EXTRA_ARGS": "--headless"}),
    ("head-headless", "error", {"NNODES": "1", "NODE_RANK": "", "SERVE_EXTRA_ARGS": "--headless"}),
    ("kv-cache-pinned-under-dcp", "warning", {"KV_CACHE_MEMORY_BYTES": "26000000000"}),
    ("cudagraph-capture-size", "warning", {"MAX_NUM_SEQS": "4"}),
    ("cudagraph-capture-size", "warning", {"NUM_SPECULATIVE_TOKENS": "5"}),
    ("cudagraph-sizes-disagree", "error", {"CUDAGRAPH_CAPTURE_SIZES": "1,2,4,48"}),
    ("dspark-without-tokens", "error", {"NUM_SPECULATIVE_TOKENS": ""}),
    ("images-under-dcp-without-gather", "error", {"VLLM_DSV4_CKV_GATHER": "0"}),
    ("images-under-dcp-without-gather", "error", {"VLLM_DSV4_CKV_ALLOW_IMAGES": ""}),
    ("images-under-dcp-without-gather", "error",  # no mm limit: vLLM's default allows images
     {"VLLM_DSV4_CKV_GATHER": "", "LIMIT_MM_IMAGES": ""}),
    ("gather-cap-below-context", "warning", {"VLLM_DSV4_CKV_GATHER_MAX_TOKENS": "131072"}),
    ("prefix-cache-inert", "warning", {"VLLM_DSV4_DCP_PREFIX_CACHE": ""}),
    ("prefix-cache-inert", "warning", {"VLLM_DSV4_DCP_PREFIX_CACHE": "0"}),
    ("gpu-memory-4-nodes-tp4", "error", {"GPU_MEMORY_UTILIZATION": "0.82"}),
    ("gpu-memory-4-nodes-tp4", "error", {"GPU_MEMORY_UTILIZATION": ""}),
    ("compressed-mla-toggle", "error", {"VLLM_DSV4_B12X_COMPRESSED_MLA": "0"}),
    ("execute-timeout-short", "warning", {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "300"}),
    ("setting-unread-encode-cache", "warning", {"VLLM_INCREMENTAL_ENCODE_CACHE": "1"}),
    ("setting-unread-draft-head", "warning", {"VLLM_DSPARK_FP8_DRAFT_HEAD": "1"}),
    ("setting-unread-dcp-comm-backend", "warning",
     {"DCP_SIZE": "1", "VLLM_DSV4_DCP_PREFIX_CACHE": ""}),
    ("setting-unread-dcp-prefix-cache", "warning", {"DCP_SIZE": "1", "DCP_COMM_BACKEND": ""}),
    ("setting-unread-gpu-memory", "warning", {"DCP_SIZE": "1", "DCP_COMM_BACKEND": "",
                                              "VLLM_DSV4_DCP_PREFIX_CACHE": "",
                                              "KV_CACHE_MEMORY_BYTES": "26000000000"}),
    ("unknown-variable", "warning", {"VLLM_DSV4_CKV_GATHR": "1"}),
    ("unknown-variable", "warning", {"MAX_NUM_SEQ": "8"}),
]

# (rule, changes that come close to firing it but must not)
QUIET: list[tuple[str, dict[str, str]]] = [
    ("value-too-long", {"SERVE_EXTRA_ARGS": "--x " + "y" * 131_050}),  # 131072 with its NUL
    ("bad-value", {"IB_GID_INDEX": "auto"}),
    ("ring-without-nccl-settings", RING_NCCL),
    ("ring-without-nccl-settings", {"FABRIC_TOPOLOGY": "ring", "NNODES": "2", "TP_SIZE": "2"}),
    ("ring-without-nccl-settings", {"FABRIC_TOPOLOGY": "switch"}),
    ("fabric-topology-unknown", {"FABRIC_TOPOLOGY": "pair"}),
    ("worker-has-head-address", {"NODE_RANK": "0", "VLLM_HOST_IP": HEAD_IP}),
    ("worker-api-server-options", {"NODE_RANK": "0", "VLLM_HOST_IP": HEAD_IP,
                                   "SERVE_EXTRA_ARGS": "--api-server-count 2"}),
    ("worker-api-server-options", {"SERVE_EXTRA_ARGS": "--api-server-count-x 2 --port 1"}),
    ("head-headless", {"SERVE_EXTRA_ARGS": "--headless"}),
    ("rank-out-of-range", {"NODE_RANK": "3"}),
    ("rank-names-disagree", {"RANK": "1"}),
    ("setting-unread-dcp-comm-backend", {"DCP_SIZE": "2"}),
    ("setting-unread-dcp-comm-backend", {"DCP_SIZE": "1", "DCP_COMM_BACKEND": ""}),
    ("setting-unread-dcp-prefix-cache", {"DCP_SIZE": "1", "VLLM_DSV4_DCP_PREFIX_CACHE": "0"}),
    ("setting-unread-gpu-memory", {"KV_CACHE_MEMORY_BYTES": "26000000000",
                                   "GPU_MEMORY_UTILIZATION": ""}),
    ("rank-names-disagree", {"NODE_RANK": "", "RANK": "2"}),
    ("kv-cache-pinned-under-dcp", {"KV_CACHE_MEMORY_BYTES": "26000000000", "DCP_SIZE": "1"}),
    ("cudagraph-capture-size", {"MAX_NUM_SEQS": "4", "MAX_CUDAGRAPH_CAPTURE_SIZE": "28",
                                "CUDAGRAPH_CAPTURE_SIZES": "1,2,4,28"}),
    ("images-under-dcp-without-gather", {"VLLM_DSV4_CKV_GATHER": "0", "LIMIT_MM_IMAGES": "0"}),
    ("images-under-dcp-without-gather", {"VLLM_DSV4_CKV_GATHER": "0", "DCP_SIZE": "1"}),
    ("gather-cap-below-context", {"VLLM_DSV4_CKV_GATHER_MAX_TOKENS": "393216"}),
    ("gather-cap-below-context", {"VLLM_DSV4_CKV_GATHER_MAX_TOKENS": "131072",
                                  "MAX_MODEL_LEN": "131072"}),
    ("prefix-cache-inert", {"VLLM_DSV4_DCP_PREFIX_CACHE": "", "ENABLE_PREFIX_CACHING": "0"}),
    ("prefix-cache-inert", {"VLLM_DSV4_DCP_PREFIX_CACHE": "", "DCP_SIZE": "1"}),
    ("gpu-memory-4-nodes-tp4", {"GPU_MEMORY_UTILIZATION": "0.7"}),
    ("execute-timeout-short", {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "600"}),
    ("unknown-variable", {"SOMETHING_ELSE": "1", "NCCL_IB_HCA": "mlx5"}),
    ("bad-value", {"API_HOST": "any text at all", "DEFAULT_THINKING": "Yes"}),
]


def test_the_reference_env_files_pass_with_no_finding(sysctls: Path) -> None:
    for name in ("head", "worker"):
        assert findings(node(name), sysctls) == []


@pytest.mark.parametrize(("rule", "level", "changes"), FIRING,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(FIRING)])
def test_each_rule_fires_alone(rule: str, level: str, changes: dict[str, str],
                               sysctls: Path) -> None:
    assert fired(node(**changes), sysctls) == {rule: level}


@pytest.mark.parametrize(("rule", "changes"), QUIET,
                         ids=[f"{r}-{i}" for i, (r, _) in enumerate(QUIET)])
def test_near_misses_do_not_fire(rule: str, changes: dict[str, str], sysctls: Path) -> None:
    assert rule not in fired(node(**changes), sysctls)


def test_every_rule_is_tested() -> None:
    from .test_model_checks import MODEL_FIRING  # it builds on this module's helpers

    tested = {rule for rule, _, _ in FIRING} | {"host-memory-floor", "prefix-cache-without-series",
                                                "backend-not-installed", "backend-cannot-run",
                                                "free-memory-below-budget",
                                                # test_memory_budget.py
                                                "kv-cache-pin-too-large",
                                                # test_smoke_suite.py, on the 0.34.0 tags
                                                "backend-verdicts-missing",
                                                "kernel-kho",  # test_host_kernel.py
                                                # test_model_checks.py, test_check_env.py
                                                "model-is-cache-folder"}
    assert tested | {rule for rule, _, _, _ in IMAGE_FIRING} | \
        {rule for rule, *_ in MODEL_FIRING} == set(RULE_IDS)


def test_every_rule_the_preflight_page_names_is_a_rule() -> None:
    page = (ROOT / "docs" / "reference" / "preflight.md").read_text()
    assert set(re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", page.split("## The rules", 1)[1]
                          .split("\n## ", 1)[0])) - {"repeated-variable"} <= set(RULE_IDS)


def test_the_findings_carry_values_and_the_reference_reason(sysctls: Path) -> None:
    [finding] = findings(node(GPU_MEMORY_UTILIZATION="0.82"), sysctls)
    assert finding.at == "GPU_MEMORY_UTILIZATION"
    assert finding.message.startswith("GPU_MEMORY_UTILIZATION=0.82 on 4 nodes with TP 4")
    assert finding.lines("p: ").splitlines() == [
        f"p: error: {finding.message} [gpu-memory-4-nodes-tp4]", f"  -> {finding.reason}"]
    assert "earlyoom" in finding.reason


def test_an_unset_value_shows_what_it_means(sysctls: Path) -> None:
    [finding] = findings(node(GPU_MEMORY_UTILIZATION=""), sysctls)
    assert finding.message.startswith("GPU_MEMORY_UTILIZATION=unset (0.92) on 4 nodes")


def test_expressions_in_messages_are_computed(sysctls: Path) -> None:
    [finding] = findings(node(MAX_NUM_SEQS="4"), sysctls)
    assert finding.message.endswith("= 4 x 7 = 28")


def test_the_prefix_cache_variable_on_a_tag_without_the_series(sysctls: Path) -> None:
    assert fired(node(), sysctls, series=SERIES_372) == {"prefix-cache-without-series": "warning"}
    assert fired(node(VLLM_DSV4_DCP_PREFIX_CACHE=""), sysctls, series=SERIES_372) == {}


def test_series_rules_do_not_apply_when_the_series_are_unknown(sysctls: Path) -> None:
    assert fired(node(VLLM_DSV4_DCP_PREFIX_CACHE=""), sysctls, series=None) == {}


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("min_free_kbytes", 67584, "vm.min_free_kbytes=67584 (want >= 1048576)"),
    ("dirty_bytes", 0, "vm.dirty_bytes=0 (want 1..536870912)"),
    ("dirty_bytes", 1 << 30, "vm.dirty_bytes=1073741824 (want 1..536870912)"),
    ("dirty_background_bytes", 0, "vm.dirty_background_bytes=0 (want 1..134217728)"),
    ("dirty_expire_centisecs", 3000, "vm.dirty_expire_centisecs=3000 (want <= 500)"),
    ("dirty_writeback_centisecs", 0, "vm.dirty_writeback_centisecs=0 (want 1..100)"),
    ("swappiness", 60, "vm.swappiness=60 (want <= 10)"),
])
def test_each_host_memory_sysctl_is_checked(name: str, value: int, shown: str,
                                            tmp_path: Path) -> None:
    host_root = write_sysctls(tmp_path / "sys", **{name: value})
    [finding] = findings(node(), host_root)
    assert (finding.rule, finding.level) == ("host-memory-floor", "warning")
    assert finding.message == f"host memory floor not applied: {shown}"


def test_stricter_sysctls_than_the_reference_pass(tmp_path: Path) -> None:
    host_root = write_sysctls(tmp_path / "sys", min_free_kbytes=2097152, swappiness=0,
                             dirty_expire_centisecs=0)
    assert findings(node(), host_root) == []


def test_unreadable_sysctls_are_reported_not_passed(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    [finding] = findings(node(), nowhere)
    unread = nowhere / "proc" / "sys"
    assert finding.message == f"host memory floor not checked: {unread} cannot be read"


@pytest.mark.parametrize("name", sorted(n for n, s in RULES["variables"].items()
                                        if s["type"] not in ("str", "args")))
def test_every_typed_variable_is_checked(name: str, sysctls: Path) -> None:
    bad = [f for f in findings(node(**{name: "4 x"}), sysctls) if f.rule == "bad-value"]
    assert [(f.at, f.level) for f in bad] == [(name, "error")]
    assert bad[0].message.startswith(f"{name}='4 x' is not ")


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("API_PORT", "99999999999999999999", "an integer from 1 to 65535"),
    ("MASTER_PORT", "0", "an integer from 1 to 65535"),
    ("GPU_MEMORY_UTILIZATION", "7.5", "a number above 0 and at most 1"),
    ("GPU_MEMORY_UTILIZATION", "0", "a number above 0 and at most 1"),
    ("MAX_MODEL_LEN", "-5", "an integer at least 1"),
    ("CUDAGRAPH_CAPTURE_SIZES", "1,2,0", "a comma-separated list of integers at least 1"),
])
def test_a_number_out_of_its_range_is_a_bad_value(name: str, value: str, expected: str,
                                                   sysctls: Path) -> None:
    bad = [f for f in findings(node(**{name: value}), sysctls) if f.rule == "bad-value"]
    assert [f.message for f in bad] == [f"{name}={value!r} is not {expected}"]


@pytest.mark.parametrize(("name", "value"), [
    ("API_PORT", "65535"), ("GPU_MEMORY_UTILIZATION", "1"), ("GPU_MEMORY_UTILIZATION", "0.05"),
    ("MAX_MODEL_LEN", "1"), ("NODE_RANK", "0")])
def test_a_number_at_the_edge_of_its_range_passes(name: str, value: str, sysctls: Path) -> None:
    assert not [f for f in findings(node(**{name: value}), sysctls) if f.rule == "bad-value"]


def test_unbalanced_quotes_in_extra_args_are_a_bad_value(sysctls: Path) -> None:
    assert fired(node(SERVE_EXTRA_ARGS="--x 'open"), sysctls) == {"bad-value": "error"}


def test_names_the_image_knows_are_not_typos(sysctls: Path) -> None:
    env = node(TINYKERN_MOD="1")
    assert [f.rule for f in findings(env, sysctls, known=())] == []
    env = node(VLLM_DSV4_CKV_GATHR="1")
    assert [f.rule for f in checks.check(env, series=SERIES_373, host_root=sysctls,
                                         known=("VLLM_DSV4_CKV_GATHR",),
                                         gpu_memory=no_gpu)] == []


def test_the_did_you_mean_names_the_close_variable(sysctls: Path) -> None:
    [finding] = findings(node(MAX_NUM_SEQ="8"), sysctls)
    assert finding.message == "MAX_NUM_SEQ is not a variable the image knows; did you mean " \
                              "MAX_NUM_SEQS?"


def _names(expression: str) -> set[str]:
    tree = ast.parse(expression, mode="eval")
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name)}
    assert calls <= FUNCTIONS, expression
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - FUNCTIONS


@pytest.mark.parametrize("rule", [r for r in RULES["rules"] if "when" in r],
                         ids=[r["id"] for r in RULES["rules"] if "when" in r])
def test_every_rule_is_well_formed(rule: dict[str, Any]) -> None:
    assert rule["level"] in ("error", "warning") and rule["reason"] and rule["message"]
    assert _names(rule["when"]) <= set(RULES["variables"])
    assert rule["at"] in RULES["variables"]
    fields = re.findall(r"\{([^{}]+)\}", rule["message"])
    for field in [] if "check" in rule else fields:  # a check's problems fill its own fields
        assert _names(field) <= set(RULES["variables"])


def test_the_expression_language_refuses_what_it_does_not_know() -> None:
    ctx = checks.Context({"A": "1"}, RULES, None, "/proc/sys")
    for expression in ("__import__('os')", "A ** 2", "A in (1, 2)", "open('x')"):
        with pytest.raises(ValueError):
            ctx.evaluate(expression)


def test_rules_whose_values_are_unset_do_not_fire(sysctls: Path) -> None:
    ctx = checks.Context({"NUM_SPECULATIVE_TOKENS": "x"}, RULES, None, sysctls)
    with pytest.raises(checks.Unknown):
        ctx.evaluate("MAX_NUM_SEQS * 2")
    with pytest.raises(checks.Unknown):
        ctx.evaluate("NUM_SPECULATIVE_TOKENS + 1")
    assert ctx.evaluate("DCP_SIZE > 1 and MAX_NUM_SEQS > 0") is False  # stops at the first


# --- the rules about the image: its vLLM's backends, its packages, its capabilities --------

REPO_CONFIG = versions.load(Path(__file__).parents[2] / "versions.yaml")
TAG_373 = REPO_CONFIG.tag("3.73-vision")
# what production-3.73-vision's image is, as the host knows it (the suite's accept samples)
IMAGE_373 = preflight.image_facts(TAG_373, pins.runtime_lock_path(REPO_CONFIG, TAG_373))
SERVABLE = Path(__file__).parents[2] / "images" / "smoke" / "dsv4-4node" / "accept"
DCP_2 = {"DCP_SIZE": "2", "LIMIT_MM_IMAGES": "0"}  # DCP 2, text only
CAN_DCP_2 = {"dcp_sizes": [1, 2]}


def servable(**changes: str) -> dict[str, str]:
    """The worker that production-3.73-vision can serve, with its ENV, some values changed."""
    values = {**dict(TAG_373.env), **envfile.read(SERVABLE / "worker-1.env").values, **changes}
    env: dict[str, str] = preflight.entrypoint().effective_env(values)
    return env


def image_fired(env: dict[str, str], host_root: Path, image: Any = IMAGE_373,
                **capabilities: Any) -> dict[str, str]:
    if capabilities:
        image = dataclasses.replace(image, capabilities={**image.capabilities, **capabilities})
    return {f.rule: f.level for f in checks.check(env, series=SERIES_373, host_root=host_root,
                                                  image=image, gpu_memory=no_gpu)}


# (rule, level, changes to the servable worker, capabilities changed from 3.73's)
IMAGE_FIRING: list[tuple[str, str, dict[str, str], dict[str, Any]]] = [
    ("unknown-backend", "error", {"ATTENTION_BACKEND": "B12X_MLA_SPARSE"}, {}),
    ("unknown-backend", "error", {"MOE_BACKEND": "b12x_mla"}, {}),
    ("unknown-backend", "error", {"LINEAR_BACKEND": "cutlass-3"}, {}),
    ("dcp-size-unsupported", "error", DCP_2, {}),
    ("dcp-size-unsupported", "error", {"DCP_SIZE": "4", "LIMIT_MM_IMAGES": "0"}, CAN_DCP_2),
    ("images-under-dcp-unsupported", "error", {"DCP_SIZE": "2"}, CAN_DCP_2),
    ("images-under-dcp-unsupported", "error", {"DCP_SIZE": "2", "LIMIT_MM_IMAGES": ""},
     CAN_DCP_2),
    ("prefix-cache-under-dcp-unsupported", "error", {**DCP_2, "VLLM_DSV4_DCP_PREFIX_CACHE": "1"},
     CAN_DCP_2),
    ("speculative-unsupported", "error", {}, {"speculative": []}),
    ("ckv-gather-unsupported", "error", {**DCP_2, "VLLM_DSV4_CKV_GATHER": "1"}, CAN_DCP_2),
    ("ckv-gather-inert", "warning", {"VLLM_DSV4_CKV_ALLOW_IMAGES": "1"}, {}),
    ("vision-mhc-unread", "warning", {"VISION_MHC": "1"}, {}),
    # vLLM 0.33.0's own verdicts for 12.1a (images/backend-verdicts.json, made in the image)
    ("backend-cannot-run", "error", {"ATTENTION_BACKEND": "FLASHMLA_SPARSE_DSV4"}, {}),
    ("backend-cannot-run", "error", {"ATTENTION_BACKEND": "flashinfer_mla_sparse"}, {}),
    ("backend-cannot-run", "error", {"ATTENTION_BACKEND": "TRITON_ATTN"}, {}),
    ("backend-cannot-run", "error", {"MOE_BACKEND": "flashinfer_trtllm"}, {}),
    ("backend-cannot-run", "error", {"LINEAR_BACKEND": "torch"}, {}),
]

# (rule, changes that come close to firing it but must not, capabilities changed)
IMAGE_QUIET: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("unknown-backend", {"ATTENTION_BACKEND": "auto"}, {}),
    ("unknown-backend", {"ATTENTION_BACKEND": "flashmla_sparse_dsv4"}, {}),
    ("unknown-backend", {"MOE_BACKEND": "Flashinfer-B12X", "LINEAR_BACKEND": "MARLIN"}, {}),
    ("dcp-size-unsupported", DCP_2, CAN_DCP_2),
    ("images-under-dcp-unsupported", DCP_2, CAN_DCP_2),
    ("images-under-dcp-unsupported", {"DCP_SIZE": "2"}, {**CAN_DCP_2, "images_under_dcp": True}),
    ("prefix-cache-under-dcp-unsupported", {**DCP_2, "VLLM_DSV4_DCP_PREFIX_CACHE": "0"},
     CAN_DCP_2),
    ("speculative-unsupported", {"VLLM_ENABLE_DSPARK": "0"}, {"speculative": []}),
    ("ckv-gather-unsupported", {**DCP_2, "VLLM_DSV4_CKV_GATHER": "1"},
     {**CAN_DCP_2, "ckv_gather": True}),
    ("vision-mhc-unread", {"VISION_MHC": "0"}, {}),
    ("backend-cannot-run", {"ATTENTION_BACKEND": "auto", "MOE_BACKEND": "auto",
                            "LINEAR_BACKEND": "auto"}, {}),
    ("backend-cannot-run", {"MOE_BACKEND": "marlin", "LINEAR_BACKEND": "deep_gemm"}, {}),
]


def test_the_servable_samples_pass_on_the_image_with_no_finding(sysctls: Path) -> None:
    assert image_fired(servable(), sysctls) == {}


@pytest.mark.parametrize(("rule", "level", "changes", "capabilities"), IMAGE_FIRING,
                         ids=[f"{r}-{i}" for i, (r, _, _, _) in enumerate(IMAGE_FIRING)])
def test_each_image_rule_fires_alone(rule: str, level: str, changes: dict[str, str],
                                     capabilities: dict[str, Any], sysctls: Path) -> None:
    assert image_fired(servable(**changes), sysctls, **capabilities) == {rule: level}


@pytest.mark.parametrize(("rule", "changes", "capabilities"), IMAGE_QUIET,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(IMAGE_QUIET)])
def test_image_near_misses_do_not_fire(rule: str, changes: dict[str, str],
                                       capabilities: dict[str, Any], sysctls: Path) -> None:
    assert rule not in image_fired(servable(**changes), sysctls, **capabilities)


def test_what_is_not_known_of_the_image_is_not_refused(sysctls: Path) -> None:
    reference = node("head")  # DCP 2, B12X_MLA_SPARSE, b12x, gather, VISION_MHC
    assert image_fired(reference, sysctls, checks.Image()) == {}
    other_vllm = checks.Image(vllm="0.99.0", modules=frozenset({"b12x"}))
    assert image_fired(reference, sysctls, other_vllm) == {}


def test_a_refusal_names_the_backends_the_image_has_and_the_reason_declared(
        sysctls: Path) -> None:
    env = servable(ATTENTION_BACKEND="B12X_MLA_SPARSE", DCP_SIZE="2", LIMIT_MM_IMAGES="0")
    found = {f.rule: f for f in checks.check(env, series=SERIES_373, host_root=sysctls,
                                             image=IMAGE_373, gpu_memory=no_gpu)}
    assert found["unknown-backend"].at == "ATTENTION_BACKEND"
    assert found["unknown-backend"].reason.startswith(
        "vllm serve stops before it loads anything; its attention backends: FLASH_ATTN, ")
    assert TAG_373.capabilities is not None
    assert found["dcp-size-unsupported"].reason == dict(TAG_373.capabilities.because)["dcp_sizes"]
    assert found["dcp-size-unsupported"].message == \
        "DCP_SIZE=2, but this image runs DeepSeek-V4 at DCP sizes 1 only"


def test_a_backend_whose_module_the_image_lacks_is_refused(sysctls: Path) -> None:
    assert IMAGE_373.modules == {"b12x"}  # the lock's flashinfer-python installs it
    lacking = dataclasses.replace(IMAGE_373, modules=frozenset())
    assert image_fired(servable(MOE_BACKEND="b12x"), sysctls, lacking) == \
        {"backend-not-installed": "error"}
    assert image_fired(servable(MOE_BACKEND="b12x"), sysctls) == {}
    # b12x's linear kernel runs on the GPU, but cannot serve DeepSeek-V4's attn.wo_a
    assert image_fired(servable(LINEAR_BACKEND="B12X"), sysctls, lacking) == \
        {"backend-not-installed": "error", "backend-cannot-run": "error"}
    assert image_fired(servable(LINEAR_BACKEND="B12X"), sysctls) == {"backend-cannot-run": "error"}
    # vLLM knows the attention backend B12X, but DeepSeek-V4's attention does not take it
    b12x_attention = servable(ATTENTION_BACKEND="b12x")
    assert image_fired(b12x_attention, sysctls, lacking) == \
        {"backend-not-installed": "error", "backend-cannot-run": "error"}
    assert image_fired(b12x_attention, sysctls) == {"backend-cannot-run": "error"}
    assert image_fired(servable(MOE_BACKEND="marlin", LINEAR_BACKEND="auto"), sysctls,
                       lacking) == {}


# vLLM's verdicts as backend-verdicts.json holds them (made up here: the rule's logic alone)
VERDICTS = {"0.33.0": {"12.1a": {"deepseek_v4": {
    "attention": {"auto": "", "FLASHINFER_MLA_SPARSE_DSV4": "",
                  "FLASHMLA_SPARSE_DSV4": "it does not run on compute capability 12.1"},
    "moe": {"auto": "", "b12x": "", "deep_gemm": "its experts do not run on 12.1"},
    "linear": {"auto": "", "b12x": "", "machete": "it has no FP8 block-scaled kernel"}}}}}


def verdict_fired(changes: dict[str, str], host_root: Path, cuda_arch: str = "12.1a",
                  model: str = "deepseek_v4") -> list[Any]:
    rules = {**RULES, "backends": {**RULES["backends"], "runs": VERDICTS}}
    image = dataclasses.replace(IMAGE_373, cuda_arch=cuda_arch,
                                capabilities={**IMAGE_373.capabilities, "model": model})
    return [f for f in checks.check(servable(**changes), rules=rules, series=SERIES_373,
                                    host_root=host_root, image=image) if f.level == "error"]


def test_a_backend_that_cannot_run_the_model_on_the_gpu_is_refused_with_those_that_can(
        sysctls: Path) -> None:
    (finding,) = verdict_fired({"ATTENTION_BACKEND": "flashmla_sparse_dsv4"}, sysctls)
    assert (finding.rule, finding.at) == ("backend-cannot-run", "ATTENTION_BACKEND")
    assert finding.message == (
        "ATTENTION_BACKEND=flashmla_sparse_dsv4 cannot run deepseek_v4 on this image's GPU "
        "(12.1a): it does not run on compute capability 12.1")
    assert finding.reason.endswith("the attention backends that can: auto, "
                                   "FLASHINFER_MLA_SPARSE_DSV4")
    assert [f.message.split(":")[0] for f in verdict_fired(
        {"MOE_BACKEND": "deep_gemm", "LINEAR_BACKEND": "Machete"}, sysctls)] == [
        "MOE_BACKEND=deep_gemm cannot run deepseek_v4 on this image's GPU (12.1a)",
        "LINEAR_BACKEND=Machete cannot run deepseek_v4 on this image's GPU (12.1a)"]


def test_backends_are_not_judged_without_verdicts_for_the_gpu_and_model(sysctls: Path) -> None:
    for image in ({"cuda_arch": "9.0a"}, {"model": "qwen3"}):
        assert verdict_fired({"ATTENTION_BACKEND": "FLASHMLA_SPARSE_DSV4"}, sysctls,
                             **image) == []
    assert verdict_fired({"ATTENTION_BACKEND": "auto", "MOE_BACKEND": "b12x"}, sysctls) == []


def test_the_backends_modules_come_from_the_distributions_that_install_them() -> None:
    assert checks.provided_modules(RULES, ["flashinfer_python", "torch"]) == {"b12x"}
    assert checks.provided_modules(RULES, ["B12X"]) == {"b12x"}
    assert checks.provided_modules(RULES, ["torch"]) == frozenset()
