"""sparkbake model checks: the mounted model's shapes and size against a node's layout.

Standard library only, Python >= 3.10. Baked into the image beside preflight.py, which loads
it as a sibling file; each function of CHECKS returns the problems it finds as the fields
that fill its rule's message and reason in preflight.json (the words are there, the
arithmetic here). The model is a folder: its config.json and model.safetensors.index.json.
The layer shapes are DeepSeek-V4's as vLLM 0.33.0 builds them, the constraints vLLM
0.33.0's b12x kernels' own checks (docs/reference/preflight.md, "The model checks").
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
GIB = 1 << 30
GB = 10**9  # device_memory_gb counts as vendors do: GB10's 128 GB
LINEAR_BLOCK = 128  # b12x block-FP8 GEMM: 128 x 128 weight blocks, N and K per rank
MOE_HIDDEN = 256  # b12x MXFP4 x MXFP8 experts: hidden size
MOE_INTERMEDIATE = 32  # b12x MXFP4 experts: intermediate size per rank
EXPERT_PARALLEL = {"--enable-expert-parallel": True, "-ep": True,
                   "--no-enable-expert-parallel": False}
AUTO_LINEAR = "LINEAR_BACKEND=auto lets vLLM pick another block-FP8 kernel for it"
B12X_SHAPES = ("vLLM 0.33.0's B12xFp8BlockScaledMMKernel.can_implement "
               "(vllm/model_executor/kernels/linear/scaled_mm/b12x.py) wants 128 x 128 weight "
               "blocks and N, K multiples of 128; with --linear-backend b12x it is the only kernel "
               "left for block-FP8 layers, so the model load stops")
B12X_BATCHED = ("the model loads, and every node aborts in its first forward (DeepGEMM's "
                "layout.hpp 't.dim() == N' assert at warmup): B12xFp8BlockScaledMMKernel's "
                "processing leaves the weight 2-D, and of vLLM 0.33.0's block-FP8 kernels only "
                "DeepGEMM's reshapes a batched matmul (deepgemm_post_process_fp8_weight_block; "
                "smoke check layer-weights)")

Problem = dict[str, str]  # fields for the rule's message and reason
Split = Literal["column", "row", "replicated"]


class BadFile(ValueError):
    """A model file that is there but that vLLM could not read either."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


@dataclass(frozen=True)
class Model:
    """A model folder as the checks read it: its config, the weights' total size from the
    index (None: not given, `index_gap` says why), or the file it could not read."""

    folder: Path
    config: Mapping[str, Any]
    total_size: int | None = None
    index_gap: str = ""
    problem: tuple[str, str] | None = None  # (file, what is wrong with it)


