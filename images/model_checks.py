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


VISION_ARCHITECTURE = "DeepseekV4ForConditionalGeneration"  # vLLM 0.33.0's multimodal class
DSPARK_LAYERS = "dspark_target_layer_ids"  # the target layers the DSpark draft reads


def read_model(folder: Path | None) -> Model | None:
    """The model in FOLDER; None when there is nothing to read (no folder, no config.json,
    or files this user may not open): the model checks then do not apply."""
    if folder is None or not (folder / CONFIG).is_file():
        return None
    try:
        config = _json_object(folder / CONFIG)
        _check_compress_ratios(folder / CONFIG, config)
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


def _check_compress_ratios(path: Path, config: Mapping[str, Any]) -> None:
    """DeepSeek-V4's `compress_ratios` as transformers' DeepseekV4Config takes it: 0, 4 or
    128 for each layer (another value has no layer type), at least num_hidden_layers."""
    ratios, layers = config.get("compress_ratios"), config.get("num_hidden_layers")
    if config.get("model_type") != "deepseek_v4" or ratios is None or type(layers) is not int:
        return
    if not isinstance(ratios, list) or len(ratios) < layers or \
            not all(type(r) is int and r in (0, 4, 128) for r in ratios):
        raise BadFile(path, f"its compress_ratios must be 0, 4 or 128 for each of its "
                            f"{layers} layers, not {json.dumps(ratios)[:60]}")


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
    max_model_len: int | None = None  # None: unset, vLLM's default
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    images_per_prompt: int = 1  # LIMIT_MM_IMAGES; unset: vLLM's own limit, above 0


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


def nvml_memory(library: str = "libnvidia-ml.so.1") -> tuple[int, int] | bool:
    """(total, free) bytes of the first GPU NVML sees (in a container, of those it was
    given); True when there is a GPU that gives no memory figures (a GB10's memory is the
    host's, and its NVML may report none); False without a driver, a GPU or an answer."""
    try:
        nvml = ctypes.CDLL(library)
        if nvml.nvmlInit_v2() != 0:
            return False
    except (OSError, AttributeError):
        return False
    try:
        handle, memory = ctypes.c_void_p(), _NvmlMemory()
        if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
            return False
        if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
            return True
        return (int(memory.total), int(memory.free)) if memory.total else True
    finally:
        nvml.nvmlShutdown()


