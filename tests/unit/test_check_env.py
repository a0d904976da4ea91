"""`sparkbake check-env NODE.env --tag TAG`: the image's rules on the host, exit 0 or 2."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkbake.__main__ import main
from sparkbake.config.versions import Tag
from sparkbake.nodes import preflight
from tests.conftest import versions_yaml
from tests.nodeenv import ENV_DIR, HEAD_IP, at_dcp_1, node_command, write_sysctls

VERSIONS = Path(__file__).parents[2] / "versions.yaml"
DSV4 = Path(__file__).parents[1] / "data" / "models" / "dsv4-flash"  # DeepSeek-V4-Flash

# A tag of its own: its env sets the gather (as production-3.72-vision's does), its series
# includes prefix-cache.
CONFIG = versions_yaml(repository="localhost:5000/check-env", platform="linux/arm64", tags="""\
  gathered:
    upstream: tree
    series: [dcp-dspark, prefix-cache]
    env: {VLLM_DSV4_CKV_GATHER: "1", VLLM_DSV4_CKV_ALLOW_IMAGES: "1", SPARK_NOTE: "x"}
  bare:
    extends: gathered
    env: {VLLM_DSV4_CKV_GATHER: "0"}
  textonly:
    upstream: tree
    series: [dcp-dspark]
    env: {VLLM_ENABLE_DSPARK: "1", NUM_SPECULATIVE_TOKENS: "6", VLLM_DSV4_CKV_GATHER: "1",
          VLLM_DSV4_CKV_ALLOW_IMAGES: "1"}
  dcp2:
    upstream: tree
    series: [dcp-dspark]
    capabilities:
      dcp_sizes: [1, 2]
      speculative: [dspark]
      because: {images_under_dcp: "no gather on this path"}
""")


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    return write_sysctls(tmp_path / "sys")


@pytest.fixture
def declared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tag declares a GB10's total as vLLM reads it (capabilities: device_memory_gib), and
    this machine's GPU, asked, would report 24 GiB."""
    facts = preflight.image_facts

    def with_memory(tag: Tag, runtime_lock: Path | None = None) -> Any:
        image = facts(tag, runtime_lock)
        declared = {**(image.capabilities or {}), "device_memory_gib": 121.7}
        return dataclasses.replace(image, capabilities=declared)
    monkeypatch.setattr(preflight, "image_facts", with_memory)
    monkeypatch.setattr(preflight.entrypoint().checks.model_checks, "nvml_total_memory",
                        lambda: 24 * 2**30)


@pytest.fixture
def own_config(tmp_path: Path) -> Path:
    (tmp_path / "upstream").mkdir()
    path = tmp_path / "versions.yaml"
    path.write_text(CONFIG)
    return path


def check_env(env_file: Path, tag: str, *extra: str, config: Path = VERSIONS) -> int:
    return main(["--config", str(config), "check-env", str(env_file), "--tag", tag, *extra])


def write_env(folder: Path, text: str, name: str = "node.env") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def line_of(text: str, start: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith(start))


