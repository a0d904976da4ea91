"""The image entrypoint, run on the host: arguments are run exactly, env builds vllm serve."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sparkbake import resources
from sparkbake.config import versions
from sparkbake.nodes import envfile, preflight
from tests.nodeenv import ENV_DIR, HEAD_IP, node_command, write_sysctls

from .test_docs import ROOT, page_section

SCRIPT = resources.path("entrypoint.py")

# With MODEL alone: the fixed flags of the model family and the defaults, in order.
BASELINE = [
    "vllm", "serve", "/m", "--host", "0.0.0.0",
    "--trust-remote-code", "--distributed-executor-backend", "mp",
    "--kv-cache-dtype", "fp8", "--block-size", "256",
    "--compilation-config", '{"custom_ops":["all"]}',
    "--async-scheduling", "--no-scheduler-reserve-full-isl", "--enable-chunked-prefill",
    "--tokenizer-mode", "deepseek_v4",
    "--tool-call-parser", "deepseek_v4", "--enable-auto-tool-choice",
    "--reasoning-parser", "deepseek_v4", "--reasoning-config",
    '{"reasoning_parser":"deepseek_v4","reasoning_start_str":"","reasoning_end_str":""}',
    "--default-chat-template-kwargs.thinking=true",
    "--disable-chunked-mm-input", "--limit-mm-per-prompt", '{"image": 4}',
]

# (variables set on top of MODEL=/m, the arguments they must produce, in this order)
VARIABLE_CASES: list[tuple[dict[str, str], list[str]]] = [
    ({"MODEL": "/models/x"}, ["vllm", "serve", "/models/x"]),
    ({"SERVED_MODEL_NAME": "dsv4"}, ["--served-model-name", "dsv4"]),
    ({"API_HOST": "127.0.0.1"}, ["--host", "127.0.0.1"]),
    ({"API_PORT": "8300"}, ["--port", "8300"]),
    ({"NNODES": "4"}, ["--nnodes", "4"]),
    ({"NODE_RANK": "2"}, ["--node-rank", "2"]),
    ({"MASTER_ADDR": "10.0.0.1"}, ["--master-addr", "10.0.0.1"]),
    ({"MASTER_PORT": "29511"}, ["--master-port", "29511"]),
    ({"TP_SIZE": "4"}, ["--tensor-parallel-size", "4"]),
    ({"DCP_SIZE": "2"}, ["--decode-context-parallel-size", "2"]),
    ({"DCP_COMM_BACKEND": "ag_rs"}, ["--dcp-comm-backend", "ag_rs"]),
    ({"ATTENTION_BACKEND": "FLASHINFER_MLA_SPARSE_DSV4"},
     ["--attention-backend", "FLASHINFER_MLA_SPARSE_DSV4", "--kv-cache-dtype"]),
    ({"MOE_BACKEND": "marlin"}, ["--moe-backend", "marlin", "--kv-cache-dtype"]),
    ({"LINEAR_BACKEND": "auto", "MOE_BACKEND": "auto"},
     ["--moe-backend", "auto", "--linear-backend", "auto", "--kv-cache-dtype", "fp8"]),
    ({"GPU_MEMORY_UTILIZATION": "0.75"}, ["--gpu-memory-utilization", "0.75"]),
    ({"KV_CACHE_MEMORY_BYTES": "26000000000"}, ["--kv-cache-memory-bytes", "26000000000"]),
    ({"MAX_MODEL_LEN": "393216"}, ["--max-model-len", "393216"]),
    ({"MAX_NUM_SEQS": "8"}, ["--max-num-seqs", "8"]),
    ({"MAX_NUM_BATCHED_TOKENS": "8192"}, ["--max-num-batched-tokens", "8192"]),
    ({"LONG_PREFILL_TOKEN_THRESHOLD": "4096"}, ["--long-prefill-token-threshold", "4096"]),
    ({"MAX_CUDAGRAPH_CAPTURE_SIZE": "56"}, ["--max-cudagraph-capture-size", "56"]),
    ({"VLLM_CUDAGRAPH_MODE": "FULL_AND_PIECEWISE"},
     ["--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}']),
    ({"CUDAGRAPH_CAPTURE_SIZES": "1, 2,56"},
     ["--compilation-config", '{"custom_ops":["all"],"cudagraph_capture_sizes":[1,2,56]}']),
    ({"ENABLE_PREFIX_CACHING": "1"}, ["--enable-chunked-prefill", "--enable-prefix-caching"]),
    ({"ENABLE_PREFIX_CACHING": "false"},
     ["--enable-chunked-prefill", "--no-enable-prefix-caching"]),
    ({"TOKENIZER_MODE": "auto"}, ["--tokenizer-mode", "auto"]),
    ({"TOOL_CALL_PARSER": "hermes"}, ["--tool-call-parser", "hermes", "--enable-auto-tool-choice"]),
    ({"REASONING_PARSER": "r1"},
     ["--reasoning-parser", "r1", "--reasoning-config",
      '{"reasoning_parser":"r1","reasoning_start_str":"","reasoning_end_str":""}']),
    ({"DEFAULT_THINKING": "0"}, ["--default-chat-template-kwargs.thinking=false"]),
    ({"VLLM_ENABLE_DSPARK": "1"}, ["--speculative-config", '{"method":"dspark"}']),
    ({"VLLM_ENABLE_DSPARK": "1", "NUM_SPECULATIVE_TOKENS": "6"},
     ["--speculative-config", '{"method":"dspark","num_speculative_tokens":6}']),
    ({"VLLM_ENABLE_DSPARK": "1", "DSPARK_DRAFT_SAMPLE_METHOD": "greedy"},
     ["--speculative-config", '{"method":"dspark","draft_sample_method":"greedy"}']),
    ({"LIMIT_MM_IMAGES": "2"}, ["--limit-mm-per-prompt", '{"image": 2}']),
    ({"SERVE_EXTRA_ARGS": "--seed 7 --served-model-name 'a b'"},
     ["--limit-mm-per-prompt", '{"image": 4}', "--seed", "7", "--served-model-name", "a b"]),
]

# (variables set, an argument that must then be absent)
ABSENT_CASES: list[tuple[dict[str, str], str]] = [
    ({"KV_CACHE_MEMORY_BYTES": ""}, "--kv-cache-memory-bytes"),
    ({"API_PORT": ""}, "--port"),
    ({"API_HOST": ""}, "--host"),
    ({"TOKENIZER_MODE": ""}, "--tokenizer-mode"),
    ({"TOOL_CALL_PARSER": ""}, "--enable-auto-tool-choice"),
    ({"REASONING_PARSER": ""}, "--reasoning-config"),
    ({"DEFAULT_THINKING": ""}, "--default-chat-template-kwargs.thinking=true"),
    ({"LIMIT_MM_IMAGES": ""}, "--limit-mm-per-prompt"),
    ({"VLLM_ENABLE_DSPARK": "0", "NUM_SPECULATIVE_TOKENS": "6"}, "--speculative-config"),
    ({"ENABLE_PREFIX_CACHING": ""}, "--enable-prefix-caching"),
]


def entrypoint() -> ModuleType:
    return preflight.entrypoint()  # the host's loader: what check-env uses


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env or {"PATH": "/usr/bin:/bin"}, check=False)


def contains(cmd: list[str], part: list[str]) -> bool:
    return any(cmd[i:i + len(part)] == part for i in range(len(cmd) - len(part) + 1))


@pytest.fixture
def image_env(tmp_path: Path) -> dict[str, str]:
    """An environment like the image's: a manifest of 3.73 and a tuned host's sysctls."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({
        "image": "repo:production-3.73-vision", "inputs": "ab" * 32,
        "series": [{"name": n} for n in ("dcp-dspark", "prefix-cache", "ckv-gather", "vision")],
        "env": {"VLLM_DSV4_CKV_GATHER": "1", "VLLM_DSV4_CKV_ALLOW_IMAGES": "1"}}))
    write_sysctls(tmp_path / "sys")
    site = tmp_path / "site"
    (site / "b12x").mkdir(parents=True)  # the module the reference's backends need
    (site / "b12x" / "__init__.py").write_text("")
    return {"PATH": "/usr/bin:/bin", "SPARKBAKE_MANIFEST": str(manifest),
            "SPARKBAKE_HOST_ROOT": str(tmp_path / "sys"), "PYTHONPATH": str(site)}