def nvml_total_memory(library: str = "libnvidia-ml.so.1") -> int | None:
    """The memory of the first GPU NVML sees, in bytes; None without an answer."""
    memory = nvml_memory(library)
    return memory[0] if isinstance(memory, tuple) else None


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The host's MemAvailable in bytes, what vLLM takes as a unified-memory GPU's free
    memory (psutil's available, vllm/utils/mem_utils.py MemorySnapshot.measure)."""
    try:
        for line in meminfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable" and value.split()[1:] == ["kB"]:
                return int(value.split()[0]) * 1024
    except (OSError, ValueError):
        return None
    return None


def gpu_free_memory() -> Device | None:
    """The free memory vLLM would read at start on this machine's GPU: NVML's, or on a GPU
    that shares the host's memory (no NVML figures) the host's available memory; None
    without a GPU."""
    memory = nvml_memory()
    if isinstance(memory, tuple):
        return Device(memory[1], "NVML")
    available = available_memory() if memory else None
    return Device(available, "MemAvailable, the memory is the host's") if available else None


class Node:
    """What the model checks know of a node: its layout, its model (read once), its device
    memory (the GPU's, else the tag's declared device_memory_gb; asked once, when needed),
    its free memory (when this machine is the node) and the reference deployment's memory
    figures (preflight.json `memory`)."""

    def __init__(self, layout: Layout, folder: Path | None, declared_gb: float | None,
                 gpu_memory: Callable[[], int | None], memory: Mapping[str, Any],
                 free_memory: Callable[[], Device | None] = lambda: None) -> None:
        self.layout = layout
        self.model = read_model(folder)
        self.memory = memory
        self._declared_gb = declared_gb
        self._gpu_memory = gpu_memory
        self._free_memory = free_memory

    @functools.cached_property
    def free(self) -> Device | None:
        """The device's free memory now, as vLLM reads it at start; None: not known."""
        return self._free_memory()

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


def text_checkpoint_problems(node: Node) -> list[Problem]:
    """Images allowed on a DeepSeek-V4 text checkpoint. vLLM 0.33.0 builds its multimodal
    settings only for a model class that takes images (ModelConfig.__post_init__,
    vllm/config/model.py), and DeepSeek-V4's text and vision checkpoints can name the same
    architecture: vLLM takes the vision class when config.json has a vision tower
    (vision_n_layers, DeepseekV4ModelArchConfigConvertor in
    vllm/transformers_utils/model_arch_config_convertor.py)."""
    config = node.deepseek_v4()
    if config is None or node.model is None or node.layout.images_per_prompt <= 0:
        return []
    architectures = [str(name) for name in config.get("architectures") or []]
    vision_layers = config.get("vision_n_layers")
    if (isinstance(vision_layers, int) and vision_layers > 0) or \
            VISION_ARCHITECTURE in architectures:
        return []
    return [{"folder": str(node.model.folder),
             "architecture": ", ".join(architectures) or "no architectures"}]


def dspark_config_problems(node: Node) -> list[Problem]:
    """DSpark on for a DeepSeek-V4 checkpoint whose config.json has no target layers for the
    draft: vLLM 0.33.0 builds the draft from that config and reads dspark_target_layer_ids
    as it does, unconditionally (DSparkDeepseekV4Model.__init__,
    vllm/models/deepseek_v4/nvidia/dspark.py)."""
    config = node.deepseek_v4()
    if config is None or node.model is None or not node.layout.dspark:
        return []
    targets = config.get(DSPARK_LAYERS)
    if isinstance(targets, list) and targets and all(type(t) is int for t in targets):
        return []
    return [{"file": str(node.model.folder / CONFIG), "key": DSPARK_LAYERS}]


# --- the context length ----------------------------------------------------------------
# vLLM 0.33.0 derives the longest max_model_len a model takes from its config
# (_get_and_verify_max_len, vllm/config/model.py; derive_max_model_len_and_key,
# vllm/transformers_utils/model_arch_config_convertor.py) and refuses a longer
# --max-model-len unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is on.

# the keys vLLM reads the length from, in its order: the smallest given counts
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
               "model_max_length", "max_target_positions", "max_sequence_length",
               "max_seq_length", "seq_len")
# rope types whose positions the config already gives scaled: vLLM applies no factor
SCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
GENERATIVE = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
TOKENIZER_CONFIG = "tokenizer_config.json"


@dataclass(frozen=True)
class ModelLength:
    """The longest MAX_MODEL_LEN vLLM takes for a model: the length it derives (`derived`,
    `how` it got there), or the config's own model_max_length where that is longer."""

    derived: int
    how: str
    ceiling: int


def model_length(config: Mapping[str, Any], folder: Path | None = None) -> ModelLength | None:
    """vLLM's derived length of the model whose config.json is `config` (and whose
    tokenizer_config.json lies in `folder`); None when the config gives no length key, for
    then vLLM takes any MAX_MODEL_LEN. Keys config.json leaves out take transformers' class
    defaults, which are not known here."""
    text = _text_config(config)
    base = _base_length(config, text, folder)
    if base is None:
        return None
    length, how = base
    factor, rope = _rope_factor(text)
    if factor != 1:
        length, how = length * factor, f"{how} x rope factor {factor:g} ({rope})"
    derived = math.floor(length)
    override = _size(text.get("model_max_length"))  # vLLM lets a longer one through
    return ModelLength(derived, how, math.floor(max(derived, override or 0)))


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Where a multimodal checkpoint keeps its language model's fields (vLLM's hf_text_config)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def _size(value: Any) -> float | None:
    """A positive number of the config, or None (absent, null, not a number)."""
    return float(value) if type(value) in (int, float) and value > 0 else None


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _base_length(config: Mapping[str, Any], text: Mapping[str, Any],
                 folder: Path | None) -> tuple[float, str] | None:
    """(length, where it comes from) before rope scaling: the config's length key, or the
    tokenizer's model_max_length where vLLM weighs it and it is shorter."""
    given, tokenizer = _config_length(text), _tokenizer_length(config, folder)
    options = [(given[0], f"{given[1]} {_number(given[0])}")] if given else []
    if tokenizer is not None:
        options.append((tokenizer, f"{TOKENIZER_CONFIG}'s model_max_length "
                                   f"{_number(tokenizer)}"))
    return min(options, key=lambda option: option[0]) if options else None


