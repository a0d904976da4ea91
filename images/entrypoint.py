"""sparkbake image entrypoint.

With arguments, it runs exactly them: no env-derived flag is ever added. Without, it builds
`vllm serve` from the environment (see STEPS and README "Entrypoint"), runs the preflight
checks of preflight.py (SPARKBAKE_PREFLIGHT=0 skips them) and execs it; errors refuse the
start with exit status 2. Arguments that are only flags (a launcher's, appended to the
entrypoint: see launcher_flags) are taken as the environment's, then the same. `--print`
shows the command instead of running it.
Standard library only, Python >= 3.10: this file is copied into the image, with
preflight.py, model_checks.py and preflight.json beside it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
MANIFEST = "/opt/sparkbake/manifest.json"
PREFIX = "sparkbake preflight: "

Env = Mapping[str, str]
Step = tuple[tuple[str, ...], Callable[[Env], list[str]]]  # (variables read, flags made)

# Defaults for the DeepSeek-V4 family this image serves; set a variable empty to drop its flag.
DEFAULTS = {
    "API_HOST": "0.0.0.0",
    "TOKENIZER_MODE": "deepseek_v4",
    "TOOL_CALL_PARSER": "deepseek_v4",
    "REASONING_PARSER": "deepseek_v4",
    "DEFAULT_THINKING": "1",
    "LIMIT_MM_IMAGES": "4",
}


def _sibling(name: str) -> ModuleType:
    """preflight.py from this file's folder, whether in the image or in a checkout."""
    module_name = f"sparkbake_image_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


checks = _sibling("preflight")
fabric = _sibling("fabric")


def _on(env: Env, name: str) -> bool:
    return bool(env.get(name)) and bool(checks.convert("bool", env[name]))


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def fixed(*flags: str) -> Step:
    return (), lambda env: list(flags)


def value(name: str, flag: str) -> Step:
    return (name,), lambda env: [flag, env[name]] if env.get(name) else []


def switch(name: str, on: list[str], off: list[str]) -> Step:
    return (name,), lambda env: (on if _on(env, name) else off) if env.get(name) else []


def head_only(step: Step) -> Step:
    """A step for the API server's options: the head's alone, since a headless worker
    starts no server (vLLM's FrontendArgs)."""
    names, render = step
    return names, lambda env: [] if checks.is_worker(env) else render(env)


def headless(env: Env) -> list[str]:
    """Every rank but 0 runs headless: without it vLLM starts an API server on the node, and
    its executor, a follower, asserts at the first collective_rpc (vllm/entrypoints/cli/
    serve.py)."""
    return ["--headless"] if checks.is_worker(env) else []


def compilation_config(env: Env) -> list[str]:
    config: dict[str, Any] = {}
    if env.get("VLLM_CUDAGRAPH_MODE"):
        config["cudagraph_mode"] = env["VLLM_CUDAGRAPH_MODE"]
    config["custom_ops"] = ["all"]
    if env.get("CUDAGRAPH_CAPTURE_SIZES"):
        config["cudagraph_capture_sizes"] = checks.convert("intlist",
                                                           env["CUDAGRAPH_CAPTURE_SIZES"])
    return ["--compilation-config", _json(config)]


def tool_parser(env: Env) -> list[str]:
    parser = env.get("TOOL_CALL_PARSER")
    return ["--tool-call-parser", parser, "--enable-auto-tool-choice"] if parser else []


def reasoning(env: Env) -> list[str]:
    parser = env.get("REASONING_PARSER")
    if not parser:
        return []
    config = {"reasoning_parser": parser, "reasoning_start_str": "", "reasoning_end_str": ""}
    return ["--reasoning-parser", parser, "--reasoning-config", _json(config)]


def speculative_config(env: Env) -> list[str]:
    if not _on(env, "VLLM_ENABLE_DSPARK"):
        return []
    config: dict[str, Any] = {"method": "dspark"}
    if env.get("NUM_SPECULATIVE_TOKENS"):
        config["num_speculative_tokens"] = checks.convert("int", env["NUM_SPECULATIVE_TOKENS"])
    if env.get("DSPARK_DRAFT_SAMPLE_METHOD"):
        config["draft_sample_method"] = env["DSPARK_DRAFT_SAMPLE_METHOD"]
    return ["--speculative-config", _json(config)]


def mm_limits(env: Env) -> list[str]:
    if not env.get("LIMIT_MM_IMAGES"):
        return []
    return ["--limit-mm-per-prompt", json.dumps({"image": checks.convert("int",
                                                                         env["LIMIT_MM_IMAGES"])})]


def extra_args(env: Env) -> list[str]:
    return list(checks.convert("args", env.get("SERVE_EXTRA_ARGS", "")))