def read_model(folder: Path | None) -> Model | None:
    """The model in FOLDER; None when there is nothing to read (no folder, no config.json,
    or files this user may not open): the model checks then do not apply."""
    if folder is None or not (folder / CONFIG).is_file():
        return None
    try:
        config = _json_object(folder / CONFIG)
        index = _json_object(folder / INDEX) if (folder / INDEX).is_file() else None
        total, gap = _index_total(folder / INDEX, index)
    except BadFile as bad:
        return Model(folder, {}, problem=(str(bad.path), bad.why))
    except OSError:
        return None
    return Model(folder, config, total, gap)


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # not JSON, or not UTF-8
        raise BadFile(path, f"it is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadFile(path, "it is not a JSON object")
    return data


def _index_total(path: Path, index: Mapping[str, Any] | None) -> tuple[int | None, str]:
    """metadata.total_size of the index, or why there is none."""
    if index is None:
        return None, f"no {INDEX}"
    if not isinstance(index.get("weight_map"), dict):  # vLLM finds the weight files by it
        raise BadFile(path, "its weight_map is not a JSON object")
    metadata = index.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if type(total) is not int or total <= 0:
        return None, f"no metadata.total_size in its {INDEX}"
    return total, ""


# --- the node --------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """What a node's environment chooses, as vLLM reads it."""

    tp_size: int
    expert_parallel: bool  # asked for in SERVE_EXTRA_ARGS
    dspark: bool
    moe_backend: str
    linear_backend: str
    utilization: float


def expert_parallel(args: list[str]) -> bool:
    """Whether `vllm serve` arguments switch expert parallelism on (the last switch wins)."""
    switches = [EXPERT_PARALLEL[arg] for arg in args if arg in EXPERT_PARALLEL]
    return bool(switches) and switches[-1]


@dataclass(frozen=True)
class Device:
    total: int  # bytes
    source: str  # where the figure comes from


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def nvml_total_memory(library: str = "libnvidia-ml.so.1") -> int | None:
    """The memory of the first GPU NVML sees (in a container, of those it was given), in
    bytes; None without a driver, a GPU or an answer (a GB10's memory is the host's, and
    its NVML may report none)."""
    try:
        nvml = ctypes.CDLL(library)
        if nvml.nvmlInit_v2() != 0:
            return None
    except (OSError, AttributeError):
        return None
    try:
        handle, memory = ctypes.c_void_p(), _NvmlMemory()
        if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0 or \
                nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
            return None
        return int(memory.total) or None
    finally:
        nvml.nvmlShutdown()


class Node:
    """What the model checks know of a node: its layout, its model (read once), its device
    memory (the GPU's, else the tag's declared device_memory_gb; asked once, when needed)
    and the reference deployment's memory figures (preflight.json `memory`)."""

    def __init__(self, layout: Layout, folder: Path | None, declared_gb: float | None,
                 gpu_memory: Callable[[], int | None], memory: Mapping[str, Any]) -> None:
        self.layout = layout
        self.model = read_model(folder)
        self.memory = memory
        self._declared_gb = declared_gb
        self._gpu_memory = gpu_memory

    @functools.cached_property
    def device(self) -> Device | None:
        measured = self._gpu_memory()
        if measured:
            return Device(measured, "NVML")
        if self._declared_gb:
            return Device(int(self._declared_gb * GB),
                          f"the tag's device_memory_gb: {self._declared_gb:g}")
        return None

    def deepseek_v4(self) -> Mapping[str, Any] | None:
        """The config when the model is a readable DeepSeek-V4 checkpoint, whose layers the
        shape checks know."""
        if self.model is None or self.model.config.get("model_type") != "deepseek_v4":
            return None
        return self.model.config


# --- the files -------------------------------------------------------------------------


def model_file_problems(node: Node) -> list[Problem]:
    if node.model is None or node.model.problem is None:
        return []
    path, why = node.model.problem
    return [{"file": path, "problem": why}]


def index_problems(node: Node) -> list[Problem]:
    if node.model is None or node.model.problem or not node.model.index_gap:
        return []
    return [{"folder": str(node.model.folder), "gap": node.model.index_gap}]


# --- the shapes ------------------------------------------------------------------------


def _ints(config: Mapping[str, Any], *keys: str) -> dict[str, int] | None:
    ints = {key: config[key] for key in keys if type(config.get(key)) is int and config[key] > 0}
    return ints if len(ints) == len(keys) else None


def _per_rank(size: int, parts: int) -> str:
    """`size / parts = share`, the share whole or to one decimal."""
    share = size / parts
    return f"{size} / {parts} = {int(share) if share.is_integer() else round(share, 1)}"


@dataclass(frozen=True)
class Linear:
    """A block-FP8 linear layer of the model: its name in vLLM's model, how tensor
    parallelism splits it (column-parallel splits N, row-parallel K, replicated neither),
    N and K of the whole layer and the config keys they come from."""

    name: str
    split: Split
    n: int
    k: int
    formula: str
    groups: int = 0  # a batched matmul's (is_bmm): the groups its forward reads the weight in

    def shares(self, tp: int) -> tuple[float, float]:
        """N and K on each rank."""
        return (self.n / tp if self.split == "column" else self.n,
                self.k / tp if self.split == "row" else self.k)

    def shown(self, tp: int) -> str:
        n = _per_rank(self.n, tp) if self.split == "column" else str(self.n)
        k = _per_rank(self.k, tp) if self.split == "row" else str(self.k)
        return f"N = {n}, K = {k}"


def _shared_expert(size: int, tp: int) -> int:
    """The shared experts' intermediate size as vLLM builds it (DeepseekV4MLP): whole weight
    blocks, rounded up to a whole number per rank, so each rank's share stays aligned."""
    return math.ceil(size // LINEAR_BLOCK / tp) * LINEAR_BLOCK * tp


def linear_layers(config: Mapping[str, Any], tp: int, dspark: bool) -> list[Linear]:
    """DeepSeek-V4's block-FP8 linear layers in vLLM 0.33.0 (vllm/models/deepseek_v4/:
    attention.py, nvidia/model.py, nvidia/dspark.py). Built unquantized, so not here: the
    compressors, the indexer's weights_proj, the router gate, the vision tower; the routed
    experts are MoE."""
    c = _ints(config, "hidden_size", "num_attention_heads", "head_dim", "q_lora_rank",
              "o_lora_rank", "o_groups", "index_n_heads", "index_head_dim")
    if c is None:
        return []
    heads = c["num_attention_heads"] * c["head_dim"]
    out = c["o_groups"] * c["o_lora_rank"]
    layers = [
        Linear("attn.fused_wqa_wkv", "replicated", c["q_lora_rank"] + c["head_dim"],
               c["hidden_size"], "N = q_lora_rank + head_dim, K = hidden_size"),
        Linear("attn.wq_b", "column", heads, c["q_lora_rank"],
               "N = num_attention_heads x head_dim, K = q_lora_rank"),
        Linear("attn.wo_a", "column", out, heads // c["o_groups"],
               "N = o_groups x o_lora_rank, K = num_attention_heads x head_dim / o_groups",
               groups=c["o_groups"]),
        Linear("attn.wo_b", "row", c["hidden_size"], out,
               "N = hidden_size, K = o_groups x o_lora_rank"),
        Linear("attn.indexer.wq_b", "replicated", c["index_n_heads"] * c["index_head_dim"],
               c["q_lora_rank"], "N = index_n_heads x index_head_dim, K = q_lora_rank"),
    ]
    return layers + _shared_expert_layers(config, c["hidden_size"], tp) + \
        (_dspark_layers(config, c) if dspark else [])


def _shared_expert_layers(config: Mapping[str, Any], hidden: int, tp: int) -> list[Linear]:
    sizes = _ints(config, "moe_intermediate_size", "n_shared_experts")
    if sizes is None:
        return []  # no shared experts
    shared = _shared_expert(sizes["moe_intermediate_size"] * sizes["n_shared_experts"], tp)
    where = "moe_intermediate_size x n_shared_experts, whole 128-blocks per rank"
    return [Linear("ffn.shared_experts.gate_up_proj", "column", 2 * shared, hidden,
                   f"N = 2 x {where}, K = hidden_size"),
            Linear("ffn.shared_experts.down_proj", "row", hidden, shared,
                   f"N = hidden_size, K = {where}")]


def _dspark_layers(config: Mapping[str, Any], c: Mapping[str, int]) -> list[Linear]:
    """The DSpark draft's own layers; its decoder layers are the target's kinds."""
    layers = [Linear("dspark context_wkv_proj", "replicated",
                     c["head_dim"] * (config.get("n_mtp_layers") or 3), c["hidden_size"],
                     "N = head_dim x n_mtp_layers (3 when unset), K = hidden_size")]
    targets = config.get("dspark_target_layer_ids")
    if isinstance(targets, list) and targets:
        layers.append(Linear("dspark main_proj", "replicated", c["hidden_size"],
                             c["hidden_size"] * len(targets),
                             "N = hidden_size, K = hidden_size x len(dspark_target_layer_ids)"))
    return layers


def linear_problems(node: Node) -> list[Problem]:
    """b12x's block-FP8 GEMM (B12xFp8BlockScaledMMKernel.can_implement) on every layer:
    128 x 128 weight blocks, N and K per rank multiples of 128."""
    config = node.deepseek_v4()
    quant = (config or {}).get("quantization_config")
    if config is None or node.layout.linear_backend != "b12x" or not isinstance(quant, dict) \
            or quant.get("quant_method") not in ("fp8", "deepseek_v4_fp8") \
            or quant.get("weight_block_size") is None:  # per-tensor FP8: another kernel
        return []
    if quant["weight_block_size"] != [LINEAR_BLOCK, LINEAR_BLOCK]:
        return [{"layer": "every block-FP8 linear layer", "constraint": "weights in 128 x 128 "
                 "blocks", "numbers": f"quantization_config.weight_block_size is "
                 f"{quant['weight_block_size']}", "why": B12X_SHAPES, "remedy": AUTO_LINEAR}]
    tp = node.layout.tp_size
    return [problem for layer in linear_layers(config, tp, node.layout.dspark)
            if (problem := _linear_problem(layer, tp))]


def _linear_problem(layer: Linear, tp: int) -> Problem | None:
    n, k = layer.shares(tp)
    bad = {dim for dim, size in (("N", n), ("K", k)) if size % LINEAR_BLOCK}
    if not bad:
        return _batched_problem(layer, tp) if layer.groups else None
    split = {"column": "N", "row": "K"}.get(layer.split)
    kind = f"{layer.split}-parallel" if split else layer.split
    remedy = AUTO_LINEAR if split not in bad else (
        f"no backend takes this split (vLLM's validate_fp8_block_shape wants whole 128-blocks "
        f"per rank): pick a TP_SIZE that splits {split} into multiples of 128")
    return {"layer": f"{layer.name} ({kind}; {layer.formula})",
            "constraint": "N and K per rank must be multiples of 128",
            "numbers": layer.shown(tp), "why": B12X_SHAPES, "remedy": remedy}


def _batched_problem(layer: Linear, tp: int) -> Problem:
    """b12x keeps a batched-matmul layer's weight 2-D, while DeepSeek-V4's output projection
    reads it as 3-D groups (B12X_BATCHED)."""
    n, k = layer.shares(tp)
    groups = layer.groups // tp if layer.split == "column" else layer.groups
    return {"layer": f"{layer.name} (a batched matmul, {layer.formula})",
            "constraint": "the output projection reads its weight with fp8_einsum('bhr,hdr->bhd') "
                          "as 3-D groups, which b12x's processing does not make",
            "numbers": f"b12x keeps it 2-D ({int(n)}, {int(k)}) where the forward reads "
                       f"({groups}, {int(n) // max(groups, 1)}, {int(k)})",
            "why": B12X_BATCHED, "remedy": "LINEAR_BACKEND=deep_gemm (or auto) takes DeepGEMM, whose processing "
                      "makes the groups"}


def _b12x_experts(node: Node) -> Mapping[str, Any] | None:
    """The config when MOE_BACKEND=b12x is to run DeepSeek-V4's MXFP4 experts (the FP8
    and NVFP4 expert checkpoints take other b12x paths, not checked here)."""
    config = node.deepseek_v4()
    if config is None or node.layout.moe_backend != "b12x" \
            or config.get("expert_dtype", "fp4") != "fp4" \
            or _ints(config, "hidden_size", "moe_intermediate_size") is None:
        return None
    quant = config.get("quantization_config")
    algo = quant.get("moe_quant_algo") if isinstance(quant, dict) else None
    return None if str(algo or "").upper() == "NVFP4" else config


EXPERTS = "the routed experts (MXFP4)"


def moe_problems(node: Node) -> list[Problem]:
    """What both b12x MXFP4 variants refuse (B12xExperts.is_supported_config and
    _supports_parallel_config): expert parallelism, and a per-rank intermediate size that
    is not a multiple of 32."""
    config = _b12x_experts(node)
    if config is None:
        return []
    tp = node.layout.tp_size
    ep = node.layout.expert_parallel and tp > 1  # vLLM's use_ep: more than one rank
    problems = [{"layer": EXPERTS, "constraint": "they run without expert parallelism",
                 "numbers": f"SERVE_EXTRA_ARGS switches it on over TP_SIZE={tp}",
                 "remedy": "drop --enable-expert-parallel (-ep) from SERVE_EXTRA_ARGS, or set "
                           "MOE_BACKEND=auto"}] if ep else []
    size, parts = config["moe_intermediate_size"], 1 if ep else tp  # EP keeps experts whole
    if (size / parts) % MOE_INTERMEDIATE:
        problems.append({"layer": EXPERTS, "constraint": "the intermediate size per rank "
                         "must be a multiple of 32", "numbers": f"moe_intermediate_size "
                         f"{_per_rank(size, parts)}", "remedy": _moe_remedy(size, parts)})
    return problems


def _moe_remedy(size: int, parts: int) -> str:
    if size % parts:
        return (f"no backend takes it (vLLM's FusedMoEConfig asserts an even split): pick a "
                f"TP_SIZE that divides {size}")
    return "MOE_BACKEND=auto lets vLLM pick an MXFP4 kernel that pads it"


def moe_activation_problems(node: Node) -> list[Problem]:
    """b12x's MXFP4 x MXFP8 variant wants a hidden size divisible by 256; without it vLLM
    falls back to the BF16-activation variant (when nothing else refuses b12x)."""
    config = _b12x_experts(node)
    if config is None or moe_problems(node) or config["hidden_size"] % MOE_HIDDEN == 0:
        return []
    return [{"hidden": str(config["hidden_size"])}]


# --- the memory ------------------------------------------------------------------------


def gib(size: float) -> str:
    return f"{size / GIB:.1f}"


@dataclass(frozen=True)
class Margin:
    """What the host needs outside vLLM's budget, from the reference deployment's figures
    (preflight.json `memory`): what its host took at most, plus earlyoom's free floor."""

    reference: float  # bytes left outside the budget on the reference node
    host_use: float  # of which the host took at most (bytes)
    floor: float  # earlyoom's floor on this device (bytes)
    needed: float  # host_use + floor
    ceiling: float  # the highest utilization that leaves `needed`


def host_margin(device: int, memory: Mapping[str, Any]) -> Margin:
    reference = (1 - memory["reference_utilization"]) * memory["reference_device_gb"] * GB
    host_use = reference - memory["least_free_gib"] * GIB
    floor = memory["earlyoom_free_percent"] / 100 * device
    needed = host_use + floor
    return Margin(reference, host_use, floor, needed,
                  math.floor((1 - needed / device) * 100) / 100)


def fit_problems(node: Node) -> list[Problem]:
    """The weights per rank against vLLM's budget (total memory x gpu_memory_utilization,
    vllm/v1/worker/utils.py request_memory). The whole checkpoint counts as split over TP:
    the DSpark draft's mtp.* tensors ship in it and its layers split as the target's."""
    model, device, layout = node.model, node.device, node.layout
    if model is None or model.total_size is None or device is None:
        return []
    per_rank = model.total_size / layout.tp_size
    budget = device.total * layout.utilization
    if per_rank <= budget:
        return []
    return [{"weights": gib(per_rank), "total": gib(model.total_size), "budget": gib(budget),
             "device": gib(device.total), "source": device.source,
             "remedy": _fit_remedy(model.total_size, per_rank, budget, device, node.memory)}]


def _fit_remedy(total: int, per_rank: float, budget: float, device: Device,
                memory: Mapping[str, Any]) -> str:
    nodes = f"spread them over more nodes, TP_SIZE={math.ceil(total / budget)} or more"
    needed = math.ceil(per_rank / device.total * 100) / 100
    ceiling = host_margin(device.total, memory).ceiling
    if needed <= ceiling:
        return (f"{nodes}, or set GPU_MEMORY_UTILIZATION={needed:g} or more (the host margin "
                f"allows up to {ceiling:g})")
    return (f"{nodes}; no GPU_MEMORY_UTILIZATION fits them here: they would take "
            f"{needed:g}, and the host margin allows up to {ceiling:g}")


def host_margin_problems(node: Node) -> list[Problem]:
    device = node.device
    if device is None:
        return []
    margin = host_margin(device.total, node.memory)
    left = (1 - node.layout.utilization) * device.total
    if left >= margin.needed:
        return []
    return [{"left": gib(left), "device": gib(device.total), "source": device.source,
             "needed": gib(margin.needed), "reference": gib(margin.reference),
             "host_use": gib(margin.host_use), "floor": gib(margin.floor),
             "ceiling": f"{margin.ceiling:g}",
             **{name: f"{figure:g}" for name, figure in node.memory.items()
                if isinstance(figure, int | float)}}]


CHECKS: dict[str, Callable[[Node], list[Problem]]] = {
    "model-files": model_file_problems, "model-index": index_problems,
    "moe-shape": moe_problems, "moe-activations": moe_activation_problems,
    "linear-shape": linear_problems, "fit": fit_problems, "host-margin": host_margin_problems,
}