def _config_length(text: Mapping[str, Any]) -> tuple[float, str] | None:
    """(length, key): the smallest length key given, the first of equals; model_max_length
    wherever it is given, for vLLM reads it again last and keeps it (Command-R's)."""
    given = [(size, key) for key in LENGTH_KEYS if (size := _size(text.get(key)))]
    override = _size(text.get("model_max_length"))
    if not given or override:
        return (override, "model_max_length") if override else None
    least = min(size for size, _ in given)
    return least, next(key for size, key in given if size == least)


def _tokenizer_length(config: Mapping[str, Any], folder: Path | None) -> float | None:
    """The tokenizer's model_max_length, which vLLM weighs only for a pooling model with
    absolute position embeddings (ModelConfig.get_and_verify_max_len): taken here as a
    config with position_embedding_type "absolute" and no generative architecture."""
    architectures = [str(name) for name in config.get("architectures") or []]
    if folder is None or config.get("position_embedding_type") != "absolute" or \
            any(name.endswith(GENERATIVE) for name in architectures):
        return None
    try:
        return _size(_json_object(folder / TOKENIZER_CONFIG).get("model_max_length"))
    except (BadFile, OSError):  # vLLM reads no tokenizer config it cannot parse either
        return None


def _rope_factor(text: Mapping[str, Any]) -> tuple[float, str]:
    """(factor, rope type): what vLLM multiplies the length by, the last factor of a rope
    type not in SCALED_ROPE over the layer types' parameters; 1 for Gemma 3, whose
    positions are given scaled."""
    parameters = text.get("rope_parameters") or text.get("rope_scaling")
    if not isinstance(parameters, dict) or "gemma3" in str(text.get("model_type", "")):
        return 1.0, ""
    values = list(parameters.values())
    layers = values if values and all(isinstance(v, dict) for v in values) else [parameters]
    factor: Any = 1.0
    rope = ""
    for layer in layers:
        kind = str(layer.get("rope_type") or layer.get("type") or "default")
        if kind not in SCALED_ROPE and "factor" in layer:
            factor, rope = layer["factor"], kind
    scale = _size(factor)  # vLLM falls back to 1 for a null factor
    return (scale, rope) if scale else (1.0, "")


def max_model_len_problems(node: Node) -> list[Problem]:
    """MAX_MODEL_LEN above the longest vLLM derives from the model's config: vLLM stops at
    start (a warning rule instead where VLLM_ALLOW_LONG_MAX_MODEL_LEN lets it go on)."""
    model, wanted = node.model, node.layout.max_model_len
    if model is None or model.problem or wanted is None:
        return []
    length = model_length(model.config, model.folder)
    if length is None or wanted <= length.ceiling:
        return []
    return [{"folder": str(model.folder), "derived": str(length.derived), "how": length.how,
             "ceiling": str(length.ceiling)}]


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
            "why": B12X_BATCHED,
            "remedy": "LINEAR_BACKEND=deep_gemm (or auto) takes DeepGEMM, whose processing "
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
#
# What vLLM 0.33.0 allocates on each rank, in the order it allocates it (docs/reference/
# preflight.md, "The model checks"): the weights; the profiling run's activations and the
# CUDA graphs (vllm/v1/worker/gpu_worker.py determine_available_memory); the KV cache gets
# the rest of its budget, GPU_MEMORY_UTILIZATION x total memory (vllm/v1/worker/utils.py
# request_memory). The KV cache is counted from DeepSeek-V4's per-layer cache specs with
# the entrypoint's `--kv-cache-dtype fp8 --block-size 256`; the activations are an
# estimate, since vLLM measures them at start.

