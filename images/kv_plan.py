"""sparkbake's model of vLLM's KV cache planner for DeepSeek-V4, to the byte.

Standard library only, Python >= 3.10. Baked beside preflight.py, which loads it as a sibling
file. vLLM 0.33.0 and 0.34.0 plan the cache in the engine core the same way
(vllm/v1/core/kv_cache_planning.py, vllm/v1/core/kv_cache_utils.py): each layer's cache spec
(vllm/v1/kv_cache_interface.py) as DeepSeek-V4's layers give it (vllm/models/deepseek_v4/
attention.py, compressor.py, vllm/v1/attention/backends/mla/sparse_swa.py); the layers packed
into groups whose pages share one block (`_get_packed_kv_cache_groups`: DeepSeek-V4's indexer
backend admits only block-outermost layouts); a block of the pool as wide as the widest group;
one request of max_model_len as the sum of each group's blocks. The smoke check kv-plan holds
this model to the image's own planner (smoke_kv.py).

The caches are those of the FlashInfer sparse MLA class vLLM takes on SM12x, whose layout is
fp8_ds_mla (what `--kv-cache-dtype fp8` becomes: `_resolve_dsv4_kv_cache_dtype`). MLA keeps one
latent head, so every rank holds the whole cache whatever the TP (`max_tp_shards=1`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

BLOCK = 256  # the entrypoint's --block-size: the compressed caches' block
SWA_BLOCK = 64  # DeepseekV4SWACache's block
STATE_BLOCKS = {4: 4, 128: 8}  # CompressorStateCache's block per compress ratio
PACKED_TOKEN = 584  # fp8_ds_mla: 448 B NoPE + 128 B RoPE + 8 B scales per token or state
PAGE_ALIGN = 576  # fp8_ds_mla pages round up to 576 B (_apply_alignment_padding)
STATE_BYTES = 4  # the compressors' states are float32
INDEX_SCALE = 4  # the FP8 indexer key's float32 scale per 128 values
DRAFT_LAYERS = 3  # DSpark's decoder layers when the config has no n_mtp_layers
FP8_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_ds_mla")  # those fp8_ds_mla takes
CSA, HCA = "compressed_sparse_attention", "heavily_compressed_attention"
LAYER_TYPES = {"sliding_attention", CSA, HCA}  # transformers' DeepseekV4Config
RATIO_TYPES = {0: "sliding_attention", 4: CSA, 128: HCA}  # its legacy compress_ratios
LEGACY_RATES = (("compress_rate_csa", CSA), ("compress_rate_hca", HCA))


@dataclass(frozen=True)
class Layout:
    """What the planner depends on: max_model_len, the engine's shape, and the tokens in
    flight (VllmConfig.max_in_flight_tokens: with async scheduling, as the entrypoint runs
    it, two batches of max_num_batched_tokens, whose default on a GB10 API server is 2048)."""

    max_model_len: int
    tp_size: int = 1
    dcp_size: int = 1
    dspark: bool = False
    block_size: int = BLOCK
    kv_cache_dtype: str = "fp8"
    max_num_batched_tokens: int = 2048
    batches_in_flight: int = 2

    def __post_init__(self) -> None:
        for name in ("max_model_len", "tp_size", "dcp_size", "block_size",
                     "max_num_batched_tokens", "batches_in_flight"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.dcp_size > 1:
            raise ValueError("dcp_size > 1: vLLM asserts on DeepSeek-V4's sliding-window caches "
                             "under DCP (SlidingWindowSpec.max_memory_usage_bytes), and the "
                             "full-attention model here splits no cache over DCP ranks")

    def deepseek_v4(self) -> None:
        """What DeepSeek-V4's caches take; ValueError naming what they do not."""
        if self.block_size != BLOCK:
            raise ValueError(f"block_size {self.block_size}: only the entrypoint's {BLOCK} is "
                             "modelled (DeepSeek-V4's indexer kernels take 256-token blocks)")
        if self.kv_cache_dtype not in FP8_DTYPES:
            raise ValueError(f"kv_cache_dtype {self.kv_cache_dtype!r}: DeepSeek-V4's fp8_ds_mla "
                             "layout on SM12x takes only fp8 (vLLM refuses it too)")

    @property
    def in_flight(self) -> int:
        return self.batches_in_flight * self.max_num_batched_tokens