def test_the_reference_files_are_refused_on_3_73_for_dcp_and_backends(
        host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ENV_DIR / "head.env").read_text()
    assert check_env(ENV_DIR / "head.env", "3.73-vision", "--host-root", str(host_root)) == 2
    out, err = capsys.readouterr()
    errors = {line.rsplit("[", 1)[1].rstrip("]"): (line, reason) for line, reason in
              zip(out.splitlines()[::2], out.splitlines()[1::2], strict=True)
              if ": error: " in line}
    assert set(errors) == {"dcp-size-unsupported", "unknown-backend", "backend-cannot-run",
                           "images-under-dcp-unsupported", "prefix-cache-under-dcp-unsupported",
                           "ckv-gather-unsupported"}
    line, reason = errors["dcp-size-unsupported"]
    assert line == (f"{ENV_DIR / 'head.env'}:{line_of(text, 'DCP_SIZE=')}: error: DCP_SIZE=2, "
                    "but this image runs DeepSeek-V4 at DCP sizes 1 only [dcp-size-unsupported]")
    assert '"DCP not support sliding window."' in reason
    assert all(pr in reason for pr in ("#44573", "#56738", "local-inference-lab/vllm PR #764"))
    line, reason = errors["unknown-backend"]
    assert "ATTENTION_BACKEND=B12X_MLA_SPARSE is not among the attention backends of this " \
           "image's vLLM 0.33.0" in line
    assert "FLASHINFER_MLA_SPARSE_DSV4, " in reason and ", B12X, " in reason
    # b12x for MoE: the runtime lock's flashinfer-python installs the b12x module; b12x for
    # the linear layers cannot serve the attention's batched output projection
    assert "MOE_BACKEND=b12x" not in out
    line, reason = errors["backend-cannot-run"]
    assert line.endswith(
        "error: LINEAR_BACKEND=b12x cannot run deepseek_v4 on this image's GPU (12.1a): it "
        "cannot serve attn.wo_a, a batched matmul: after B12xFp8BlockScaledMMKernel's "
        "processing its weight is 2-D (2048, 4096), but the output projection's "
        "fp8_einsum('bhr,hdr->bhd') reads it as 3-D (2, 1024, 4096) (groups, o_lora_rank, K) "
        "[backend-cannot-run]")
    assert reason.endswith("the linear backends that can: auto, deep_gemm")
    assert "6 preflight error(s) for production-3.73-vision" in err


