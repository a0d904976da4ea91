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
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal


def _sibling(name: str) -> ModuleType:
    """A module of this file's folder (in the image, the files baked beside it), loaded
    once under a name of its own, as preflight.py loads this one."""
    module_name = f"sparkbake_image_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name,
                                                      Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


kv_plan = _sibling("kv_plan")
memory_budget = _sibling("memory_budget")

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
GIB = 1 << 30
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
    nodes: int = 1  # NNODES: more than one, the head carries the API server, workers not
    dcp_size: int = 1
    pin: int | None = None  # KV_CACHE_MEMORY_BYTES
    block_size: int = 256  # the entrypoint's --block-size, or SERVE_EXTRA_ARGS' last
    kv_cache_dtype: str = "fp8"  # the entrypoint's --kv-cache-dtype, or SERVE_EXTRA_ARGS' last


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
    memory as vLLM reads it (the GPU's, else the tag's declared device_memory_gib; asked
    once, when needed), its free memory (when this machine is the node), the memory
    figures of preflight.json `memory`, and the non-KV share `up` measured per rank kind
    for a layout (`measured(role, layout_key)`: bytes and when; None where none was)."""

    def __init__(self, layout: Layout, folder: Path | None, declared_gib: float | None,
                 gpu_memory: Callable[[], int | None], memory: Mapping[str, Any],
                 free_memory: Callable[[], Device | None] = lambda: None,
                 measured: Callable[[str, str], tuple[float, str] | None] | None = None
                 ) -> None:
        self.layout = layout
        self.model = read_model(folder)
        self.memory = memory
        self.measured = measured
        self._declared_gib = declared_gib
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
        if self._declared_gib:
            return Device(int(self._declared_gib * GIB),
                          f"the tag's device_memory_gib: {self._declared_gib:g}, what "
                          f"cudaMemGetInfo reports")
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
# Will vLLM start on each rank, and with how much KV cache (memory_budget.py says how vLLM
# decides it; kv_plan.py is its KV cache planner for DeepSeek-V4, with the entrypoint's
# `--kv-cache-dtype fp8 --block-size 256`). The non-KV share is a model: vLLM measures it at
# start, and its constants are fitted to the reference deployments' figures
# (preflight.json `memory`; tests/data/reference-memory.json lists each figure).

INDEXER_STATE = 132  # FP8 indexer key: 128 B + 4 B scale (DeepseekV4Indexer)
DEFAULT_BATCHED = 2048  # vLLM's max_num_batched_tokens on a GB10 API server (arg_utils.py)
DEFAULT_CONTEXT = 1048576  # DeepseekV4Config's max_position_embeddings


def gib(size: float) -> str:
    return f"{size / GIB:.1f}"


def activations(config: Mapping[str, Any], tp: int, context: int, batched: int) -> float:
    """An estimate of the profiling run's transient peak (vLLM measures it:
    transient_peak_headroom in vllm/utils/mem_utils.py memory_profiling): one layer's
    buffers for MAX_NUM_BATCHED_TOKENS tokens (the hyper-connection streams in float32, the
    MoE's gate-up and down outputs per routed expert, the attention's queries and output in
    BF16) and the indexer's prefill gather (get_max_prefill_buffer_size,
    vllm/v1/attention/backends/mla/indexer.py)."""
    c = _ints(config, "hidden_size", "hc_mult", "num_experts_per_tok", "moe_intermediate_size",
              "num_attention_heads", "head_dim", "index_head_dim")
    if c is None:
        return 0.0
    per_token = (2 * c["hc_mult"] * c["hidden_size"] * 4
                 + c["num_experts_per_tok"] * (2 * c["moe_intermediate_size"] // tp
                                               + c["hidden_size"]) * 2
                 + 2 * c["num_attention_heads"] // tp * c["head_dim"] * 2)
    factor = 5 if context <= 256 * 1024 else 2  # sparse_mla_prefill_workspace_factor
    gather = context * (576 * 2 // INDEXER_STATE) * factor * INDEXER_STATE
    return float(batched * per_token + gather)


def context_of(node: Node) -> int:
    """vLLM's max_model_len: MAX_MODEL_LEN, else the model's max_position_embeddings."""
    if node.layout.max_model_len:
        return node.layout.max_model_len
    value = (node.model.config if node.model else {}).get("max_position_embeddings")
    return value if type(value) is int and value > 0 else DEFAULT_CONTEXT


def kv_planner(node: Node) -> Callable[..., Any]:
    """vLLM's planner for this node's layout at a max_model_len (kv_plan.py); it gives None
    for a model or a layout whose cache specs are not modelled (vLLM refuses DeepSeek-V4 at
    DCP > 1: dcp-size-unsupported says so)."""
    config, layout = (node.model.config if node.model else None), node.layout

    def plan_at(context: int, batched: int | None = None) -> Any:
        if not config:
            return None
        try:
            return kv_plan.plan(config, kv_plan.Layout(
                max_model_len=context, tp_size=layout.tp_size, dcp_size=layout.dcp_size,
                dspark=layout.dspark, block_size=layout.block_size,
                kv_cache_dtype=layout.kv_cache_dtype,
                max_num_batched_tokens=batched or layout.max_num_batched_tokens or
                DEFAULT_BATCHED))
        except ValueError:
            return None
    return plan_at


def rank_share(node: Node, role: str, calibration: Any) -> Any:
    """The rank's non-KV share: the model's, or the one `up` measured for this layout."""
    measured = node.measured(role, layout_key(node)) if node.measured else None
    if measured is not None:
        spent, when = measured
        return memory_budget.Share(0, 0, 0, 0, 0, measured=when, measured_total=spent)
    assert node.model is not None
    layout, config, total = node.layout, node.deepseek_v4() or {}, node.model.total_size
    return memory_budget.Share(
        weights=0.0 if total is None else total / layout.tp_size, weighed=total is not None,
        activations=activations(config, layout.tp_size, context_of(node),
                                layout.max_num_batched_tokens or DEFAULT_BATCHED),
        cuda_graphs=calibration.cuda_graphs, runtime=calibration.runtime,
        api_server=calibration.api_server if role == "head" else 0.0)


def layout_key(node: Node) -> str:
    """What the non-KV share depends on, as words: the key of a measured share."""
    layout = node.layout
    return (f"TP {layout.tp_size} on {layout.nodes} node(s), DCP {layout.dcp_size}, "
            f"{'DSpark' if layout.dspark else 'no draft'}, {context_of(node)} tokens, "
            f"{layout.max_num_batched_tokens or DEFAULT_BATCHED} batched")


def node_ranks(node: Node) -> list[Any] | None:
    """The budget of each kind of rank of the layout (the head, and a worker where there
    are more nodes); None without a model, or where the pool is not pinned, without the
    weights' size or the device memory."""
    model, device, layout = node.model, node.device, node.layout
    if model is None or (layout.pin is None and (model.total_size is None or device is None)):
        return None
    calibration = memory_budget.Calibration.of(node.memory)
    roles = ["head"] if layout.nodes <= 1 else ["head", "worker"]
    plan = kv_planner(node)(context_of(node))
    budget: list[Any] = memory_budget.ranks(
        roles, device.total if device else 0, layout.utilization, layout.pin,
        {role: rank_share(node, role, calibration) for role in roles}, plan)
    return budget