# The order of the reference deployment's command line; each step reads the variables named.
# A worker's command is the head's with --headless and without the API server's options, so
# every node builds the same engine configuration.
STEPS: tuple[Step, ...] = (
    value("SERVED_MODEL_NAME", "--served-model-name"),
    head_only(value("API_HOST", "--host")),
    head_only(value("API_PORT", "--port")),
    fixed("--trust-remote-code", "--distributed-executor-backend", "mp"),
    value("NNODES", "--nnodes"),
    value("NODE_RANK", "--node-rank"),
    (("NNODES", "NODE_RANK"), headless),
    value("MASTER_ADDR", "--master-addr"),
    value("MASTER_PORT", "--master-port"),
    value("TP_SIZE", "--tensor-parallel-size"),
    value("DCP_SIZE", "--decode-context-parallel-size"),
    value("DCP_COMM_BACKEND", "--dcp-comm-backend"),
    value("ATTENTION_BACKEND", "--attention-backend"),
    value("MOE_BACKEND", "--moe-backend"),
    value("LINEAR_BACKEND", "--linear-backend"),
    fixed("--kv-cache-dtype", "fp8", "--block-size", "256"),
    value("GPU_MEMORY_UTILIZATION", "--gpu-memory-utilization"),
    value("KV_CACHE_MEMORY_BYTES", "--kv-cache-memory-bytes"),
    value("MAX_MODEL_LEN", "--max-model-len"),
    value("MAX_NUM_SEQS", "--max-num-seqs"),
    value("MAX_NUM_BATCHED_TOKENS", "--max-num-batched-tokens"),
    value("LONG_PREFILL_TOKEN_THRESHOLD", "--long-prefill-token-threshold"),
    value("MAX_CUDAGRAPH_CAPTURE_SIZE", "--max-cudagraph-capture-size"),
    (("VLLM_CUDAGRAPH_MODE", "CUDAGRAPH_CAPTURE_SIZES"), compilation_config),
    fixed("--async-scheduling", "--no-scheduler-reserve-full-isl", "--enable-chunked-prefill"),
    switch("ENABLE_PREFIX_CACHING", ["--enable-prefix-caching"], ["--no-enable-prefix-caching"]),
    value("TOKENIZER_MODE", "--tokenizer-mode"),
    head_only((("TOOL_CALL_PARSER",), tool_parser)),
    (("REASONING_PARSER",), reasoning),
    head_only(switch("DEFAULT_THINKING", ["--default-chat-template-kwargs.thinking=true"],
                     ["--default-chat-template-kwargs.thinking=false"])),
    (("VLLM_ENABLE_DSPARK", "NUM_SPECULATIVE_TOKENS", "DSPARK_DRAFT_SAMPLE_METHOD"),
     speculative_config),
    fixed("--disable-chunked-mm-input"),
    (("LIMIT_MM_IMAGES",), mm_limits),
    (("SERVE_EXTRA_ARGS",), extra_args),
)
VARIABLES = tuple(dict.fromkeys(("MODEL", *(name for names, _ in STEPS for name in names))))


def effective_env(env: Env) -> dict[str, str]:
    """The environment with the family's defaults under it. RANK, the reference deployment's
    name for the node's rank, stands for NODE_RANK where that is unset (the preflight's
    rank-names-disagree refuses the two at different values)."""
    alias = {"NODE_RANK": env["RANK"]} if env.get("RANK") and not env.get("NODE_RANK") else {}
    return {**DEFAULTS, **env, **alias}


def serve_command(env: Env) -> list[str]:
    """`vllm serve MODEL ...` from the environment; ValueError on a value of the wrong type."""
    env = effective_env(env)
    if not env.get("MODEL"):
        raise SystemExit("sparkbake: set MODEL to the model's path in the container "
                         "(or pass a command); see --print")
    cmd = ["vllm", "serve", env["MODEL"]]
    for _, render in STEPS:
        cmd += render(env)
    return cmd


def value_flags() -> dict[str, str]:
    """Each flag a variable makes with its value as the next argument: --port -> API_PORT."""
    probe = "\0"
    found: dict[str, str] = {}
    for names, render in STEPS:
        try:
            made = render({names[0]: probe}) if len(names) == 1 else []
        except ValueError:  # a typed variable's step: not a plain value
            continue
        if len(made) == 2 and made[1] == probe:
            found[made[0]] = names[0]
    return found


def launcher_flags(argv: list[str], env: Env) -> tuple[dict[str, str], list[str]]:
    """The environment with the flags a launcher appended to the entrypoint, and the flags
    left to append to the command. A flag a variable makes sets that variable (sparkrun
    appends --served-model-name and, across nodes, --nnodes, --node-rank, --master-addr and
    --master-port), so the preflight checks its value and the command has it once;
    --headless is the entrypoint's own on a worker; any other flag is kept, in order."""
    known, given, kept = value_flags(), dict(env), []
    rest = list(argv)
    while rest:
        flag = rest.pop(0)
        name, _, inline = flag.partition("=")
        if name in known and (inline or rest):
            given[known[name]] = inline or rest.pop(0)
        else:
            kept.append(flag)
    if "--headless" in kept and checks.is_worker(effective_env(given)):
        kept.remove("--headless")
    return given, kept