@dataclass(frozen=True)
class Cache:
    """One layer's cache as its vLLM spec sizes it: tokens per block, bytes per page (padded),
    and the sliding window (None: the whole sequence)."""

    name: str
    block: int
    page: int
    window: int | None = None

    def blocks(self, layout: Layout) -> int:
        """Blocks one request of max_model_len holds: every block of the sequence
        (FullAttentionSpec.max_memory_usage_bytes), or its window, the tokens in flight and
        one block a window may straddle (SlidingWindowSpec.max_admission_blocks_per_request;
        DSpark retains no extra token: num_prefill_lookahead_tokens is 1)."""
        if self.window is None:
            return _cdiv(layout.max_model_len, self.block)
        held = min(self.window - 1 + layout.in_flight, layout.max_model_len)
        return _cdiv(held, self.block) + 1

    @property
    def kind(self) -> tuple[int, int | None]:
        """What makes caches one type (UniformTypeKVCacheSpecs.is_uniform_type)."""
        return self.block, self.window


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _padded(size: int) -> int:
    return _cdiv(size, PAGE_ALIGN) * PAGE_ALIGN


def _full(name: str, ratio: int, state: int) -> Cache:
    return Cache(name, BLOCK, _padded(BLOCK // ratio * state))


def _sliding(name: str, block: int, state: int, window: int) -> Cache:
    return Cache(name, block, _padded(block * state), window)


def _compressor(name: str, ratio: int, head_dim: int) -> Cache:
    """CompressorStateCache: a KV and a score state per token, two windows overlapping at 1:4."""
    overlap = 2 if ratio == 4 else 1
    return _sliding(name, STATE_BLOCKS[ratio], 2 * overlap * head_dim * STATE_BYTES,
                    overlap * ratio)


def layer_caches(ratio: int, head_dim: int, index_dim: int, window: int) -> list[Cache]:
    """The caches of one attention layer (`get_kv_cache_spec` of DeepseekV4SWACache, of the
    attention for its compressed cache, of CompressorStateCache and DeepseekV4IndexerCache)."""
    caches = [_sliding("sliding window", SWA_BLOCK, PACKED_TOKEN, window)]
    if ratio == 1:
        return caches
    caches += [_full(f"compressed 1:{ratio}", ratio, PACKED_TOKEN),
               _compressor(f"compressor 1:{ratio} state", ratio, head_dim)]
    if ratio == 4:  # only the compressed sparse layers have the indexer
        caches += [_full("indexer keys", ratio, index_dim + index_dim // 128 * INDEX_SCALE),
                   _compressor("indexer compressor state", ratio, index_dim)]
    return caches


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = config.get("text_config")
    return nested if "num_hidden_layers" not in config and isinstance(nested, dict) else config


def compress_ratios(config: Mapping[str, Any]) -> list[int] | None:
    """Each target layer's compress ratio (1: sliding window only) as vLLM's attention reads
    it from transformers' DeepseekV4Config: `layer_types` and `compress_rates` (the legacy
    `compress_rate_csa`/`_hca` folded in), else the legacy `compress_ratios` (0/4/128), else
    two heavily compressed layers, then compressed sparse and heavily compressed in turn.
    None when unreadable, or a ratio the compressor refuses (it takes 4 and 128)."""
    (layers,) = _ints(config, "num_hidden_layers") or (0,)
    types = layer_types(config, layers)
    if not layers or types is None or len(types) < layers or not set(types) <= LAYER_TYPES:
        return None
    given = config.get("compress_rates")
    rates = dict(given) if isinstance(given, dict) else {CSA: 4, HCA: 128}
    rates.update({kind: config[legacy] for legacy, kind in LEGACY_RATES if legacy in config})
    ratios = [max(1, rates.get(kind, 0)) for kind in types[:layers]]
    return ratios if all(ratio in (1, 4, 128) for ratio in ratios) else None


def layer_types(config: Mapping[str, Any], layers: int) -> list[Any] | None:
    types, ratios = config.get("layer_types"), config.get("compress_ratios")
    if types is None and isinstance(ratios, list):
        return [RATIO_TYPES.get(ratio) for ratio in ratios]
    if types is None and ratios is None:
        return [HCA] * min(layers, 2) + [CSA if i % 2 else HCA for i in range(layers - 2)]
    return types if isinstance(types, list) else None


def _ints(config: Mapping[str, Any], *keys: str) -> list[int] | None:
    """The values of keys when each is a positive integer."""
    values = [config.get(key) for key in keys]
    numbers = [value for value in values if type(value) is int and value > 0]
    return numbers if len(numbers) == len(keys) else None


def caches(config: Mapping[str, Any], dspark: bool) -> list[Cache] | None:
    """Every cache of every layer of one rank, the target's then the draft's: the DSpark
    draft's decoder layers (n_mtp_layers, else 3) are sliding window only, their index past
    num_hidden_layers. None for a config this model does not know."""
    config = text_config(config)
    ratios = compress_ratios(config)
    sizes = _ints(config, "head_dim", "index_head_dim", "sliding_window")
    draft = (_ints(config, "n_mtp_layers") or [DRAFT_LAYERS])[0] if dspark else 0
    if ratios is None or sizes is None:
        return None
    return [cache for ratio in ratios + [1] * draft
            for cache in layer_caches(ratio, *sizes)]


# --- the groups ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """A KV cache group: caches of one type sharing a block table, `layers` of each page
    size; a block of the group holds one page of each of its layers."""

    cache: Cache  # the type's first cache (block and window)
    layers: tuple[tuple[int, int], ...]  # (page bytes, layers of that page)
    blocks_per_request: int  # UniformTypeKVCacheSpecs.max_memory_usage_pages

    @property
    def page_bytes(self) -> int:
        return sum(page * count for page, count in self.layers)


@dataclass(frozen=True)
class _Bucket:
    """The layers of one cache type, by page size (vLLM's buckets of uniform-type specs)."""

    caches: tuple[Cache, ...]
    pages: dict[int, int]  # page bytes -> layers

    @property
    def balanced(self) -> bool:
        """One layer of each page size per repeat of the layer pattern."""
        return len(set(self.pages.values())) == 1

    @property
    def repeats(self) -> int:  # get_max_layers_per_page_size
        return max(self.pages.values())


def _buckets(every: list[Cache]) -> list[_Bucket]:
    """The layers bucketed by type, in the order their first layer comes."""
    found: dict[tuple[int, int | None], list[Cache]] = {}
    for cache in every:
        found.setdefault(cache.kind, []).append(cache)
    buckets = []
    for kind in found.values():
        pages: dict[int, int] = {}
        for cache in kind:
            pages[cache.page] = pages.get(cache.page, 0) + 1
        buckets.append(_Bucket(tuple(kind), pages))
    return buckets


def _least_padding(values: list[int], lower_bound: int) -> int:
    """The repeats per group that pad the buckets least, ties to the larger (vLLM's
    _approximate_gcd)."""
    if lower_bound > max(values):
        return lower_bound
    return min(range(lower_bound, max(values) + 1),
               key=lambda d: (sum(-value % d for value in values), -d))


def _split(buckets: list[_Bucket]) -> list[int]:
    """How many groups each bucket splits into (_get_packed_kv_cache_groups): balanced
    buckets into groups of the same number of pattern repeats, at least as many as the
    widest mixed bucket's; the rest stay whole. DeepSeek-V4 has no state bucket (Mamba,
    circular buffer, or sliding window left unsplit), whose groups vLLM would cap."""
    floor = max((b.repeats for b in buckets if b.balanced and len(b.pages) > 1), default=0)
    if not floor:
        return [1] * len(buckets)
    per_group = _least_padding([b.repeats for b in buckets if b.balanced], floor)
    return [_cdiv(b.repeats, per_group) if b.balanced else 1 for b in buckets]


def groups(every: list[Cache], layout: Layout) -> list[Group]:
    """The KV cache groups as vLLM forms them for a block-outermost layout
    (get_kv_cache_groups -> _get_packed_kv_cache_groups): a split bucket deals its pattern
    repeats to its groups in turn."""
    made, buckets = [], _buckets(every)
    for bucket, parts in zip(buckets, _split(buckets), strict=True):
        blocks = max(cache.blocks(layout) for cache in bucket.caches)
        for part in range(parts):
            layers = tuple((page, len(range(part, count, parts)))
                           for page, count in bucket.pages.items())
            made.append(Group(bucket.caches[0], layers, blocks))
    return made


# --- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvPlan:
    """vLLM's KV cache plan of one rank. For several ranks give the least available bytes:
    vLLM refuses when any rank does and takes the smallest block count over the ranks
    (get_kv_cache_configs)."""

    layout: Layout
    groups: tuple[Group, ...]

    @property
    def block_bytes(self) -> int:
        """The pool's bytes per block: the widest group's pages, every group's block the same
        size (_pool_bytes_per_block_from_builder -> _get_kv_cache_bytes_per_block; the
        caches' block strides need no alignment beyond their pages)."""
        return max(group.page_bytes for group in self.groups)

    @property
    def request_blocks(self) -> int:
        """Blocks one request of max_model_len takes, from every group's block table."""
        return sum(group.blocks_per_request for group in self.groups)

    @property
    def request_bytes(self) -> int:
        """What vLLM's check asks room for (_max_memory_usage_bytes_from_groups)."""
        return self.block_bytes * self.request_blocks

    @property
    def least_available(self) -> int:
        """The least available memory vLLM starts with: one request and the null block the
        block pool holds back (_check_enough_kv_cache_memory, given available - one block)."""
        return self.request_bytes + self.block_bytes

    def refused(self, available: int) -> bool:
        """Whether vLLM refuses to start with this much KV cache memory on a rank."""
        return available < self.least_available

    def blocks(self, available: int) -> int:
        """num_blocks of the pool, the null block among them (get_kv_cache_configs)."""
        return available // self.block_bytes

    def concurrency(self, available: int) -> float:
        """The "Maximum concurrency for max_model_len tokens per request" vLLM logs
        (get_max_concurrency_for_kv_cache_config): num_blocks over one request's blocks."""
        return self.blocks(available) / self.request_blocks

    def tokens(self, available: int) -> int:
        """The "GPU KV cache size: N tokens" vLLM logs (get_kv_cache_capacity)."""
        return int(self.concurrency(available) * self.layout.max_model_len)

    def longest(self, available: int) -> int:
        """The estimated maximum model length of vLLM's refusal, 0 when not one token fits
        (_estimate_max_model_len_from_groups, given available - one block)."""
        room = available - self.block_bytes
        low, high, best = 1, self.layout.max_model_len, 0
        while low <= high:
            middle = (low + high) // 2
            if self._at(middle).request_bytes <= room:
                best, low = middle, middle + 1
            else:
                high = middle - 1
        return best

    def _at(self, max_model_len: int) -> KvPlan:
        layout = replace(self.layout, max_model_len=max_model_len)
        return KvPlan(layout, tuple(replace(group, blocks_per_request=group.cache.blocks(layout))
                                    for group in self.groups))


def plan(config: Mapping[str, Any], layout: Layout) -> KvPlan | None:
    """vLLM's KV cache plan of DeepSeek-V4, or of a model whose every layer is full
    attention (config.json's mapping), for this layout; None for another model, or a config
    whose caches this model does not know. ValueError: a layout DeepSeek-V4 does not take."""
    if text_config(config).get("model_type", config.get("model_type")) == "deepseek_v4":
        layout.deepseek_v4()
        every = caches(config, layout.dspark)
    else:
        every = full_attention_caches(config, layout)
    return None if every is None else KvPlan(layout, tuple(groups(every, layout)))


# --- a model of full attention only ----------------------------------------------------------

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1,
               "fp8_e4m3": 1, "fp8_e5m2": 1}
SLIDING_KEYS = ("sliding_window", "attention_chunk_size", "layer_types")


def full_attention_caches(config: Mapping[str, Any], layout: Layout) -> list[Cache] | None:
    """Every layer's FullAttentionSpec (vllm/model_executor/layers/attention/attention.py):
    a page holds block_size tokens of K and V for the rank's KV heads (the heads split over
    TP, a head replicated where there are fewer than ranks), in the cache dtype (`auto`: the
    model's). None for a config with sliding windows, chunked attention or layer types,
    whose specs differ, or without the sizes."""
    text = text_config(config)
    if any(text.get(key) for key in SLIDING_KEYS):
        return None
    sizes = _ints(text, "num_hidden_layers", "num_attention_heads", "hidden_size")
    if sizes is None:
        return None
    layers, heads, hidden = sizes
    kv_heads = (_ints(text, "num_key_value_heads") or [heads])[0]
    head_dim = (_ints(text, "head_dim") or [hidden // heads])[0]
    dtype = layout.kv_cache_dtype if layout.kv_cache_dtype != "auto" else \
        str(text.get("torch_dtype") or text.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        return None
    page = layout.block_size * max(1, kv_heads // layout.tp_size) * 2 * head_dim * \
        DTYPE_BYTES[dtype]
    return [Cache("full attention", layout.block_size, page)] * layers