def memory_figures(node: Node) -> list[dict[str, Any]]:
    """Each rank kind's figures (memory_budget.figures) and the layout's key; none where
    the budget is unknown."""
    budget, device = node_ranks(node), node.device
    if not budget:
        return []
    source = device.source if device else "not known; the pool is pinned"
    pool = memory_budget.least_room(budget).room
    layout = node.layout
    shape = {"layout": layout_key(node), "tp_size": layout.tp_size, "dspark": layout.dspark,
             "max_num_batched_tokens": layout.max_num_batched_tokens or DEFAULT_BATCHED,
             "model_type": (node.model.config if node.model else {}).get("model_type")}
    return [{**memory_budget.figures(rank, context_of(node), source, pool, layout.max_num_seqs),
             **shape} for rank in budget]


def fit_problems(node: Node) -> list[Problem]:
    """vLLM's rule on the rank with the least room: there is KV room, and one request of
    max_model_len fits it (_check_enough_kv_cache_memory). A pinned pool is pin_problems'."""
    budget, device = node_ranks(node), node.device
    if budget is None or device is None or node.layout.pin is not None:
        return []
    rank = memory_budget.least_room(budget)
    if rank.starts:
        return []
    return [{**_rank_fields(node, rank, device), "remedy": _fit_remedy(node, rank)}]


