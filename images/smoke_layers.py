"""layer-weights: DeepSeek-V4 built by the image's vLLM as the head node's command asks, one
rank's shard, its weights loaded and processed, each weight a forward reads checked.

The model is a config.json (the suite's model/config.json, or --model's), cut to its first
LAYERS layers, the DSpark draft's target layers moved onto the last of them. vLLM's own loader
builds it with dummy weights (`get_model`: the model classes, their quantization methods and
the kernels vLLM selects for the command's backends), then the draft (`load_dspark_model`),
on PyTorch's meta device: every shape is computed, no weight is allocated. vLLM's platform
reports the tag's GPU, as for backend-capability, and Model Runner V2, which a GPU's active
Triton gives. A rank's shard at TP 4 is built in one process whose tensor-parallel group
reports 4 ranks, this one the first.

vLLM's loader then processes each layer's weights (`process_weights_after_loading`) as it
does after a load; here each layer on its own, so that a call that needs the GPU stops that
layer only, and is named. The pure layout transforms of STAND_INS keep their input's shape
instead. Last, every weight a DeepSeek-V4 forward reads outside its layer's own kernel is
held to what that forward reads (CONTRACTS): `attn.wo_a`, a batched-matmul layer, is read by
DeepGEMM's `fp8_einsum("bhr,hdr->bhd")` in the output projection as 3-D groups.

As a script: `smoke_layers.py CUDA_ARCH CONFIG_JSON LAYERS TP[,TP...] COMMAND` prints one JSON
document: per TP, the layers by kind (count, quantization method, kernel, the vLLM functions
their processing reached, what stood in, where it stopped, what is wrong). Standard library
plus the image's vLLM and torch; mounted beside smoke_check.py, never baked.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, SimpleNamespace, TracebackType
from typing import Any

import smoke_backends
from smoke_common import CheckFailed, CheckSkipped, Image, one_line

TIMEOUT = 1800  # seconds: importing vLLM and building the model twice under emulation
LAYERS = 4  # the first layers of DeepSeek-V4 hold every kind it has (serve.env says which)
TP_SIZES = (1, 4)  # one Spark, and the reference layout's four
STAND_INS = {
    "deep_gemm::transform_sf_into_required_layout":
        "DeepGEMM's layout of the weight scales for the GPU (CUDA only): its output keeps its "
        "input's shape here, so the scales' packing is not checked, their rank is",
}
GPU_ONLY = ("CUDA driver is a stub library", "Meta tensors", "meta tensor", "'Meta' backend",
            "no fake impl", "CUDA error", "is not available on the meta device")
TRACED = ("vllm.model_executor", "vllm.models", "vllm.utils.deep_gemm", "vllm.utils.b12x",
          "b12x", "deep_gemm", "flashinfer")
REACHED_MAX = 60  # functions kept per kind, in the order first called


@dataclass
class Kind:
    """The layers of one kind: their names with the layer numbers taken out."""

    name: str
    count: int = 0
    method: str = ""
    kernel: str = ""
    reached: list[str] = field(default_factory=list)
    stood_in: set[str] = field(default_factory=set)
    stopped: str = ""
    problems: list[str] = field(default_factory=list)
    checked: int = 0  # layers held to what their forward reads
    unchecked: list[str] = field(default_factory=list)  # stopped before they could be

    def record(self) -> dict[str, Any]:
        return {"kind": self.name, "count": self.count, "method": self.method,
                "kernel": self.kernel, "reached": self.reached,
                "stood_in": sorted(self.stood_in), "stopped": self.stopped,
                "checked": self.checked, "unchecked": self.unchecked,
                "problems": self.problems}


class Layers:
    """What the processing of one model's layers did, by kind."""

    def __init__(self, hash_layers: int, draft: bool) -> None:
        self.hash_layers = hash_layers
        self.draft = draft
        self.kinds: dict[str, Kind] = {}
        self.stopped: dict[int, str] = {}  # id(module) -> where its processing stopped

    def kind(self, name: str) -> Kind:
        layer = kind_name(name, self.hash_layers, self.draft)
        return self.kinds.setdefault(layer, Kind(layer))