def read_manifest(env: Env) -> dict[str, Any] | None:
    try:
        with open(env.get("SPARKBAKE_MANIFEST") or MANIFEST, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def image_facts(manifest: Mapping[str, Any] | None) -> Any:
    """What the preflight knows of this image: the installed vLLM's version (without its
    local part), which modules the backends need are importable (found, not imported), and
    the capabilities and CUDA arch the manifest declares."""
    modules = frozenset(m for m in checks.backend_modules(checks.load_rules())
                        if importlib.util.find_spec(m) is not None)
    try:
        vllm: str | None = importlib.metadata.version("vllm").split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        vllm = None
    return checks.Image(vllm=vllm, modules=modules,
                        capabilities=(manifest or {}).get("capabilities"),
                        cuda_arch=(manifest or {}).get("cuda_arch"))


def preflight(env: Env) -> int:
    """Print the findings of the checks on stderr; 2 when one is an error, else 0."""
    if env.get("SPARKBAKE_PREFLIGHT", "1").strip().lower() in checks.FALSE:
        print(f"{PREFIX}skipped (SPARKBAKE_PREFLIGHT={env['SPARKBAKE_PREFLIGHT']})",
              file=sys.stderr)
        return 0
    manifest = read_manifest(env)
    if manifest is None:
        print(f"{PREFIX}warning: no image manifest; the checks of the tag's series are skipped",
              file=sys.stderr)
    series = [s["name"] for s in manifest.get("series", [])] if manifest else None
    node = effective_env(env)
    args: dict[str, Any] = dict(series=series, image=image_facts(manifest),
                                host_root=env.get("SPARKBAKE_HOST_ROOT") or "/",
                                model_dir=env.get("MODEL") or None)
    findings = checks.check(node, known=(manifest or {}).get("env", {}), **args)
    for finding in findings:
        print(finding.lines(PREFIX), file=sys.stderr)
    errors = checks.errors(findings)
    if errors:
        print(f"{PREFIX}refusing to start vllm: {len(errors)} error(s); fix the environment, "
              "or set SPARKBAKE_PREFLIGHT=0 to skip these checks", file=sys.stderr)
        return 2
    print_memory(node, args)
    return 0


def print_memory(node: Env, args: dict[str, Any]) -> None:
    """This node's memory figures, before vLLM logs its own (memory_budget.line)."""
    role = "head" if node.get("NODE_RANK", node.get("RANK", "0")) in ("", "0") else "worker"
    context = checks.context(node, checks.load_rules(), **args)
    for numbers in checks.memory(context):
        if numbers["role"] == role:
            print(f"{PREFIX}memory: {checks.model_checks.memory_budget.line(numbers)}",
                  file=sys.stderr)


def describe_image(env: Env) -> int:
    manifest = read_manifest(env)
    if manifest is None:
        print("sparkbake: no image manifest here; set MODEL to see the serve command")
    else:
        print(f"{manifest['image']} (inputs {manifest['inputs'][:12]}); set MODEL to serve")
    return 0


def bypassed(cmd: list[str], env: Env) -> list[str]:
    """The set variables a given `vllm serve` command leaves unread: without arguments each
    would have made a flag (the image bakes some, e.g. VLLM_ENABLE_DSPARK)."""
    if cmd[:2] != ["vllm", "serve"]:
        return []
    return [name for name in VARIABLES if env.get(name)]


def main(argv: list[str]) -> int:
    show = argv[:1] == ["--print"]
    cmd = argv[1:] if show else argv
    env = dict(os.environ)
    if not cmd or cmd[0].startswith("-"):  # none, or a launcher's flags: the env's command
        if show and not cmd and not env.get("MODEL"):
            return describe_image(env)
        env, appended = launcher_flags(cmd, env)
        status = preflight(env)
        if status:
            return status
        try:
            cmd = serve_command(env) + appended
        except ValueError as exc:
            print(f"sparkbake: {exc}; see `sparkbake check-env`", file=sys.stderr)
            return 2
    elif unread := bypassed(cmd, env):
        print(f"sparkbake: warning: arguments were given, so {', '.join(unread)} make no "
              "flags; pass the flags themselves, or no arguments (see --print)", file=sys.stderr)
    if show:
        print(shlex.join(cmd))
        return 0
    failed = fabric.resolve_gid_index(env)
    if failed:
        print(failed, file=sys.stderr)
        return 2
    os.execvpe(cmd[0], cmd, env)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