def _rank_fields(node: Node, rank: Any, device: Device) -> Problem:
    plan = rank.plan
    room = f"{gib(rank.room)} GiB" if rank.room > 0 else \
        f"nothing ({gib(-rank.room)} GiB short)"
    request = f"an unknown size ({memory_budget.UNPLANNED})" if plan is None else \
        f"{gib(plan.least_available)} GiB"
    return {"role": rank.role, "device": gib(device.total), "source": device.source,
            "requested": gib(rank.requested), "non_kv": gib(rank.share.total),
            "parts": rank.share.parts(), "room": room, "request": request,
            "context": str(context_of(node)), "free": _free_text(node),
            "batched": str(node.layout.max_num_batched_tokens or DEFAULT_BATCHED)}


def _free_text(node: Node) -> str:
    free = node.free
    if free is None:
        return ("the free memory is not known here (no GPU to ask): vLLM also refuses to "
                "start when it is below the budget")
    return f"the free memory now is {gib(free.total)} GiB ({free.source})"


def _fit_remedy(node: Node, rank: Any) -> str:
    """Which setting to change, and to what: the utilization that fits, the longest
    MAX_MODEL_LEN that fits, or more nodes."""
    ways = []
    needed = memory_budget.needed_utilization(rank)
    if needed is not None:
        ceiling = host_margin(rank.total, node.memory).ceiling
        ways.append(f"set GPU_MEMORY_UTILIZATION={needed:g} or more" + (
            "" if needed <= ceiling else
            f" (above the host margin's {ceiling:g}: see host-memory-margin)"))
    batched = _largest_batched(node, rank) if rank.room > 0 else None
    if batched:
        ways.append(f"set MAX_NUM_BATCHED_TOKENS={batched} or less (the sliding-window "
                    f"caches hold two batches in flight for each request)")
    longest = _longest_context(node, rank) if rank.room > 0 else None
    if longest:
        ways.append(f"set MAX_MODEL_LEN={longest} or less")
    ways.append(_more_nodes(node, rank))
    return "; or ".join(ways)


def _longest_context(node: Node, rank: Any) -> int | None:
    """The longest MAX_MODEL_LEN whose one request fits the room, as vLLM estimates it in
    its refusal (kv_plan.KvPlan.longest), in whole blocks of 256."""
    longest = rank.plan.longest(int(rank.room)) // 256 * 256 if rank.plan else 0
    return longest or None