def installed(site: Path, *distributions: str) -> Path:
    """A folder on PYTHONPATH where importlib.metadata finds these `name-version`s."""
    for distribution in distributions:
        name, version = distribution.split("-", 1)
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n"
                                       f"Version: {version}\n")
    return site


def test_given_arguments_are_run_exactly_without_env_flags() -> None:
    result = run("--print", "vllm", "serve", "/m", "--port", "1",
                 env={"PATH": "/usr/bin:/bin", "API_PORT": "8300", "MODEL": "/other"})
    assert result.stdout.strip() == "vllm serve /m --port 1"


def test_a_given_serve_command_warns_of_the_variables_it_bypasses() -> None:
    """The image bakes VLLM_ENABLE_DSPARK and its drafting method: a launcher that passes its
    own `vllm serve` arguments loses them, and is told which."""
    baked = {"PATH": "/usr/bin:/bin", "VLLM_ENABLE_DSPARK": "1",
             "DSPARK_DRAFT_SAMPLE_METHOD": "greedy", "KV_CACHE_MEMORY_BYTES": ""}
    result = run("--print", "vllm", "serve", "/m", env=baked)
    assert (result.returncode, result.stdout.strip()) == (0, "vllm serve /m")
    assert result.stderr == (
        "sparkbake: warning: arguments were given, so VLLM_ENABLE_DSPARK, "
        "DSPARK_DRAFT_SAMPLE_METHOD make no flags; pass the flags themselves, or no arguments "
        "(see --print)\n")
    other = run("--print", "python3", "-c", "pass", env=baked)
    assert other.stderr == ""