BLOCK = 256  # the entrypoint's --block-size: the compressed caches' block
SWA_BLOCK = 64  # DeepseekV4SWACache's block (vllm/v1/attention/backends/mla/sparse_swa.py)
PACKED_TOKEN = 584  # fp8_ds_mla: 448 B NoPE + 128 B RoPE + 8 B scales per token or state
PAGE_ALIGN = 576  # fp8_ds_mla pages round up to 576 B (_apply_alignment_padding)
INDEXER_STATE = 132  # FP8 indexer key: 128 B + 4 B scale (DeepseekV4Indexer)
STATE_BYTES = 4  # the compressors' states are float32 (CompressorStateCache)
DRAFT_LAYERS = 3  # DSpark's decoder layers when the config has no n_mtp_layers
# async scheduling, on by default, keeps two batches in flight (VllmConfig.max_in_flight_tokens)
BATCHES_IN_FLIGHT = 2
DEFAULT_BATCHED = 2048  # vLLM's max_num_batched_tokens on a GB10 API server (arg_utils.py)
DEFAULT_CONTEXT = 1048576  # DeepseekV4Config's max_position_embeddings
# Assumptions, not read from vLLM's code: vLLM measures these at start
# (profile_cudagraph_memory; non_torch_increase in vllm/utils/mem_utils.py memory_profiling)
CUDA_GRAPHS = 2 * GIB  # the target's and the draft's graphs
NON_TORCH = 1 * GIB  # CUDA context, NCCL and kernel workspaces


def gib(size: float) -> str:
    return f"{size / GIB:.1f}"