def test_a_backend_whose_module_no_locked_distribution_installs_is_refused(
        tmp_path: Path, own_config: Path, host_root: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The host reads what the image has from the tag's runtime lock."""
    text = own_config.read_text().replace("    dir: upstream", "    pypi: {name: vllm, version: "
                                          f"0.33.0, sha256: {'a' * 64}}}\n"
                                          "    runtime_requirements: requirements/cuda.txt")
    own_config.write_text(text)
    lock = tmp_path / "locks" / "runtime" / "debian.tree.arm64.txt"  # lock.runtime_lock_path
    lock.parent.mkdir(parents=True)
    lock.write_text("torch==2.14.0 \\\n    --hash=sha256:00\n")
    env = write_env(tmp_path, "MODEL=/m MOE_BACKEND=b12x ATTENTION_BACKEND=B12X\n")
    assert check_env(env, "textonly", "--host-root", str(host_root), config=own_config) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[out.index(f"{env}:1: error: MOE_BACKEND=b12x needs the Python module b12x, which "
                         "this image does not have [backend-not-installed]") + 1] == (
        "  -> vLLM knows the name, but its kernels come from b12x, which none of b12x, "
        "flashinfer-python installs in this image; pick another moe backend, e.g. auto")
    assert f"{env}:1: error: ATTENTION_BACKEND=B12X needs the Python module b12x, which this " \
           "image does not have [backend-not-installed]" in out
    lock.write_text("flashinfer-python==0.7.2.post1 \\\n    --hash=sha256:00\n")
    assert check_env(env, "textonly", "--host-root", str(host_root), config=own_config) == 0


def test_the_reference_at_dcp_1_with_the_images_backends_passes(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for node in ("head", "worker"):
        env = write_env(tmp_path, at_dcp_1((ENV_DIR / f"{node}.env").read_text()))
        assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
        out, err = capsys.readouterr()
        found = [line.rsplit("[", 1)[1] for line in out.splitlines() if line.endswith("]")]
        # warnings: what nothing reads at DCP 1 or in this image, each named
        assert found == ["ckv-gather-inert]", "vision-mhc-unread]",
                         "setting-unread-dcp-comm-backend]", "setting-unread-dcp-prefix-cache]"]
        assert "passes for production-3.73-vision (4 warning(s))" in err


def test_print_shows_the_command_the_image_would_run(
        own_config: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_env(ENV_DIR / "worker.env", "textonly", "--print",
                     "--host-root", str(host_root), config=own_config) == 0
    assert shlex.split(capsys.readouterr().out.splitlines()[-1]) == node_command(1)


def test_a_worker_with_the_heads_address_is_an_error_with_file_and_line(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = at_dcp_1((ENV_DIR / "worker.env").read_text().replace("192.168.100.12", HEAD_IP))
    bad = write_env(tmp_path, text)
    assert check_env(bad, "3.73-vision", "--host-root", str(host_root), "--print") == 2
    out, err = capsys.readouterr()
    lines = out.splitlines()
    first = next(n for n, line in enumerate(lines) if ": error: " in line)
    assert lines[first:first + 2] == [
        f"{bad}:{line_of(text, 'VLLM_HOST_IP=')}: error: worker NODE_RANK=1 has "
        f"VLLM_HOST_IP={HEAD_IP}, which is MASTER_ADDR, the head's address "
        "[worker-has-head-address]",
        "  -> this is the head's .env copied to a worker, which then tries to bind the head's "
        "fabric address; give each node its own .env with its own VLLM_HOST_IP"]
    # the reference's MODEL_HOST_PATH is not on this host: said first, then the error
    skipped, error = err.split("\n", 1)
    assert skipped.startswith("check-env: the model checks were skipped: MODEL_HOST_PATH=")
    assert error.startswith(f"sparkbake: error: {bad}: 1 preflight error(s) for "
                            "production-3.73-vision\n  -> fix them")


def test_warnings_are_printed_and_the_exit_is_0(
        tmp_path: Path, own_config: Path, host_root: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    text = (ENV_DIR / "head.env").read_text()
    env = write_env(tmp_path, text + "KV_CACHE_MEMORY_BYTES=26000000000\n")
    kv_line, last = line_of(text, "KV_CACHE_MEMORY_BYTES="), len(text.splitlines()) + 1
    assert check_env(env, "textonly", "--host-root", str(host_root), config=own_config) == 0
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if not line.startswith("  -> ")]
    assert lines == [
        f"{env}:{last}: warning: KV_CACHE_MEMORY_BYTES is set again (first on line {kv_line}) "
        "[repeated-variable]",
        f"{env}:{last}: warning: KV_CACHE_MEMORY_BYTES=26000000000 pins the KV pool under "
        "DCP_SIZE=2 [kv-cache-pinned-under-dcp]",
        f"{env}:{line_of(text, 'VLLM_DSV4_DCP_PREFIX_CACHE=')}: warning: "
        "VLLM_DSV4_DCP_PREFIX_CACHE=1 on a tag without the prefix-cache series "
        "[prefix-cache-without-series]"]
    assert "passes for textonly (3 warning(s))" in err


def test_the_tags_env_lies_under_the_file(
        tmp_path: Path, own_config: Path, host_root: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, "MODEL=/m DCP_SIZE=2 TP_SIZE=2 SPARK_NOTE=y\n")
    assert check_env(env, "gathered", "--host-root", str(host_root), config=own_config) == 0
    capsys.readouterr()
    assert check_env(env, "bare", "--host-root", str(host_root), config=own_config) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"{env}:1: error: images are allowed (LIMIT_MM_IMAGES=4) under "
                          "DCP_SIZE=2, but VLLM_DSV4_CKV_GATHER=0")
    fixed = write_env(tmp_path, "MODEL=/m DCP_SIZE=2 VLLM_DSV4_CKV_GATHER=1\n", "fixed.env")
    assert check_env(fixed, "bare", "--host-root", str(host_root), config=own_config) == 0


def test_the_tags_series_decide_the_prefix_cache_rules(
        tmp_path: Path, own_config: Path, host_root: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, "MODEL=/m DCP_SIZE=2 ENABLE_PREFIX_CACHING=1\n")
    assert check_env(env, "gathered", "--host-root", str(host_root), config=own_config) == 0
    assert "[prefix-cache-inert]" in capsys.readouterr().out
    # DSpark with no count of drafted tokens: vLLM's speculative config refuses it
    env.write_text(env.read_text() + "NUM_SPECULATIVE_TOKENS=\n")
    assert check_env(env, "textonly", "--host-root", str(host_root), config=own_config) == 2
    out = capsys.readouterr().out
    assert "[prefix-cache-inert]" not in out
    assert "error: VLLM_ENABLE_DSPARK=1 but NUM_SPECULATIVE_TOKENS is unset" in out


def test_host_sysctls_are_read_from_the_host_root(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host_root = write_sysctls(tmp_path / "sys", swappiness=60)
    env = write_env(tmp_path, at_dcp_1((ENV_DIR / "head.env").read_text()))
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
    assert f"{env}: warning: host memory floor not applied: vm.swappiness=60 " \
           "(want <= 10) [host-memory-floor]" in capsys.readouterr().out


def test_a_bad_line_is_a_config_error_with_file_and_line(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, "MODEL=/m\nMASTER_ADDR=<head-fabric-ip>\n")
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.startswith(f"sparkbake: error: {env}:2: unquoted '<' (an unfilled <placeholder>?)")


def test_a_nul_byte_is_a_config_error_with_file_and_line(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, "MODEL=/m\nAPI_HOST=0.0\0.0.0\n")
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sparkbake: error: {env}:2: a NUL byte") and "Traceback" not in err


def test_numbers_out_of_range_are_one_line_errors_each(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, "MODEL=/m\nAPI_PORT=99999999999999999999\n"
                              "GPU_MEMORY_UTILIZATION=7.5\nMAX_MODEL_LEN=-5\n")
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 2
    out = capsys.readouterr().out
    for number, name in ((2, "API_PORT"), (3, "GPU_MEMORY_UTILIZATION"), (4, "MAX_MODEL_LEN")):
        [line] = [line for line in out.splitlines() if line.startswith(f"{env}:{number}: ")]
        assert line.startswith(f"{env}:{number}: error: {name}=") and "[bad-value]" in line


def test_a_value_longer_than_the_kernel_takes_is_one_error_at_its_line(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    most = "x" * (131072 - len("SERVE_NOTE=") - 1)  # NAME=VALUE and its NUL: 131072 bytes
    subprocess.run(["true"], env={"SERVE_NOTE": most}, check=True)
    with pytest.raises(OSError, match="Argument list too long"):
        subprocess.run(["true"], env={"SERVE_NOTE": most + "x"}, check=True)
    env = write_env(tmp_path, f"MODEL=/m\nSERVE_NOTE={most}\n")
    assert check_env(env, "cpu-3.73", "--host-root", str(host_root)) == 0
    capsys.readouterr()
    env = write_env(tmp_path, f"MODEL=/m\nSERVE_NOTE={'x' * 300_000}\n")
    assert check_env(env, "cpu-3.73", "--host-root", str(host_root)) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"{env}:2: error: SERVE_NOTE is 300012 bytes as NAME=VALUE (with its NUL), more than "
        "the 131072 the kernel takes for one string of a process's environment "
        "[value-too-long]",
        "  -> Linux starts no process with a longer string in its environment or arguments "
        "(MAX_ARG_STRLEN, 32 pages of 4 KiB): the container stops before the entrypoint runs, "
        "with 'argument list too long'; shorten the value, or put what it holds in a file the "
        "container mounts"]
    assert err.splitlines()[-2:] == [
        f"sparkbake: error: {env}: 1 preflight error(s) for cpu-3.73",
        "  -> fix them: the image's entrypoint refuses to start vllm with them"]


def test_a_gid_index_is_a_number_or_auto(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for good in ("3", "0", "auto"):
        env = write_env(tmp_path, f"MODEL=/m\nIB_GID_INDEX={good}\n")
        assert check_env(env, "cpu-3.73", "--host-root", str(host_root)) == 0
    capsys.readouterr()
    for bad in ("abc", "-1", "3 # the RoCE v2 one"):
        env = write_env(tmp_path, f"MODEL=/m\nIB_GID_INDEX='{bad}'\n")
        assert check_env(env, "cpu-3.73", "--host-root", str(host_root)) == 2
        assert capsys.readouterr().out.splitlines()[0] == (
            f"{env}:2: error: IB_GID_INDEX={bad!r} is not an integer at least 0 or auto "
            "[bad-value]")


def test_a_long_bad_value_is_quoted_short(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, f"MODEL=/m\nMAX_MODEL_LEN={'9' * 200}x\n")
    assert check_env(env, "cpu-3.73", "--host-root", str(host_root)) == 2
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{env}:2: error: MAX_MODEL_LEN={'9' * 60!r}... (201 characters) is not an integer "
        "at least 1 [bad-value]")


@pytest.mark.parametrize(("args", "message"), [
    (["--tag", "9.99-nothing"], "no tag '9.99-nothing'"),
    ([], "the following arguments are required: --tag"),
])
def test_usage_errors_exit_2(args: list[str], message: str, host_root: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--config", str(VERSIONS), "check-env", str(ENV_DIR / "head.env"), *args]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_missing_env_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_env(tmp_path / "none.env", "3.73-vision") == 2
    assert "cannot read" in capsys.readouterr().err


def test_images_under_dcp_on_a_tag_that_runs_dcp_but_not_images_are_refused(
        tmp_path: Path, own_config: Path, host_root: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, "MODEL=/m TP_SIZE=2 DCP_SIZE=2\n")
    assert check_env(env, "dcp2", "--host-root", str(host_root), config=own_config) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"{env}: error: images are allowed (LIMIT_MM_IMAGES=4) under DCP_SIZE=2, which this "
        "image cannot serve [images-under-dcp-unsupported]",
        "  -> no gather on this path; set LIMIT_MM_IMAGES=0 or DCP_SIZE=1"]
    assert err.split("\n", 1)[1].startswith(
        f"sparkbake: error: {env}: 1 preflight error(s) for dcp2\n")
    text_only = write_env(tmp_path, "MODEL=/m TP_SIZE=2 DCP_SIZE=2 LIMIT_MM_IMAGES=0\n", "t.env")
    assert check_env(text_only, "dcp2", "--host-root", str(host_root), config=own_config) == 0
    four = write_env(tmp_path, "MODEL=/m TP_SIZE=4 DCP_SIZE=4 LIMIT_MM_IMAGES=0\n", "4.env")
    assert check_env(four, "dcp2", "--host-root", str(host_root), config=own_config) == 2
    assert "DCP_SIZE=4, but this image runs DeepSeek-V4 at DCP sizes 1, 2 only" in \
        capsys.readouterr().out


def test_an_unknown_backend_is_two_lines_and_exit_2(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = at_dcp_1((ENV_DIR / "head.env").read_text()).replace(
        "LINEAR_BACKEND=deep_gemm", "LINEAR_BACKEND=cutlas")
    env = write_env(tmp_path, text)
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 2
    out = capsys.readouterr().out.splitlines()
    at = out.index(f"{env}:{line_of(text, 'ATTENTION_BACKEND=')}: error: LINEAR_BACKEND=cutlas "
                   "is not among the linear backends of this image's vLLM 0.33.0 "
                   "[unknown-backend]")
    assert out[at + 1].startswith("  -> vllm serve stops before it loads anything; its linear "
                                  "backends: auto, cutlass, ")


def test_flashmla_on_a_spark_tag_is_refused_with_the_backend_that_can(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = at_dcp_1((ENV_DIR / "head.env").read_text()).replace(
        "ATTENTION_BACKEND=FLASHINFER_MLA_SPARSE_DSV4", "ATTENTION_BACKEND=FLASHMLA_SPARSE_DSV4")
    env = write_env(tmp_path, text)
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 2
    out = capsys.readouterr().out.splitlines()
    at = out.index(f"{env}:{line_of(text, 'ATTENTION_BACKEND=')}: error: ATTENTION_BACKEND="
                   "FLASHMLA_SPARSE_DSV4 cannot run deepseek_v4 on this image's GPU (12.1a): "
                   "DeepSeek-V4 takes FLASHMLA_SPARSE_DSV4 for it, which does not run on compute "
                   "capability 12.1 [backend-cannot-run]")
    assert out[at + 1] == ("  -> vLLM's own checks for this GPU and model say so (smoke check "
                           "backend-capability); the attention backends that can: "
                           "FLASHINFER_MLA_SPARSE_DSV4, auto")


def test_a_misspelt_capability_in_versions_yaml_is_exit_2_with_its_line(
        tmp_path: Path, own_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = own_config.read_text().replace("      dcp_sizes: [1, 2]", "      dcp_size: [1, 2]")
    own_config.write_text(text)
    assert check_env(ENV_DIR / "head.env", "dcp2", config=own_config) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"sparkbake: error: {own_config}:{line_of(text, '      dcp_size:')}: unknown key "
        "'dcp_size' in capabilities (did you mean 'dcp_sizes'?)",
        "  -> allowed keys: dcp_sizes, images_under_dcp, prefix_cache_under_dcp, speculative, "
        "ckv_gather, vision_mhc, model, device_memory_gib, because"]


def test_the_model_on_this_host_is_read_from_model_host_path(
        tmp_path: Path, host_root: Path, declared_memory: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, f"MODEL=/model\nMODEL_HOST_PATH={DSV4}\nTP_SIZE=1\n"
                              "GPU_MEMORY_UTILIZATION=0.75\nNUM_SPECULATIVE_TOKENS=6\n"
                              "LIMIT_MM_IMAGES=0\n")  # the text checkpoint
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == (
        f"{env}:4: error: vLLM will not start: the head has nothing (76.7 GiB short) of KV "
        "room for one request of 1048576 tokens, which needs 5.4 GiB (121.7 GiB, the tag's "
        "device_memory_gib: 121.7, what cudaMemGetInfo reports, x GPU_MEMORY_UTILIZATION=0.75 "
        "= 91.3 GiB, less a non-KV share of ~168.0 GiB: weights 148.0, activations 2.8, graphs "
        "2.0, runtime 13.2, API server 2.0) [memory-budget]")
    assert err.startswith(f"sparkbake: error: {env}: 1 preflight error(s) for "
                          "production-3.73-vision")
    four = write_env(tmp_path, env.read_text().replace("TP_SIZE=1", "TP_SIZE=4"), "4.env")
    assert check_env(four, "3.73-vision", "--host-root", str(host_root)) == 0  # 24 GiB unasked
    assert capsys.readouterr().out == (
        f"{four}: memory: head: 121.7 GiB (the tag's device_memory_gib: 121.7, what "
        "cudaMemGetInfo reports) x 0.75 = 91.3 GiB; non-KV 56.7 GiB (weights 37.0, activations "
        "2.5, graphs 2.0, runtime 13.2, API server 2.0); KV room 34.5 GiB: KV cache size "
        "6,704,652 tokens, 6.39x requests of 1,048,576 at once\n")
    assert check_env(four, "3.73-vision", "--host-root", str(host_root), "--json") == 0
    [numbers] = json.loads(capsys.readouterr().out)["memory"]
    assert (numbers["role"], numbers["kv_tokens"], numbers["starts"]) == ("head", 6_704_652, True)


def test_a_model_without_an_index_is_a_warning_at_its_host_path(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(DSV4 / "config.json", folder)
    env = write_env(tmp_path, f"MODEL=/m\nNUM_SPECULATIVE_TOKENS=6\nMODEL_HOST_PATH={folder}\n")
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{env}:3: warning: the model in {folder} has no model.safetensors.index.json: whether "
        "its weights fit in GPU memory is not checked [model-index-missing]")


def test_a_model_host_path_that_is_not_a_folder_here_is_not_read(
        tmp_path: Path, host_root: Path, declared_memory: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    for host_path in (tmp_path / "nowhere", tmp_path / "file"):
        env = write_env(tmp_path, f"MODEL=/model\nMODEL_HOST_PATH={host_path}\nTP_SIZE=1\n"
                                  "GPU_MEMORY_UTILIZATION=0.75\nNUM_SPECULATIVE_TOKENS=6\n")
        assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
        assert capsys.readouterr().out == ""


def test_a_hugging_face_cache_folder_is_read_at_the_snapshot_refs_main_names(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "models--deepseek-ai--DeepSeek-V4-Flash"
    snapshot = cache / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (cache / "snapshots" / "old").mkdir()
    shutil.copy(DSV4 / "config.json", snapshot)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("0123abcd\n")
    env = write_env(tmp_path, f"MODEL=/m\nNUM_SPECULATIVE_TOKENS=6\nMODEL_HOST_PATH={cache}\n")
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == (
        f"{env}:3: warning: the model in {snapshot} has no model.safetensors.index.json: "
        "whether its weights fit in GPU memory is not checked [model-index-missing]")
    assert "skipped" not in err
    (cache / "refs" / "main").write_text("fedcba98\n")  # a revision not downloaded here
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
    out, err = capsys.readouterr()
    assert "[model-index-missing]" not in out
    assert err.splitlines()[0] == (
        f"check-env: the model checks were skipped: no config.json in {cache} (a Hugging "
        "Face cache folder whose refs/main names no snapshot here); set MODEL_HOST_PATH to "
        "the model's folder on this host (or its Hugging Face cache folder)")


def test_model_over_a_hugging_face_cache_folder_is_refused_naming_the_snapshot(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "models--deepseek-ai--DeepSeek-V4-Flash"
    snapshot = cache / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    shutil.copy(DSV4 / "config.json", snapshot)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("0123abcd\n")
    env = write_env(tmp_path, f"MODEL=/model\nNUM_SPECULATIVE_TOKENS=6\nMODEL_HOST_PATH={cache}\n")
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 2
    assert capsys.readouterr().out.splitlines()[:2] == [
        f"{env}:1: error: MODEL=/model is a Hugging Face cache folder ({cache}: snapshots/ and "
        "no config.json), not a model's folder [model-is-cache-folder]",
        "  -> vllm reads config.json where MODEL points and stops at start without one; set "
        "MODEL=/model/snapshots/0123abcd (the revision refs/main names), and keep the cache "
        "folder mounted: a snapshot's files are links into its blobs/"]
    env.write_text(env.read_text().replace("MODEL=/model\n", "MODEL=/model/snapshots/0123abcd\n"))
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
    assert capsys.readouterr().out.splitlines()[0] == (  # the snapshot's model is read
        f"{env}:3: warning: the model in {snapshot} has no model.safetensors.index.json: "
        "whether its weights fit in GPU memory is not checked [model-index-missing]")


def test_check_env_says_why_the_model_checks_were_skipped(
        tmp_path: Path, host_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = write_env(tmp_path, "MODEL=/m\nNUM_SPECULATIVE_TOKENS=6\n")
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
    assert "the model checks were skipped: MODEL_HOST_PATH is not set" in \
        capsys.readouterr().err
    env.write_text(env.read_text() + f"MODEL_HOST_PATH={tmp_path / 'nowhere'}\n")
    assert check_env(env, "3.73-vision", "--host-root", str(host_root)) == 0
    assert f"skipped: MODEL_HOST_PATH={tmp_path / 'nowhere'} is not a folder on this host" \
        in capsys.readouterr().err