def kind_name(name: str, hash_layers: int, draft: bool) -> str:
    """`language_model.model.layers.7.attn.wo_a` -> `attn.wo_a`; the MoE parts of the first
    hash_layers layers (routed by token id) and of the rest (by score) as kinds of their
    own; the draft's as `draft ...`."""
    parts = name.split(".")
    numbers = [int(part) for part in parts if part.isdigit()]
    rest = ".".join(part for part in parts if not part.isdigit())
    for prefix in ("language_model.", "model.", "layers."):
        rest = rest.removeprefix(prefix)
    if draft:
        return f"draft {rest}"
    if numbers and rest.startswith("ffn."):
        return f"{rest} ({'hash-routed' if numbers[0] < hash_layers else 'score-routed'})"
    return rest


# --- vLLM, told the GPU ------------------------------------------------------------------


def prepare(major: int, minor: int) -> None:
    """vLLM's platform: the tag's GPU, allocating on the meta device; placeholders for the
    CUDA streams and events the model keeps for its forward; the stand-ins registered."""
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"  # DSpark needs it; a GPU's Triton picks it
    smoke_backends.use_gpu(major, minor)
    import torch
    import vllm.platforms

    type(vllm.platforms.current_platform).device_type = "meta"

    class Placeholder:  # built in __init__, used by the forward only
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    torch.cuda.Stream = Placeholder
    torch.cuda.Event = Placeholder
    torch.cuda.is_current_stream_capturing = lambda: False  # nothing is captured here
    smoke_backends.import_model("deepseek_v4")
    smoke_backends.torch_reports(major, minor)
    from vllm.utils import deep_gemm

    deep_gemm._lazy_init()  # registers DeepGEMM's operators
    for op in STAND_INS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
            torch.library.register_fake(op)(functools.partial(_same_shape, op))


def _same_shape(op: str, tensor: Any, *args: Any, **kwargs: Any) -> Any:
    """The stand-in of op (a layout transform): a tensor of its input's shape."""
    import torch

    return torch.empty_like(tensor)


def cut_config(config: dict[str, Any], layers: int, folder: Path) -> Path:
    """config.json with the first `layers` layers, per-layer lists cut to them (a list with
    an entry per MTP layer too keeps those), the draft's target layers the last kept."""
    fields = config.get("text_config") if "num_hidden_layers" not in config else config
    if not isinstance(fields, dict) or type(fields.get("num_hidden_layers")) is not int:
        raise ValueError("the config has no num_hidden_layers")
    total, mtp = fields["num_hidden_layers"], int(fields.get("num_nextn_predict_layers") or 0)
    for name, value in list(fields.items()):
        if isinstance(value, list) and len(value) == total:
            fields[name] = value[:layers]
        elif isinstance(value, list) and mtp and len(value) == total + mtp:
            fields[name] = value[:layers] + value[total:]
    targets = fields.get("dspark_target_layer_ids")
    if isinstance(targets, list) and targets:
        fields["dspark_target_layer_ids"] = list(range(layers))[-len(targets):]
    fields["num_hidden_layers"] = layers
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def engine_config(command: str, model: Path, tp: int) -> Any:
    """The VllmConfig of `vllm serve` with this command, as the head of `tp` one-GPU nodes
    (vLLM's own parser and EngineArgs), on the cut model with dummy weights."""
    from smoke_vllm import Serve

    args = Serve().parse(command)
    args.model, args.tokenizer, args.skip_tokenizer_init = str(model), None, True
    args.load_format, args.tensor_parallel_size = "dummy", tp
    args.nnodes, args.node_rank, args.master_addr, args.headless = tp, 0, "127.0.0.1", False
    # the reasoning parser reads the tokenizer's vocabulary, which a weights-only build lacks
    args.served_model_name, args.reasoning_parser, args.reasoning_config = None, None, None
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs.from_cli_args(args).create_engine_config()