def _round_up(size: int, to: int) -> int:
    return -(-size // to) * to


@dataclass(frozen=True)
class Cache:
    """A kind of KV cache a layer holds, as its vLLM spec sizes it: tokens per block, bytes
    per page (padded as vLLM pads it), and the sliding window (None: the whole sequence)."""

    name: str
    block: int
    page: int
    window: int | None = None

    def sequence(self, tokens: int) -> int:
        """Bytes one sequence of TOKENS holds: every block (FullAttentionSpec), or its window
        plus one block a window may straddle (SlidingWindowSpec)."""
        held = tokens if self.window is None else min(self.window, tokens)
        return (-(-held // self.block) + (self.window is not None)) * self.page

    def in_flight(self, batched: int, tokens: int) -> int:
        """What a sliding cache holds beyond its window for the tokens in flight, counted
        once (max_admission_blocks_per_request adds them to each request's window)."""
        if self.window is None:
            return 0
        held = min(self.window - 1 + BATCHES_IN_FLIGHT * batched, tokens)
        return max(0, (-(-held // self.block) + 1) * self.page - self.sequence(tokens))


def compress_ratios(config: Mapping[str, Any]) -> list[int] | None:
    """Each target layer's compress ratio (1: sliding window only), as vLLM builds them from
    transformers' DeepseekV4Config: `compress_ratios` (0/4/128 per layer, the draft's after
    the target's), else `layer_types` with `compress_rates`, else its default (two heavily
    compressed layers, then compressed sparse and heavily compressed in turn)."""
    layers = config.get("num_hidden_layers")
    if type(layers) is not int or layers <= 0:
        return None
    given = config.get("compress_rates")
    rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128,
             **(given if isinstance(given, dict) else {})}
    ratios = config.get("compress_ratios")
    types = config.get("layer_types")
    if isinstance(ratios, list):
        chosen = ratios[:layers]
    elif isinstance(types, list):
        chosen = [rates.get(kind, 0) for kind in types[:layers]]
    else:
        chosen = [128] * min(layers, 2) + [4 if i % 2 else 128 for i in range(layers - 2)]
    if len(chosen) != layers or not all(type(r) is int and r in (0, 4, 128) for r in chosen):
        return None  # unreadable: model-unreadable reports a bad compress_ratios
    return [max(1, ratio) for ratio in chosen]


def _sliding(name: str, block: int, token: int, window: int) -> Cache:
    return Cache(name, block, _round_up(block * token, PAGE_ALIGN), window)


def _compressed(name: str, ratio: int, state: int) -> Cache:
    return Cache(name, BLOCK, _round_up(BLOCK // ratio * state, PAGE_ALIGN))


def layer_caches(ratio: int, head_dim: int, index_dim: int, window: int) -> list[Cache]:
    """The caches of one attention layer at fp8_ds_mla (what `--kv-cache-dtype fp8` becomes
    with the SM12x FlashInfer sparse MLA class, _resolve_dsv4_kv_cache_dtype), from the
    get_kv_cache_spec of vllm/models/deepseek_v4/attention.py and compressor.py."""
    caches = [_sliding("sliding window", SWA_BLOCK, PACKED_TOKEN, window)]
    if ratio == 1:
        return caches
    overlap = 2 if ratio == 4 else 1  # the ratio-4 compressor overlaps its windows
    caches += [_compressed(f"compressed 1:{ratio}", ratio, PACKED_TOKEN),
               _sliding(f"compressor 1:{ratio} state", 4 if ratio == 4 else 8,
                        2 * overlap * head_dim * STATE_BYTES, overlap * ratio)]
    if ratio == 4:  # only the compressed sparse layers have the indexer
        caches += [_compressed("indexer keys", ratio, index_dim + index_dim // 128 * 4),
                   _sliding("indexer compressor state", 4, 2 * 2 * index_dim * STATE_BYTES,
                            8)]
    return caches


def model_caches(config: Mapping[str, Any], dspark: bool) -> list[Cache] | None:
    """Every cache of every layer on one rank: MLA keeps one latent head, so each rank holds
    the whole KV cache whatever TP (max_tp_shards=1). The DSpark draft's decoder layers are
    sliding window only (their layer index is past num_hidden_layers)."""
    ratios = compress_ratios(config)
    c = _ints(config, "head_dim", "index_head_dim", "sliding_window")
    if ratios is None or c is None:
        return None
    draft = (_ints(config, "n_mtp_layers") or {"n_mtp_layers": DRAFT_LAYERS})["n_mtp_layers"] \
        if dspark else 0
    return [cache for ratio in ratios + [1] * draft
            for cache in layer_caches(ratio, c["head_dim"], c["index_head_dim"],
                                      c["sliding_window"])]


@dataclass(frozen=True)
class Budget:
    """What vLLM allocates on one rank against what it may (bytes); `kv` None: not known
    for this model, whose budget counts its weights and the allowances only."""

    weights: float
    kv: float | None
    activations: float
    budget: float
    context: int
    sequences: int
    batched: int

    @property
    def needed(self) -> float:
        return self.weights + self.activations + (self.kv or 0)

    @property
    def kv_room(self) -> float:
        """What is left of the budget for the KV cache after weights and activations."""
        return self.budget - self.weights - self.activations


def activations(config: Mapping[str, Any], tp: int, context: int, batched: int) -> float:
    """An estimate of the profiling run's peak beyond the weights (vLLM measures it:
    transient_peak_headroom, non_torch_increase, the CUDA graph estimate): one layer's
    buffers for MAX_NUM_BATCHED_TOKENS tokens (the hyper-connection streams in float32, the
    MoE's gate-up and down outputs per routed expert, the attention's queries and output in
    BF16), the indexer's prefill gather (get_max_prefill_buffer_size, vllm/v1/attention/
    backends/mla/indexer.py), plus the CUDA_GRAPHS and NON_TORCH allowances."""
    c = _ints(config, "hidden_size", "hc_mult", "num_experts_per_tok", "moe_intermediate_size",
              "num_attention_heads", "head_dim", "index_head_dim")
    if c is None:
        return CUDA_GRAPHS + NON_TORCH
    per_token = (2 * c["hc_mult"] * c["hidden_size"] * 4
                 + c["num_experts_per_tok"] * (2 * c["moe_intermediate_size"] // tp
                                               + c["hidden_size"]) * 2
                 + 2 * c["num_attention_heads"] // tp * c["head_dim"] * 2)
    factor = 5 if context <= 256 * 1024 else 2  # sparse_mla_prefill_workspace_factor
    gather = context * (576 * 2 // INDEXER_STATE) * factor * INDEXER_STATE
    return batched * per_token + gather + CUDA_GRAPHS + NON_TORCH


def kv_cache(caches: list[Cache], context: int, sequences: int, batched: int) -> int:
    """MAX_NUM_SEQS sequences of MAX_MODEL_LEN tokens each (each cache's
    max_memory_usage_bytes for one request, in vllm/v1/kv_cache_interface.py), the sliding
    caches' share of the batches in flight counted once."""
    return sum(sequences * cache.sequence(context) + cache.in_flight(batched, context)
               for cache in caches)


def node_budget(node: Node) -> Budget | None:
    """The rank's budget; None without the weights' size or the device memory."""
    model, device, layout = node.model, node.device, node.layout
    if model is None or model.total_size is None or device is None:
        return None
    config = node.deepseek_v4()
    context = layout.max_model_len or _max_position(model.config)
    sequences = layout.max_num_seqs or 1  # unset: vLLM's own minimum, one full request
    batched = layout.max_num_batched_tokens or DEFAULT_BATCHED
    caches = model_caches(config, layout.dspark) if config is not None else None
    return Budget(
        weights=model.total_size / layout.tp_size,
        kv=None if caches is None else kv_cache(caches, context, sequences, batched),
        activations=activations(config or {}, layout.tp_size, context, batched),
        budget=device.total * layout.utilization, context=context, sequences=sequences,
        batched=batched)


def _max_position(config: Mapping[str, Any]) -> int:
    """vLLM's max_model_len when MAX_MODEL_LEN is unset: the model's own."""
    value = config.get("max_position_embeddings")
    return value if type(value) is int and value > 0 else DEFAULT_CONTEXT


def needed_utilization(budget: Budget, device: Device) -> float:
    """The least GPU_MEMORY_UTILIZATION, in hundredths, whose budget holds it all."""
    return math.ceil(budget.needed / device.total * 100) / 100


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
    """The rank's budget: weights + activations + KV cache within utilization x total memory.
    vLLM stops at start when the weights and activations leave no room for the KV cache
    (vllm/v1/core/kv_cache_planning.py _check_enough_kv_cache_memory); the budget asks room
    for MAX_NUM_SEQS sequences of MAX_MODEL_LEN, not only the one vLLM insists on."""
    budget, device = node_budget(node), node.device
    if budget is None or device is None or budget.needed <= budget.budget:
        return []
    return [{**budget_fields(node, budget, device),
             "remedy": _fit_remedy(node, budget, device)}]


def budget_fields(node: Node, budget: Budget, device: Device) -> Problem:
    assert node.model is not None and node.model.total_size is not None
    kv = "an unknown size (only DeepSeek-V4's cache specs are known here)" if budget.kv is None \
        else f"{gib(budget.kv)} GiB"
    return {"weights": gib(budget.weights), "total": gib(node.model.total_size),
            "activations": gib(budget.activations), "kv": kv,
            "room": f"{gib(budget.kv_room)} GiB" if budget.kv_room > 0 else
                    f"nothing ({gib(-budget.kv_room)} GiB short)",
            "needed": gib(budget.needed),
            "budget": gib(budget.budget), "device": gib(device.total), "source": device.source,
            "sequences": _sequences_text(node.layout, budget), "batched": str(budget.batched),
            "free": _free_text(node)}


def _sequences_text(layout: Layout, budget: Budget) -> str:
    """What the KV cache is counted for, and where an unset variable chose it."""
    unset = [text for text, given in (
        ("MAX_NUM_SEQS unset: one, the least vLLM starts with", layout.max_num_seqs),
        ("MAX_MODEL_LEN unset: the model's max_position_embeddings", layout.max_model_len))
        if not given]
    counted = f"{budget.sequences} x {budget.context} tokens"
    return f"{counted} ({'; '.join(unset)})" if unset else counted


def _free_text(node: Node) -> str:
    free = node.free
    if free is None:
        return ("the free memory is not known here (no GPU to ask): vLLM also refuses to "
                "start when it is below the budget")
    return f"the free memory now is {gib(free.total)} GiB ({free.source})"


def _fit_remedy(node: Node, budget: Budget, device: Device) -> str:
    needed = needed_utilization(budget, device)
    ceiling = host_margin(device.total, node.memory).ceiling
    shorter = f"lower MAX_MODEL_LEN or MAX_NUM_SEQS, or {_more_nodes(node, budget)}"
    if needed <= ceiling:
        return (f"set GPU_MEMORY_UTILIZATION={needed:g} or more (the host margin allows up to "
                f"{ceiling:g}), or {shorter}")
    if needed <= 1:
        return (f"set GPU_MEMORY_UTILIZATION={needed:g} or more, which leaves the host less "
                f"than the reference's margin (host-memory-margin: {ceiling:g}), or {shorter}")
    return f"no GPU_MEMORY_UTILIZATION fits it here (it would take {needed:g}): {shorter}"


def _more_nodes(node: Node, budget: Budget) -> str:
    """The least TP_SIZE whose share of the weights leaves room for the rest."""
    assert node.model is not None and node.model.total_size is not None
    room = budget.budget - budget.activations - (budget.kv or 0)
    if room <= 0:
        return "spread the weights over more nodes (the rest alone exceeds the budget)"
    return (f"spread the weights over more nodes, TP_SIZE="
            f"{max(node.layout.tp_size + 1, math.ceil(node.model.total_size / room))} or more")


def free_memory_problems(node: Node) -> list[Problem]:
    """vLLM's start-up check (request_memory): the free memory, as vLLM reads it (on a
    unified-memory GPU the host's available memory), must hold the whole budget."""
    device, free = node.device, node.free
    if device is None or free is None:
        return []
    budget = device.total * node.layout.utilization
    if free.total >= budget:
        return []
    most = math.floor(free.total / device.total * 100) / 100  # the highest that fits now
    return [{"free": gib(free.total), "source": free.source, "budget": gib(budget),
             "device": gib(device.total), "most": f"{most:g}"}]


def host_margin_problems(node: Node) -> list[Problem]:
    """The host's share of the same memory: warned of when the utilization leaves less than
    the reference's margin, and is above what the rank's budget needs (lowering it further
    would stop vLLM, which fit_problems reports)."""
    device = node.device
    if device is None:
        return []
    margin = host_margin(device.total, node.memory)
    left = (1 - node.layout.utilization) * device.total
    budget = node_budget(node)
    needed = 0.0 if budget is None else needed_utilization(budget, device)
    highest = max(margin.ceiling, needed)
    if left >= margin.needed or node.layout.utilization <= highest:
        return []
    remedy = f"set GPU_MEMORY_UTILIZATION={highest:g} or less" + (
        "" if needed <= margin.ceiling else
        f", what this layout's memory budget needs (the host margin alone would allow "
        f"{margin.ceiling:g})")
    return [{"left": gib(left), "device": gib(device.total), "source": device.source,
             "needed": gib(margin.needed), "reference": gib(margin.reference),
             "host_use": gib(margin.host_use), "floor": gib(margin.floor),
             "ceiling": f"{margin.ceiling:g}", "remedy": remedy,
             **{name: f"{figure:g}" for name, figure in node.memory.items()
                if isinstance(figure, int | float)}}]


CHECKS: dict[str, Callable[[Node], list[Problem]]] = {
    "model-files": model_file_problems, "model-index": index_problems,
    "text-checkpoint": text_checkpoint_problems,
    "dspark-config": dspark_config_problems, "max-model-len": max_model_len_problems,
    "moe-shape": moe_problems, "moe-activations": moe_activation_problems,
    "linear-shape": linear_problems, "fit": fit_problems,
    "free-memory": free_memory_problems, "host-margin": host_margin_problems,
}