def test_given_arguments_skip_preflight_even_with_a_bad_environment() -> None:
    result = run("--print", "echo", "x", env={"PATH": "/usr/bin:/bin", "NNODES": "four"})
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "echo x", "")


def test_arguments_are_executed_not_just_printed() -> None:
    result = run("sh", "-c", "echo ran $0", "x y")
    assert (result.returncode, result.stdout.strip()) == (0, "ran x y")


def test_with_model_alone_the_command_is_the_family_baseline() -> None:
    assert entrypoint().serve_command({"MODEL": "/m"}) == BASELINE


@pytest.mark.parametrize(("variables", "expected"), VARIABLE_CASES,
                         ids=[",".join(v) + f"-{i}" for i, (v, _) in enumerate(VARIABLE_CASES)])
def test_each_variable_makes_its_flag(variables: dict[str, str], expected: list[str]) -> None:
    cmd = entrypoint().serve_command({"MODEL": "/m", **variables})
    assert contains(cmd, expected), shlex.join(cmd)


@pytest.mark.parametrize(("variables", "flag"), ABSENT_CASES,
                         ids=[",".join(v) for v, _ in ABSENT_CASES])
def test_an_empty_or_off_variable_drops_its_flag(variables: dict[str, str], flag: str) -> None:
    full = {"MODEL": "/m", "API_PORT": "1", "KV_CACHE_MEMORY_BYTES": "1",
            "VLLM_ENABLE_DSPARK": "1", "ENABLE_PREFIX_CACHING": "1"}
    assert flag in entrypoint().serve_command(full)
    assert flag not in entrypoint().serve_command({**full, **variables})