def one_rank_groups() -> None:
    """vLLM's process groups, each of this process alone, unless they are made already.
    Made under a config of one node: init_distributed_environment reads the current config,
    and under a layout of several nodes it would wait at master_addr for the others."""
    import torch.distributed
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    if torch.distributed.is_initialized():
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{port}")
        ensure_model_parallel_initialized(1, 1)


# --- each layer's processing ---------------------------------------------------------------


class Tracer:
    """The functions of TRACED modules that a call enters, in the order first entered."""

    def __init__(self) -> None:
        self.seen: dict[str, None] = {}
        self.stood_in: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        if frame.f_code is _same_shape.__code__:
            self.stood_in.add(str(frame.f_locals.get("op", "")))
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith(TRACED) and not frame.f_code.co_name.startswith("__"):
            self.seen.setdefault(f"{module}.{frame.f_code.co_qualname}", None)


def gpu_call(exc: BaseException) -> str:
    """Where a processing stopped for want of a GPU: the innermost vLLM frame and the error,
    or "" when the error is not of a missing GPU (a real failure)."""
    text = one_line(exc)
    if not isinstance(exc, NotImplementedError) and not any(s in text for s in GPU_ONLY):
        return ""
    return f"{innermost(exc.__traceback__)}: {text[:160]}"


def innermost(tb: TracebackType | None) -> str:
    where = "?"
    for frame, line in traceback.walk_tb(tb):
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith(("vllm", "b12x", "deep_gemm", "flashinfer")):
            where = f"{module}.{frame.f_code.co_qualname} (line {line})"
    return where


def recorded(layers: Layers, name: str, module: Any, process: Callable[..., Any]) -> Any:
    """process (a layer's process_weights_after_loading) run with its calls traced, and its
    end recorded: done, stopped for want of a GPU (named), or failed (a problem)."""
    def run(*args: Any, **kwargs: Any) -> None:
        kind, tracer = layers.kind(name), Tracer()
        sys.setprofile(tracer)
        try:
            process(*args, **kwargs)
        except Exception as exc:  # each layer's end is the finding, not the check's
            where = gpu_call(exc)
            layers.stopped[id(module)] = where or one_line(exc)
            if where:
                kind.stopped = kind.stopped or where
            else:
                kind.problems.append(f"{name}: its processing failed: {one_line(exc)[:240]}")
        finally:
            sys.setprofile(None)
        kind.reached += [f for f in tracer.seen if f not in kind.reached]
        kind.stood_in |= tracer.stood_in
        del kind.reached[REACHED_MAX:]
    return run


def process_layer_by_layer(layers: Layers) -> Callable[..., None]:
    """vLLM's process_weights_after_loading, each layer's step recorded on its own."""
    from vllm.model_executor.model_loader import utils

    original = utils.process_weights_after_loading

    def process(model: Any, model_config: Any, target_device: Any) -> None:
        for name, module in model.named_modules():
            method = getattr(module, "quant_method", None)
            kind = layers.kind(name)
            if method is None or not hasattr(method, "process_weights_after_loading"):
                continue
            kind.count += 1
            kind.method = type(method).__name__
            kind.kernel = kernel_of(method)
            method.process_weights_after_loading = recorded(
                layers, name, module, method.process_weights_after_loading)
        if hasattr(model, "process_weights_after_loading"):
            model.process_weights_after_loading = recorded(
                layers, "(model)", model, model.process_weights_after_loading)
        original(model, model_config, target_device)
    return process


def kernel_of(method: Any) -> str:
    """The kernel vLLM chose for a layer: a linear method's kernel, an MoE method's backend."""
    for attribute in ("fp8_linear", "kernel", "linear_kernel"):
        kernel = getattr(method, attribute, None)
        if kernel is not None and not isinstance(kernel, str | bool):
            return type(kernel).__name__
    backend = getattr(method, "mxfp4_backend", None) or getattr(method, "moe_backend", None)
    experts = getattr(method, "experts_cls", None)
    names = [str(getattr(backend, "name", backend or "")),
             getattr(experts, "__name__", "") if experts else ""]
    return " ".join(n for n in names if n)