def _largest_batched(node: Node, rank: Any) -> int | None:
    """The largest MAX_NUM_BATCHED_TOKENS, in steps of 256 below the one set, at which one
    request of MAX_MODEL_LEN fits the room (a smaller batch also lowers the activations:
    this errs on the side of less)."""
    planner, context = kv_planner(node), context_of(node)
    now = node.layout.max_num_batched_tokens or DEFAULT_BATCHED
    for batched in range((now - 1) // 256 * 256, 0, -256):
        plan = planner(context, batched)
        if plan is None:
            return None
        if not plan.refused(int(rank.room)):
            return batched
    return None


def _more_nodes(node: Node, rank: Any) -> str:
    """The least TP_SIZE whose share of the weights leaves room for the rest."""
    assert node.model is not None and node.model.total_size is not None
    rest = rank.share.total - rank.share.weights + (rank.plan.request_bytes if rank.plan else 0)
    room = rank.requested - rest
    if room <= 0 or rank.share.measured:
        return "spread the weights over more nodes"
    return (f"spread the weights over more nodes, TP_SIZE="
            f"{max(node.layout.tp_size + 1, math.ceil(node.model.total_size / room))} or more")


def pin_problems(node: Node) -> list[Problem]:
    """A pinned KV_CACHE_MEMORY_BYTES, as vLLM takes it: the pool is the pin, whatever the
    utilization (determine_available_memory skips the profile's budget), so the pin plus
    the non-KV share must leave the host's floor free; and one request must still fit it
    (the planner's check still runs on the pin)."""
    budget, device, pin = node_ranks(node), node.device, node.layout.pin
    if budget is None or pin is None:
        return []
    rank = max(budget, key=lambda each: each.share.total)
    calibration = memory_budget.Calibration.of(node.memory)
    floor = calibration.floor * rank.total + calibration.min_free
    most = int(rank.total - floor - rank.share.total)
    fields = {"pin": gib(pin), "footprint": gib(rank.footprint), "floor": gib(floor)}
    if device is not None and rank.share.weighed and rank.footprint + floor > device.total:
        return [{**_rank_fields(node, rank, device), **fields, "problem": (
            f"and the {rank.role}'s non-KV share of ~{gib(rank.share.total)} GiB hold "
            f"{gib(rank.footprint)} GiB of the {gib(device.total)} GiB ({device.source}), "
            f"leaving less than the host's floor of {gib(floor)} GiB"),
            "remedy": _pin_remedy(rank, most)}]
    if not rank.starts and rank.plan is not None:
        return [{**fields, "problem": (
            f"cannot hold one request of {context_of(node)} tokens, which needs "
            f"{gib(rank.plan.least_available)} GiB"),
            "remedy": f"set KV_CACHE_MEMORY_BYTES={rank.plan.least_available} or more, or "
                      f"MAX_MODEL_LEN={_longest_context(node, rank) or 256} or less"}]
    return []


def _pin_remedy(rank: Any, most: int) -> str:
    if most <= 0:
        return "the non-KV share alone leaves no room: spread the weights over more nodes"
    if rank.plan is not None and rank.plan.least_available > most:
        return (f"no pin fits both one request ({gib(rank.plan.least_available)} GiB) and the "
                f"floor: lower MAX_MODEL_LEN or spread the weights over more nodes")
    return (f"set KV_CACHE_MEMORY_BYTES={most} or less, or leave it empty to size the pool "
            f"by GPU_MEMORY_UTILIZATION")


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
    reference = (1 - memory["reference_utilization"]) * memory["reference_total_gib"] * GIB
    host_use = reference - memory["least_free_gib"] * GIB
    floor = memory["earlyoom_free_percent"] / 100 * device
    needed = host_use + floor
    return Margin(reference, host_use, floor, needed,
                  math.floor((1 - needed / device) * 100) / 100)


def free_memory_problems(node: Node) -> list[Problem]:
    """vLLM's start-up check (request_memory): the free memory, as vLLM reads it (on a
    unified-memory GPU the host's available memory), must hold the whole budget."""
    device, free = node.device, node.free
    if device is None or free is None:
        return []
    budget = math.ceil(device.total * node.layout.utilization)
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
    if device is None or node.layout.pin is not None:
        return []
    margin = host_margin(device.total, node.memory)
    left = (1 - node.layout.utilization) * device.total
    budget = node_ranks(node)
    needed = [memory_budget.needed_utilization(rank) for rank in budget or []]
    need = max((n for n in needed if n is not None), default=0.0)
    highest = max(margin.ceiling, need)
    if left >= margin.needed or node.layout.utilization <= highest:
        return []
    remedy = f"set GPU_MEMORY_UTILIZATION={highest:g} or less" + (
        "" if need <= margin.ceiling else
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
    "kv-pin": pin_problems,
}