def test_the_table_covers_every_variable_of_the_entrypoint() -> None:
    tested = {name for variables, _ in VARIABLE_CASES for name in variables}
    assert tested == set(entrypoint().VARIABLES)


def test_the_entrypoint_variables_are_the_flag_variables_of_the_rules() -> None:
    rules = entrypoint().checks.load_rules()
    flagged = {name for name, spec in rules["variables"].items() if spec["use"] == "flag"}
    assert flagged == set(entrypoint().VARIABLES)


def test_the_docs_document_every_variable_in_the_entrypoint_section() -> None:
    section = page_section("reference/environment.md", "Entrypoint")
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", section))
    assert set(entrypoint().VARIABLES) <= documented


@pytest.mark.parametrize(("node", "rank"), [("head", 0), ("worker", 1)])
def test_the_reference_env_files_make_the_reference_command(node: str, rank: int) -> None:
    env = envfile.read(ENV_DIR / f"{node}.env").values
    assert entrypoint().serve_command(env) == node_command(rank)


def test_no_model_and_no_arguments_is_an_error_that_says_what_to_set() -> None:
    with pytest.raises(SystemExit, match="set MODEL"):
        entrypoint().serve_command({})


def test_print_shows_the_env_command_and_warnings_go_to_stderr(
        image_env: dict[str, str]) -> None:
    env = {**image_env, **envfile.read(ENV_DIR / "worker.env").values, "MAX_NUM_SEQS": "4"}
    result = run("--print", env=env)
    expected = node_command(1)
    expected[expected.index("--max-num-seqs") + 1] = "4"
    assert result.returncode == 0
    assert shlex.split(result.stdout) == expected
    assert "sparkbake preflight: warning: MAX_CUDAGRAPH_CAPTURE_SIZE=56" in result.stderr


def test_preflight_errors_refuse_the_start_with_exit_2(image_env: dict[str, str]) -> None:
    env = {**image_env, **envfile.read(ENV_DIR / "worker.env").values, "VLLM_HOST_IP": HEAD_IP}
    result = run(env=env)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("sparkbake preflight: error: worker NODE_RANK=1 has "
                                    f"VLLM_HOST_IP={HEAD_IP}")
    assert "refusing to start vllm: 1 error(s)" in result.stderr


def test_preflight_can_be_switched_off(image_env: dict[str, str]) -> None:
    env = {**image_env, **envfile.read(ENV_DIR / "worker.env").values, "VLLM_HOST_IP": HEAD_IP,
           "SPARKBAKE_PREFLIGHT": "0"}
    result = run("--print", env=env)
    assert result.returncode == 0
    assert shlex.split(result.stdout) == node_command(1)
    assert result.stderr.strip() == "sparkbake preflight: skipped (SPARKBAKE_PREFLIGHT=0)"


def test_a_bad_value_without_preflight_is_a_short_error(image_env: dict[str, str]) -> None:
    result = run("--print", env={**image_env, "MODEL": "/m", "SPARKBAKE_PREFLIGHT": "0",
                                 "LIMIT_MM_IMAGES": "four"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "sparkbake: not an integer" in result.stderr


def test_without_arguments_the_built_command_is_executed(
        image_env: dict[str, str], tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "vllm $*"\n')
    fake.chmod(0o755)
    env = {**image_env, "PATH": f"{fake.parent}:{os.environ['PATH']}", "MODEL": "/m"}
    result = run(env=env)
    assert (result.returncode, result.stdout.strip()) == (0, " ".join(BASELINE))


def test_print_without_model_describes_the_image(image_env: dict[str, str]) -> None:
    result = run("--print", env=image_env)
    assert result.stdout.strip() == (f"repo:production-3.73-vision (inputs {'ab' * 6}); "
                                     "set MODEL to serve")


def with_capabilities(image_env: dict[str, str], tag: str = "production-3.73-vision"
                      ) -> dict[str, str]:
    """image_env whose manifest declares the tag's capabilities, as the bake writes them."""
    manifest = Path(image_env["SPARKBAKE_MANIFEST"])
    declared = versions.load(ROOT / "versions.yaml").tags[tag].capabilities
    assert declared is not None
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()),
                                    "capabilities": declared.as_dict()}))
    return image_env