# --- what each forward reads ---------------------------------------------------------------


def scale_of(module: Any) -> Any:
    return getattr(module, "weight_scale", None) if hasattr(module, "weight_scale") \
        else getattr(module, "weight_scale_inv", None)


def bmm_problem(module: Any) -> str:
    """A batched-matmul layer (DeepSeek-V4's attn.wo_a): the output projection reads an FP8
    weight with fp8_einsum("bhr,hdr->bhd") as (groups, rows, K), its scales 3-D too, and
    a 16-bit one as groups of its own view (torch.bmm); nothing else (deep_gemm_fp8_o_proj,
    vllm/models/deepseek_v4/nvidia/ops/o_proj.py)."""
    import torch

    weight = module.weight
    groups = int(module.bmm_batch_size)
    want = (groups, module.output_size_per_partition // groups, module.input_size_per_partition)
    if weight.dtype in (torch.bfloat16, torch.float16):
        return "" if weight.numel() == math.prod(want) else (
            f"its 16-bit weight {tuple(weight.shape)} does not view as {want}")
    if weight.dtype != torch.float8_e4m3fn:
        return (f"its weight is {weight.dtype} {tuple(weight.shape)}, the kernel's own format; "
                "the output projection reads FP8 groups (fp8_einsum) or 16-bit ones (torch.bmm)")
    if tuple(weight.shape) != want:
        return (f"its weight is {weight.dim()}-D {tuple(weight.shape)}, but the output "
                f"projection's fp8_einsum('bhr,hdr->bhd') reads it as 3-D {want} (groups, "
                "o_lora_rank, K)")
    scale = scale_of(module)
    if scale is None or scale.dim() != 3:
        shown = "missing" if scale is None else f"{scale.dim()}-D {tuple(scale.shape)}"
        return f"its weight scales are {shown}; fp8_einsum reads them 3-D, one set per group"
    return ""


def mm_problem(module: Any) -> str:
    """A layer whose weight the forward multiplies itself, as (N, K) in 16 bits: the
    compressors' fused_wkv_wgate (torch.mm with weight.T: attention.py in vLLM 0.33.0,
    compressor.py in 0.34.0) and the router gate (GateLinear, bf16_mega_gate)."""
    import torch

    weight, k = module.weight, getattr(module, "input_size", None)
    if weight.dim() != 2 or (k is not None and weight.shape[1] != k):
        return (f"its weight is {weight.dim()}-D {tuple(weight.shape)}; the forward "
                f"multiplies it as 2-D (N, {k})")
    if weight.dtype in (torch.float8_e4m3fn, torch.uint8):
        return f"its weight is {weight.dtype}; the forward multiplies it in 16 bits"
    return ""


BMM_SHAPE = (4096, 2048, 2)  # K, N and groups of DeepSeek-V4-Flash's attn.wo_a at TP 4


def wo_a_layer() -> tuple[type, dict[str, int]]:
    """The class the image's vLLM builds attn.wo_a with, and its own arguments: vLLM 0.34.0's
    DeepseekV4GroupedWoA (a ColumnParallelLinear that knows its groups), else (0.33.0) a
    plain ColumnParallelLinear."""
    try:
        from vllm.models.deepseek_v4.common.grouped_wo_a import DeepseekV4GroupedWoA
    except ImportError:
        from vllm.model_executor.layers.linear import ColumnParallelLinear
        return ColumnParallelLinear, {}
    return DeepseekV4GroupedWoA, {"n_groups": BMM_SHAPE[2]}


def bmm_verdict(kernel: type) -> str:
    """Whether a block-FP8 kernel serves a batched-matmul layer: a DeepSeek-V4 wo_a built as
    the image's vLLM builds it (wo_a_layer) with Fp8LinearMethod, the kernel made as vLLM
    makes it, its weights processed; "" when they come out as the output projection reads
    them."""
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.kernels.linear import FP8ScaledMMLinearKernel
    from vllm.models.deepseek_v4.quant_config import DeepseekV4FP8Config

    k, n, groups = BMM_SHAPE
    layer_class, own_arguments = wo_a_layer()
    quant = DeepseekV4FP8Config(is_checkpoint_fp8_serialized=True,
                                activation_scheme="dynamic", weight_block_size=[128, 128])
    one_rank_groups()
    config = VllmConfig()
    # what a block-FP8 layer asks of the model: its dtype and type; FP4 experts, so the
    # checkpoint's FP8 scales are e8m0, as DeepSeek-V4-Flash's
    model = SimpleNamespace(model_type="deepseek_v4", expert_dtype="fp4")
    object.__setattr__(config, "model_config", SimpleNamespace(
        dtype=torch.bfloat16, hf_config=model, hf_text_config=model))
    with set_current_vllm_config(config), torch.device("meta"):
        layer = layer_class(k, n, bias=False, quant_config=quant, return_bias=False,
                            disable_tp=True, prefix="attn.wo_a", params_dtype=torch.bfloat16,
                            **own_arguments)
        layer.is_bmm, layer.bmm_batch_size = True, groups
        chosen = layer.quant_method.fp8_linear.config
        layer.quant_method.fp8_linear = kernel(chosen, layer_param_names=[
            "weight", "weight_scale", "input_scale", "input_scale_ub"]) \
            if issubclass(kernel, FP8ScaledMMLinearKernel) else kernel(chosen)
        try:
            layer.quant_method.process_weights_after_loading(layer)
        except Exception as exc:  # its processing is the finding
            where = gpu_call(exc)
            return (f"its processing of attn.wo_a needs the GPU ({where.split(':')[0]}), so "
                    "it is not known to serve that batched matmul") if where else \
                f"its processing of attn.wo_a failed: {one_line(exc)}"
    problem = bmm_problem(layer)
    return (f"it cannot serve attn.wo_a, a batched matmul: after {kernel.__name__}'s "
            f"processing {problem}") if problem else ""


def contract_of(name: str, module: Any) -> Callable[[Any], str] | None:
    if getattr(module, "is_bmm", False):
        return bmm_problem
    if name.endswith(("compressor.fused_wkv_wgate", "ffn.gate")):
        return mm_problem
    return None


def check_contracts(layers: Layers, model: Any) -> None:
    for name, module in model.named_modules():
        contract = contract_of(name, module)
        if contract is None:
            continue
        kind = layers.kind(name)
        if id(module) in layers.stopped:
            kind.unchecked.append(name)  # stopped before its weights took their final shape
            continue
        kind.checked += 1
        problem = contract(module)
        if problem:
            kind.problems.append(f"{name} ({kind.kernel or kind.method}): {problem}")


# --- the builds ----------------------------------------------------------------------------


def build(command: str, model: Path, tp: int, hash_layers: int) -> dict[str, Any]:
    """The target and its draft for the head of `tp` nodes, processed and checked."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader import base_loader, get_model

    config = engine_config(command, model, tp)
    target = Layers(hash_layers, draft=False)
    one_rank_groups()
    with set_current_vllm_config(config):
        parallel_state._TP.world_size = tp  # this rank's shard of a group of tp
        base_loader.process_weights_after_loading = process_layer_by_layer(target)
        model_built = get_model(vllm_config=config)
        check_contracts(target, model_built)
        kinds = list(target.kinds.values())
        if config.speculative_config is not None:
            from vllm.v1.worker.gpu.spec_decode.dspark.utils import load_dspark_model

            draft = Layers(0, draft=True)
            base_loader.process_weights_after_loading = process_layer_by_layer(draft)
            check_contracts(draft, load_dspark_model(model_built, config))
            kinds += draft.kinds.values()
    parallel_state._TP.world_size = 1
    return {"tp": tp, "architecture": type(model_built).__name__,
            "kinds": [k.record() for k in kinds if k.count or k.problems]}


def main(argv: list[str]) -> dict[str, Any]:
    cuda_arch, config_path, layers, sizes, command = argv
    match = smoke_backends.ARCH.fullmatch(cuda_arch)
    if match is None:
        raise SystemExit(f"not a CUDA arch: {cuda_arch!r}")
    prepare(int(match.group(1)), int(match.group(2)))
    config = json.loads(Path(config_path).read_text())
    with tempfile.TemporaryDirectory() as folder:
        model = cut_config(config, int(layers), Path(folder))
        fields = config.get("text_config", config) if "num_hidden_layers" not in config \
            else config
        hash_layers = int(fields.get("num_hash_layers") or 0)
        builds = [build(command, model, int(tp), hash_layers) for tp in sizes.split(",")]
    return {"layers": int(layers), "stand_ins": STAND_INS, "builds": builds}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), sort_keys=True))


# --- the smoke check -----------------------------------------------------------------------


def head_command(expected: dict[str, Any]) -> str:
    """The command of the suite's first accept sample that is not a headless worker."""
    from smoke_entry import entrypoint

    spec, _ = entrypoint(expected)
    for sample in spec.get("accept", []):
        command = str(sample.get("command") or "")
        if command.startswith("vllm serve ") and "--headless" not in shlex.split(command):
            return command
    raise CheckSkipped(f"smoke suite {spec.get('suite')!r} has no accept sample of a head "
                       "node's vllm serve command")


def tp_of(command: str) -> int:
    argv = shlex.split(command)
    for flag in ("--tensor-parallel-size", "-tp"):
        if flag in argv[:-1]:
            return int(argv[argv.index(flag) + 1])
    return 1


def asked(cuda_arch: str, config: dict[str, Any], command: str,
          sizes: list[int]) -> dict[str, Any]:
    """main() in a Python of its own, over the CUDA driver's stub where there is no driver."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "model.json").write_text(json.dumps(config))
        env = {**os.environ, **smoke_backends.driver_stub(Path(folder)),
               "VLLM_LOGGING_LEVEL": "WARNING"}
        done = subprocess.run(
            [sys.executable, "-B", str(Path(__file__)), cuda_arch, f"{folder}/model.json",
             str(LAYERS), ",".join(map(str, sizes)), command],
            capture_output=True, text=True, timeout=TIMEOUT, check=False, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"the model did not build (exit {done.returncode}): {last[-300:]}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def summary(record: dict[str, Any]) -> tuple[list[str], str]:
    """The problems (TP, layer, what is wrong), and a line of what was built and checked."""
    problems: list[str] = []
    checked, stops = 0, dict[str, list[str]]()
    for built in record["builds"]:
        for kind in built["kinds"]:
            problems += [f"TP {built['tp']}: {p}" for p in kind["problems"]]
            checked += kind["checked"]
            if kind["stopped"]:
                stops.setdefault(kind["stopped"].split(":")[0], []).append(kind["kind"])
    sizes = ", ".join(str(b["tp"]) for b in record["builds"])
    stopped = "; ".join(f"{where} stops {', '.join(sorted(set(kinds)))}"
                        for where, kinds in stops.items())
    return problems, (f"{record['builds'][0]['architecture']}, first {record['layers']} "
                      f"layers and the draft, at TP {sizes}: {checked} weights as their "
                      f"forward reads them" + (f"; needs the GPU: {stopped}" if stopped else ""))


def check_layer_weights(image: Image, expected: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    model = (image.manifest().get("capabilities") or {}).get("model")
    if model != "deepseek_v4":
        raise CheckSkipped(f"the tag's model family is {model or 'not declared'}; the layer "
                           "contracts are DeepSeek-V4's")
    source = expected.get("layer_model") or {}
    if not isinstance(source.get("config"), dict):
        raise CheckSkipped(str(source.get("none") or "no model config.json to build"))
    command = head_command(expected)
    sizes = sorted({1, tp_of(command)})
    record = asked(str(expected["cuda_arch"]), source["config"], command, sizes)
    record["model"] = source.get("path")
    problems, line = summary(record)
    if problems:
        more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
        raise CheckFailed("; ".join(problems[:2]) + more, record)
    return line, record
