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
does after a load; here each layer on its own. A call the meta device cannot run is stood in
by what its result would be (STAND_INS: DeepGEMM's scale layout, computed from DeepGEMM's
rules for the tag's GPU); one that needs the GPU stops its layer only when it is listed, with
why (NEEDS_GPU); any other raise fails the check, naming the call and the layer. Last, every
weight a DeepSeek-V4 forward reads outside its layer's own kernel is held to what that
forward reads (contract_of): `attn.wo_a`, a batched-matmul layer, read by DeepGEMM's
`fp8_einsum("bhr,hdr->bhd")` as 3-D groups; each block-FP8 layer's scales as DeepGEMM's GEMMs
read them (on SM12x UE8M0 packed 4 to an int32, MN-major, TMA-aligned); the 16-bit weights the
forward multiplies itself; the routed experts b12x prepared, and the memory they hold. Each
kind must have every such layer checked (its minimum), and every target layer a wo_a.

As a script: `smoke_layers.py CUDA_ARCH CONFIG_JSON LAYERS TP[,TP...] COMMAND` prints one JSON
document: per TP, the layers by kind (count, quantization method, kernel, the vLLM functions
their processing reached, what stood in, where it stopped, how many were checked of their
minimum, the routed experts' bytes per layer, what is wrong). Standard library
plus the image's vLLM and torch; mounted beside smoke_check.py, never baked.
"""

from __future__ import annotations

import importlib
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

import smoke_platform
from smoke_common import CheckFailed, CheckSkipped, Image, one_line

TIMEOUT = 1800  # seconds: importing vLLM and building the model twice under emulation
LAYERS = 4  # the first layers of DeepSeek-V4 hold every kind it has (serve.env says which)
TP_SIZES = (1, 4)  # one Spark, and the reference layout's four
STAND_INS = {  # calls the meta device cannot run, each stood in by what its result would be
    "deep_gemm::transform_sf_into_required_layout":
        "DeepGEMM's layout of the weight scales (a CUDA kernel): its result's shape, strides "
        "and dtype come from DeepGEMM's rules for the tag's GPU (deep_gemm_layout), not its "
        "input's, and the forward's reading of them is checked",
    "b12x.moe.fused_moe._impl._require_unit_weight_alphas":
        "b12x reads the MXFP4 experts' global scales to see that they are all 1; vLLM passes "
        "its own ones (B12xExperts._unit_scale), which hold no values on the meta device",
}
NEEDS_GPU = {  # calls whose raise stops a layer's processing for want of a GPU, and why
    "vllm.model_executor.layers.quantization.utils.humming.linear."
    "prepare_humming_linear_layer_config":
        "humming converts the weights into its own format by their values",
}
TRACED = ("vllm.model_executor", "vllm.models", "vllm.utils.deep_gemm", "vllm.utils.b12x",
          "b12x", "deep_gemm", "flashinfer")
OWNERS = ("vllm", "b12x", "deep_gemm", "flashinfer")  # whose frames name where a call raised
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
    minimum: int = 0  # layers that must be: every one with a contract
    unchecked: list[str] = field(default_factory=list)  # stopped before they could be
    expert_bytes: int = 0  # routed experts: what one processed layer holds on this rank
    kept_source_bytes: int = 0  # of which the checkpoint's weights kept beside the packed

    def record(self) -> dict[str, Any]:
        memory = {"expert_bytes": self.expert_bytes,
                  "kept_source_bytes": self.kept_source_bytes} if self.expert_bytes else {}
        return {"kind": self.name, "count": self.count, "method": self.method,
                "kernel": self.kernel, "reached": self.reached,
                "stood_in": sorted(self.stood_in), "stopped": self.stopped,
                "checked": self.checked, "minimum": self.minimum,
                "unchecked": self.unchecked, "problems": self.problems, **memory}


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
    smoke_platform.use_gpu(major, minor)
    import torch
    import vllm.platforms

    type(vllm.platforms.current_platform).device_type = "meta"

    class Placeholder:  # built in __init__, used by the forward only
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    torch.cuda.Stream = Placeholder
    torch.cuda.Event = Placeholder
    torch.cuda.is_current_stream_capturing = lambda: False  # nothing is captured here
    smoke_platform.import_model("deepseek_v4")
    smoke_platform.torch_reports(major, minor)
    from vllm.utils import deep_gemm

    deep_gemm._lazy_init()  # registers DeepGEMM's operators
    op = "deep_gemm::transform_sf_into_required_layout"
    if torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
        torch.library.register_fake(op)(deep_gemm_layout)
    try:  # b12x, where the image has it (vLLM's b12x extra)
        b12x = importlib.import_module("b12x.moe.fused_moe._impl")
    except ImportError:
        return
    setattr(b12x, "_require_unit_weight_alphas", unit_alphas)  # noqa: B010


def unit_alphas(w1_global_scale: Any, w2_global_scale: Any, *, context: str) -> None:
    """The stand-in of b12x's check that the experts' global scales are all 1 (STAND_INS)."""


# --- DeepGEMM's scale layout ---------------------------------------------------------------
# What DeepGEMM's transform_sf_into_required_layout makes of block-FP8 weight scales, and what
# its GEMMs and fp8_einsum read: rules of DeepGEMM's layout code (vLLM 0.33.0's vendored copy)
# in our words. On SM100 and SM12x the scales are UE8M0, 4 to an int32 along K, MN-major
# (each column of MN scales contiguous), every column starting on a 16-byte TMA boundary.

TMA_BYTES = 16  # TMA reads each scale column from a 16-byte aligned start
PER_INT32 = 4  # UE8M0 scales packed into one int32 along K
BLOCK = 128  # DeepSeek-V4's FP8 weight blocks, and the K granularity the GEMMs read
PACKED_ARCHS = (10, 12)  # SM100 and SM12x read packed UE8M0; SM90 reads FP32


@dataclass(frozen=True)
class ScaleLayout:
    """A scale tensor's shape, strides (in elements) and dtype ("float32" or "int32")."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, tensor: Any) -> ScaleLayout:
        return cls(tuple(tensor.shape), tuple(tensor.stride()),
                   str(tensor.dtype).removeprefix("torch."))


def tma_aligned(mn: int) -> int:
    """mn 4-byte scales rounded up to whole 16-byte TMA rows (DeepGEMM's get_tma_aligned_size)."""
    step = TMA_BYTES // 4
    return -(-mn // step) * step


def mn_major(shape: tuple[int, ...], dtype: str) -> ScaleLayout:
    """(..., mn, k) with mn contiguous, each k column TMA-aligned, the groups one after
    another (what DeepGEMM allocates for the scales it lays out)."""
    pitch = tma_aligned(shape[-2])
    return ScaleLayout(shape, (pitch * shape[-1], 1, pitch)[3 - len(shape):], dtype)


def granularity(recipe: tuple[int, ...], is_sfa: bool | None) -> tuple[int, int]:
    """(MN, K) elements per scale: a 3-number recipe is (A's MN, B's MN, K), a 2-number one
    (MN, K)."""
    if len(recipe) == 3:
        return (recipe[0] if is_sfa else recipe[1]), recipe[2]
    return recipe[0], recipe[1]


def scale_grid_problem(sf: ScaleLayout, mn: int, k: int, gran: tuple[int, int],
                       groups: int | None) -> str:
    """DeepGEMM's shape check of scales before any transform: one per gran block, K packed
    4 to an int32 when int32, a leading group dimension when groups are given."""
    per_k = gran[1] * (PER_INT32 if sf.dtype == "int32" else 1)
    want = (*(() if groups is None else (groups,)), -(-mn // gran[0]), -(-k // per_k))
    if sf.dtype not in ("float32", "int32"):
        return f"its scales are {sf.dtype}; DeepGEMM takes float32 or packed int32 scales"
    return "" if sf.shape == want else (
        f"its scales are {sf.shape}, DeepGEMM's layout wants {want} for MN {mn}, K {k} in "
        f"{gran[0]} x {gran[1]} blocks")


def transformed_layout(sf: ScaleLayout, mn: int, k: int, recipe: tuple[int, ...],
                       groups: int | None, is_sfa: bool | None, keep_fp32: bool,
                       arch: int) -> ScaleLayout:
    """The layout DeepGEMM's transform gives scales on a GPU of this major arch (keep_fp32:
    vLLM's disable_ue8m0_cast); ValueError where DeepGEMM's own host checks stop."""
    gran = granularity(recipe, is_sfa)
    problem = scale_grid_problem(sf, mn, k, gran, groups)
    if problem:
        raise ValueError(problem)
    fp32, legacy = sf.dtype == "float32", arch == 9 or keep_fp32
    if fp32 and legacy and gran == (1, BLOCK):
        return mn_major(sf.shape, "float32")  # per-token FP32, MN-major
    if fp32 and legacy and gran == (BLOCK, BLOCK):
        return sf  # block FP32, read as it is
    if fp32 and arch in PACKED_ARCHS and gran[1] in (32, BLOCK) and not keep_fp32:
        # each of the MN rows gets its block's scales, packed 4 to an int32 along K
        return mn_major((*sf.shape[:-2], mn, -(-sf.shape[-1] // PER_INT32)), "int32")
    if not fp32 and arch in PACKED_ARCHS and gran[0] == 1 and gran[1] in (32, BLOCK):
        return sf  # packed already; the GEMM checks its strides
    raise ValueError(f"DeepGEMM has no transform of {sf.dtype} scales in {gran[0]} x "
                     f"{gran[1]} blocks on SM{arch}x (keep FP32: {keep_fp32})")


def gpu_arch() -> int:
    """The major compute capability vLLM's platform reports: the tag's GPU (prepare)."""
    from vllm.platforms import current_platform

    return int(current_platform.get_device_capability().major)


def deep_gemm_layout(sf: Any, mn: int, k: int, recipe: list[int], num_groups: int | None = None,
                     is_sfa: bool | None = None, disable_ue8m0_cast: bool = False,
                     psum_layout: Any = None) -> Any:
    """The stand-in of DeepGEMM's transform (STAND_INS): a tensor of the layout it gives."""
    import torch

    layout = transformed_layout(ScaleLayout.of(sf), mn, k, tuple(recipe), num_groups, is_sfa,
                                disable_ue8m0_cast, gpu_arch())
    return torch.empty_strided(layout.shape, layout.strides, dtype=getattr(torch, layout.dtype),
                               device=sf.device)


def scale_read_problem(weight_shape: tuple[int, ...], sf: ScaleLayout, arch: int) -> str:
    """Whether DeepGEMM's GEMMs and fp8_einsum read these scales of a weight (..., N, K) as
    they are: on SM100 and SM12x packed int32 (..., N, ceil(K / 512)), MN-major, each column
    TMA-aligned, the groups one after another; on SM90 FP32 (..., N / 128, K / 128)."""
    *groups, n, k = weight_shape
    if arch not in PACKED_ARCHS:
        want = (*groups, -(-n // BLOCK), -(-k // BLOCK))
        return "" if (sf.dtype, sf.shape) == ("float32", want) else (
            f"its scales are {sf.dtype} {sf.shape}; on SM{arch}x DeepGEMM reads float32 {want}")
    want = (*groups, n, -(-k // (BLOCK * PER_INT32)))
    if sf.dtype != "int32" or sf.shape != want:
        return (f"its scales are {sf.dtype} {sf.shape}; on SM{arch}x DeepGEMM reads them as "
                f"int32 {want}: UE8M0 for each of the {n} rows, 4 to an int32 along K")
    pitch = sf.strides[-1]
    if sf.strides[-2] != 1 and n > 1:
        return (f"its scales' strides are {sf.strides}: not MN-major, DeepGEMM reads each "
                f"column of {n} row scales contiguous")
    if pitch < tma_aligned(n) or pitch % PER_INT32:
        return (f"its scales' column pitch is {pitch}; DeepGEMM's TMA reads columns a multiple "
                f"of {PER_INT32} apart and at least {tma_aligned(n)}")
    if groups and sf.strides[0] != pitch * sf.shape[-1]:
        return (f"its scales' groups are {sf.strides[0]} apart, not {pitch * sf.shape[-1]}: "
                "fp8_einsum reads each group's columns right after the last group's")
    return ""


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
    """The functions of TRACED modules that a call enters, in the order first entered, and
    the stand-ins it reached."""

    def __init__(self) -> None:
        self.seen: dict[str, None] = {}
        self.stood_in: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        stand_in = STOOD_IN.get(frame.f_code)
        if stand_in:
            self.stood_in.add(stand_in)
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith(TRACED) and not frame.f_code.co_name.startswith("__"):
            self.seen.setdefault(f"{module}.{frame.f_code.co_qualname}", None)


STOOD_IN = {deep_gemm_layout.__code__: "deep_gemm::transform_sf_into_required_layout",
            unit_alphas.__code__: "b12x.moe.fused_moe._impl._require_unit_weight_alphas"}


def calls_of(tb: TracebackType | None) -> list[tuple[str, int]]:
    """The calls of vLLM and its kernel packages a traceback went through, outermost first."""
    calls = []
    for frame, line in traceback.walk_tb(tb):
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith(OWNERS):
            calls.append((f"{module}.{frame.f_code.co_qualname}", line))
    return calls


def stop_of(exc: BaseException) -> tuple[str, str]:
    """Where a processing raised: the NEEDS_GPU call it went through ("" if none: a real
    failure), and the innermost call of vLLM or a kernel package, with its line."""
    calls = calls_of(exc.__traceback__)
    listed = next((call for call, _ in reversed(calls) if call in NEEDS_GPU), "")
    return listed, f"{calls[-1][0]} (line {calls[-1][1]})" if calls else "?"


def gpu_call(exc: BaseException) -> str:
    """Where a processing stopped for want of a GPU, and the error; "" when it went through
    no call of NEEDS_GPU (a real failure)."""
    listed, where = stop_of(exc)
    return f"{where}: {one_line(exc)[:160]}" if listed else ""


def recorded(layers: Layers, name: str, module: Any, process: Callable[..., Any]) -> Any:
    """process (a layer's process_weights_after_loading) run with its calls traced, and its
    end recorded: done, stopped in a call of NEEDS_GPU (named, with why), or failed (a
    problem naming the layer and the call that raised)."""
    def run(*args: Any, **kwargs: Any) -> None:
        kind, tracer = layers.kind(name), Tracer()
        sys.setprofile(tracer)
        try:
            process(*args, **kwargs)
        except Exception as exc:  # each layer's end is the finding, not the check's
            listed, where = stop_of(exc)
            layers.stopped[id(module)] = where
            if listed:
                kind.stopped = kind.stopped or f"{where}: {NEEDS_GPU[listed]}"
            else:
                kind.problems.append(f"{name}: {where} raised {one_line(exc)[:240]}")
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
    return scale_read_problem(want, ScaleLayout.of(scale), gpu_arch())


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


def linear_problem(module: Any) -> str:
    """A block-FP8 linear layer: DeepGEMM's GEMM (fp8_gemm_nt) reads the weight's scales as
    scale_read_problem says; another kernel reads a format of its own, not checked here."""
    if kernel_of(module.quant_method) != DEEP_GEMM_KERNEL:
        return ""
    return scale_read_problem(tuple(module.weight.shape), ScaleLayout.of(scale_of(module)),
                              gpu_arch())


DEEP_GEMM_KERNEL = "DeepGemmFp8BlockScaledMMKernel"


def experts_problem(module: Any) -> str:
    """Routed experts run by b12x: its forward reads the experts its processing prepared
    (B12xExperts._prepared: their count, hidden and intermediate sizes), never the
    checkpoint's weights; those of this rank's layer. Another backend: not checked here."""
    provider = getattr(module, "b12x_warmup_provider", None)
    if provider is None:
        return ""
    prepared = getattr(provider, "_prepared_experts", None)
    if prepared is None:
        return "b12x's processing prepared no experts; its forward raises without them"
    want = (module.local_num_experts, module.hidden_size, module.intermediate_size_per_partition)
    got = (int(prepared.num_experts), int(prepared.hidden_size),
           int(prepared.intermediate_size))
    return "" if got == want else (
        f"b12x prepared {got} (experts, hidden, intermediate); this rank's layer is {want}")


def tensors_in(value: Any, depth: int = 4, seen: set[int] | None = None) -> list[Any]:
    """The tensors an object holds, through its attributes, lists and dicts, depth deep."""
    import torch

    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        return [value]
    if depth == 0 or id(value) in seen or isinstance(value, str | bytes | int | float | type):
        return []
    seen.add(id(value))
    return [t for item in members(value) for t in tensors_in(item, depth - 1, seen)]


def members(value: Any) -> list[Any]:
    """What a container or an object holds: a dict's values, a sequence's items, the
    attributes of an object."""
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list | tuple):
        return list(value)
    return list(vars(value).values()) if hasattr(value, "__dict__") else []


def storages(tensors: list[Any]) -> dict[int, int]:
    """Each distinct storage of these tensors and its bytes; views share their base's. On the
    meta device a storage has no address, only its StorageImpl (_cdata) tells them apart."""
    return {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}


def expert_memory(module: Any) -> tuple[int, int]:
    """What routed experts hold after their processing (bytes on this rank): their
    parameters and buffers and what b12x prepared; and of it, the checkpoint's weights kept
    beside the prepared ones (parameters whose storage the prepared experts do not share)."""
    provider = getattr(module, "b12x_warmup_provider", None)
    prepared = storages(tensors_in(getattr(provider, "_prepared_experts", None)))
    own = storages([*module.parameters(recurse=False), *module.buffers(recurse=False)])
    sources = storages([p for n, p in module.named_parameters(recurse=False)
                        if n.startswith(("w13_", "w2_"))])
    kept = sum(size for key, size in sources.items() if key not in prepared) if prepared else 0
    return sum({**own, **prepared}.values()), kept


def contract_of(name: str, module: Any) -> Callable[[Any], str] | None:
    """What the forward reads of this layer: wo_a's groups, the 16-bit weights it multiplies
    itself, a block-FP8 layer's scales, the routed experts b12x prepared."""
    if getattr(module, "is_bmm", False):
        return bmm_problem
    if name.endswith(("compressor.fused_wkv_wgate", "ffn.gate")):
        return mm_problem
    if getattr(module, "weight_block_size", None) is not None and scale_of(module) is not None:
        return linear_problem
    if hasattr(module, "local_num_experts") and hasattr(module, "quant_method"):
        return experts_problem
    return None


def check_contracts(layers: Layers, model: Any) -> None:
    """Each layer with a contract held to it, counted towards its kind's minimum (every
    such layer); one stopped before its weights took their final shape stays unchecked."""
    for name, module in model.named_modules():
        contract = contract_of(name, module)
        if contract is None:
            continue
        kind = layers.kind(name)
        kind.minimum += 1
        if id(module) in layers.stopped:
            kind.unchecked.append(name)
            continue
        kind.checked += 1
        problem = contract(module)
        if problem:
            kind.problems.append(f"{name} ({kind.kernel or kind.method}): {problem}")
        if contract is experts_problem:
            held, kept = expert_memory(module)
            kind.expert_bytes, kind.kept_source_bytes = held, kept  # the same in each layer


def below_minimum(kind: Kind, floor: int = 0) -> str:
    """Why a kind was checked too little: fewer layers than its minimum (or than the model's
    layers of it, floor), naming those left unchecked and where they stopped."""
    minimum = max(kind.minimum, floor)
    if kind.checked >= minimum:
        return ""
    where = f"stopped at {kind.stopped}" if kind.stopped else "failed in their processing"
    left = f": {', '.join(kind.unchecked[:3])} {where}" if kind.unchecked else ""
    return (f"{kind.name}: {kind.checked} of {minimum} layers held to what their forward "
            f"reads{left}")


# --- the builds ----------------------------------------------------------------------------


def build(command: str, model: Path, tp: int, hash_layers: int, layers: int) -> dict[str, Any]:
    """The target and its draft for the head of `tp` nodes, processed and checked, each kind
    held to its minimum: every layer with a contract, and a wo_a in each target layer."""
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
        kinds = held_to_minimum(target, {"attn.wo_a": layers})
        if config.speculative_config is not None:
            from vllm.v1.worker.gpu.spec_decode.dspark.utils import load_dspark_model

            draft = Layers(0, draft=True)
            base_loader.process_weights_after_loading = process_layer_by_layer(draft)
            check_contracts(draft, load_dspark_model(model_built, config))
            kinds += held_to_minimum(draft, {"draft attn.wo_a": 1})
    parallel_state._TP.world_size = 1
    return {"tp": tp, "architecture": type(model_built).__name__,
            "expert_bytes": sum(k.expert_bytes * k.checked for k in kinds),
            "kept_source_bytes": sum(k.kept_source_bytes * k.checked for k in kinds),
            "kinds": [k.record() for k in kinds if k.count or k.problems]}


def held_to_minimum(layers: Layers, floors: dict[str, int]) -> list[Kind]:
    """The kinds, each one checked less than its minimum (or a floor) with that problem."""
    for name in floors:
        layers.kinds.setdefault(name, Kind(name))
    for kind in layers.kinds.values():
        problem = below_minimum(kind, floors.get(kind.name, 0))
        if problem:
            kind.problems.append(problem)
    return list(layers.kinds.values())


def main(argv: list[str]) -> dict[str, Any]:
    cuda_arch, config_path, layers, sizes, command = argv
    match = smoke_platform.ARCH.fullmatch(cuda_arch)
    if match is None:
        raise SystemExit(f"not a CUDA arch: {cuda_arch!r}")
    prepare(int(match.group(1)), int(match.group(2)))
    config = json.loads(Path(config_path).read_text())
    with tempfile.TemporaryDirectory() as folder:
        model = cut_config(config, int(layers), Path(folder))
        fields = config.get("text_config", config) if "num_hidden_layers" not in config \
            else config
        hash_layers = int(fields.get("num_hash_layers") or 0)
        builds = [build(command, model, int(tp), hash_layers, int(layers))
                  for tp in sizes.split(",")]
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
        env = {**os.environ, **smoke_platform.driver_stub(Path(folder)),
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
    """The problems (TP, layer, what is wrong), and a line of what was built and checked:
    the weights checked per kind (one count, or one per TP where they differ), the routed
    experts' memory, where the GPU was needed."""
    problems: list[str] = []
    checked, stops = dict[str, list[int]](), dict[str, list[str]]()
    for built in record["builds"]:
        for kind in built["kinds"]:
            problems += [f"TP {built['tp']}: {p}" for p in kind["problems"]]
            if kind.get("minimum"):
                checked.setdefault(kind["kind"], []).append(kind["checked"])
            if kind["stopped"]:
                stops.setdefault(kind["stopped"].split(":")[0], []).append(kind["kind"])
    sizes = ", ".join(str(b["tp"]) for b in record["builds"])
    counts = ", ".join(f"{name} {'/'.join(map(str, n)) if len(set(n)) > 1 else n[0]}"
                       for name, n in checked.items())
    stopped = "; ".join(f"{where} stops {', '.join(sorted(set(kinds)))}"
                        for where, kinds in stops.items())
    return problems, (f"{record['builds'][0]['architecture']}, first {record['layers']} "
                      f"layers and the draft, at TP {sizes}: "
                      f"{sum(sum(n) for n in checked.values())} weights as their forward "
                      f"reads them ({counts or 'none'}){experts_line(record['builds'])}"
                      + (f"; needs the GPU: {stopped}" if stopped else ""))


def experts_line(builds: list[dict[str, Any]]) -> str:
    """The routed experts' memory per layer at each TP, and what of it the checkpoint's
    weights kept beside the prepared ones take."""
    held = {b["tp"]: max([k.get("expert_bytes", 0) for k in b["kinds"]], default=0)
            for b in builds}
    kept = sum(b.get("kept_source_bytes", 0) for b in builds)
    if not any(held.values()):
        return ""
    sizes = ", ".join(f"{size / 2**30:.2f} GiB at TP {tp}" for tp, size in held.items())
    return (f"; routed experts per layer {sizes}, of which the checkpoint's weights kept: "
            f"{f'{kept / 2**30:.2f} GiB' if kept else 'none'}")


DSPARK_LAYERS = "dspark_target_layer_ids"  # vLLM's DSpark draft reads it unconditionally


def dspark_problem(config: dict[str, Any], command: str) -> str:
    """A DSpark draft asked for (--speculative-config's method) of a checkpoint whose
    config.json lacks the target layers it reads (DSparkDeepseekV4Model.__init__)."""
    argv = shlex.split(command)
    spec = argv[argv.index("--speculative-config") + 1] \
        if "--speculative-config" in argv[:-1] else "{}"
    try:
        method = json.loads(spec).get("method")
    except (ValueError, AttributeError):
        return ""
    fields = config.get("text_config", config) if "num_hidden_layers" not in config else config
    if method != "dspark" or (isinstance(fields, dict) and fields.get(DSPARK_LAYERS)):
        return ""
    return (f"the command runs the DSpark draft, and the checkpoint's config.json has no "
            f"{DSPARK_LAYERS}, which vLLM's draft reads as it is built: the model load stops")


def check_layer_weights(image: Image, expected: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    model = (image.manifest().get("capabilities") or {}).get("model")
    if model != "deepseek_v4":
        raise CheckSkipped(f"the tag's model family is {model or 'not declared'}; the layer "
                           "contracts are DeepSeek-V4's")
    source = expected.get("layer_model") or {}
    if not isinstance(source.get("config"), dict):
        raise CheckSkipped(str(source.get("none") or "no model config.json to build"))
    command = head_command(expected)
    refused = dspark_problem(source["config"], command)
    if refused:
        raise CheckFailed(refused, {"model": source.get("path"), "key": DSPARK_LAYERS})
    sizes = sorted({1, tp_of(command)})
    record = asked(str(expected["cuda_arch"]), source["config"], command, sizes)
    record["model"] = source.get("path")
    problems, line = summary(record)
    if problems:
        more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
        raise CheckFailed("; ".join(problems[:2]) + more, record)
    return line, record