def test_an_attention_backend_the_installed_vllm_lacks_is_refused_naming_its_own(
        image_env: dict[str, str]) -> None:
    installed(Path(image_env["PYTHONPATH"]), "vllm-0.33.0+cu130")
    env = {**image_env, **envfile.read(ENV_DIR / "worker.env").values}
    result = run("--print", env=env)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == ("sparkbake preflight: error: ATTENTION_BACKEND=B12X_MLA_SPARSE is not "
                        "among the attention backends of this image's vLLM 0.33.0 "
                        "[unknown-backend]")
    assert lines[1].startswith("  -> vllm serve stops before it loads anything; its attention "
                               "backends: FLASH_ATTN, ")
    assert ", FLASHINFER_MLA_SPARSE_DSV4, " in lines[1]
    assert "refusing to start vllm: 1 error(s)" in result.stderr
    fixed = run("--print", env={**env, "ATTENTION_BACKEND": "flashinfer_mla_sparse_dsv4"})
    assert fixed.returncode == 0, fixed.stderr


def test_a_backend_whose_package_is_not_installed_is_refused(
        image_env: dict[str, str], tmp_path: Path) -> None:
    env = {**image_env, "PYTHONPATH": str(tmp_path / "empty"), "MODEL": "/m",
           "MOE_BACKEND": "b12x", "LINEAR_BACKEND": "B12X"}
    result = run("--print", env=env)
    assert result.returncode == 2
    assert [line for line in result.stderr.splitlines() if "[backend-not-installed]" in line] == [
        "sparkbake preflight: error: MOE_BACKEND=b12x needs the Python module b12x, which this "
        "image does not have [backend-not-installed]",
        "sparkbake preflight: error: LINEAR_BACKEND=B12X needs the Python module b12x, which "
        "this image does not have [backend-not-installed]"]
    with_b12x = run("--print", env={**env, "PYTHONPATH": image_env["PYTHONPATH"]})
    assert with_b12x.returncode == 0, with_b12x.stderr


def test_the_manifests_capabilities_refuse_dcp_2_with_the_reason(
        image_env: dict[str, str]) -> None:
    env = {**image_env, **envfile.read(ENV_DIR / "worker.env").values}
    assert run("--print", env=env).returncode == 0  # a manifest without capabilities
    result = run("--print", env=with_capabilities(image_env) | envfile.read(
        ENV_DIR / "worker.env").values)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    at = lines.index("sparkbake preflight: error: DCP_SIZE=2, but this image runs DeepSeek-V4 "
                     "at DCP sizes 1 only [dcp-size-unsupported]")
    assert "#44573" in lines[at + 1] and "PR #764" in lines[at + 1]
    assert "[images-under-dcp-unsupported]" in result.stderr
    at_dcp_1 = {**env, "DCP_SIZE": "1", "VLLM_DSV4_CKV_GATHER": "", "VISION_MHC": "",
                "VLLM_DSV4_CKV_ALLOW_IMAGES": ""}
    accepted = run("--print", env=with_capabilities(image_env) | at_dcp_1)
    assert accepted.returncode == 0, accepted.stderr


def test_the_model_that_model_names_is_checked_before_vllm_starts(
        image_env: dict[str, str]) -> None:
    """In the image the model is the folder MODEL names; the declared device memory counts
    where no GPU answers (none does here)."""
    manifest = Path(with_capabilities(image_env)["SPARKBAKE_MANIFEST"])
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "capabilities": {**data["capabilities"],
                                                             "device_memory_gib": 121.7}}))
    dsv4 = Path(__file__).parents[1] / "data" / "models" / "dsv4-flash"
    env = {**image_env, "MODEL": str(dsv4), "GPU_MEMORY_UTILIZATION": "0.75",
           "LIMIT_MM_IMAGES": "0"}  # the text checkpoint
    result = run("--print", env=env)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(
        "sparkbake preflight: error: vLLM will not start: the head has nothing (76.7 GiB "
        "short) of KV room for one request of 1048576 tokens, which needs 5.4 GiB (121.7 GiB, "
        "the tag's device_memory_gib: 121.7, what cudaMemGetInfo reports, x "
        "GPU_MEMORY_UTILIZATION=0.75 = 91.3 GiB")
    assert "[memory-budget]" in result.stderr
    four = run("--print", env={**env, "TP_SIZE": "4"})
    assert four.returncode == 0
    # what the node will get, in its log before vLLM's own lines
    assert "sparkbake preflight: memory: head: 121.7 GiB (the tag's device_memory_gib: 121.7, " \
           "what cudaMemGetInfo reports) x 0.75 = 91.3 GiB; non-KV 56.7 GiB" in four.stderr


def test_rank_stands_for_an_unset_node_rank() -> None:
    env = envfile.read(ENV_DIR / "worker.env").values
    copied = {name: value for name, value in env.items() if name != "NODE_RANK"}
    assert entrypoint().serve_command({**copied, "RANK": "1"}) == node_command(1)
    assert "--headless" not in entrypoint().serve_command(copied)  # no rank: the head's
    # NODE_RANK, where given, is the node's rank
    assert entrypoint().serve_command({**env, "RANK": "0"}) == node_command(1)


# What sparkrun's vllm-distributed runtime appends to a recipe's command on rank 1 of four:
# the served name always, the rendezvous across nodes (its generate_node_command).
SPARKRUN_FLAGS = {"SERVED_MODEL_NAME": "--served-model-name", "NNODES": "--nnodes",
                  "NODE_RANK": "--node-rank", "MASTER_ADDR": "--master-addr",
                  "MASTER_PORT": "--master-port"}


def launcher_argv(values: dict[str, str]) -> list[str]:
    return [*(word for name, flag in SPARKRUN_FLAGS.items() for word in (flag, values[name])),
            "--headless"]


def test_a_launchers_flags_set_their_variables_and_reach_the_command_once() -> None:
    """The worker's values with the launcher's in flags: the command the file alone makes,
    no flag doubled (the served name, the rendezvous, --headless) and none dropped."""
    values = envfile.read(ENV_DIR / "worker.env").values
    rest = {name: value for name, value in values.items() if name not in SPARKRUN_FLAGS}
    result = run("--print", *launcher_argv(values),
                 env={"PATH": "/usr/bin:/bin", "SPARKBAKE_PREFLIGHT": "0", **rest})
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout) == node_command(1)


def test_a_launcher_flag_no_variable_makes_is_kept_after_the_command() -> None:
    env = {"PATH": "/usr/bin:/bin", "SPARKBAKE_PREFLIGHT": "0", "MODEL": "/m"}
    result = run("--print", "--port=9000", "--enforce-eager", "--headless", env=env)
    assert shlex.split(result.stdout) == [
        *entrypoint().serve_command({"MODEL": "/m", "API_PORT": "9000"}),
        "--enforce-eager", "--headless"]  # the head: --headless is the launcher's own


def test_a_launchers_flags_go_through_the_preflight(image_env: dict[str, str]) -> None:
    """Given as a flag, a value is the preflight's to check as the variable's: refused."""
    result = run("--served-model-name", "x", "--nnodes", "four",
                 env={**image_env, "MODEL": "/m"})
    assert result.returncode == 2 and result.stdout == ""
    assert "sparkbake preflight: error: " in result.stderr and "NNODES" in result.stderr
