"""kv-plan: DeepSeek-V4's KV cache as the image's vLLM plans it, against the host model of
that planner (kv_plan.py, baked beside preflight.py).

vLLM sizes its KV cache in the engine core (vllm/v1/engine/core.py,
`_initialize_kv_caches`): it collects each layer's cache spec from the model runner
(`get_kv_cache_spec` of vllm/v1/worker/gpu/attn_utils.py, Model Runner V2's), resolves the
cache layout from the attention backends' supported layouts (`resolve_kv_cache_layout`),
groups the layers (`get_global_kv_cache_groups`), plans the blocks of each rank from its
available memory (`get_kv_cache_configs`: `_check_enough_kv_cache_memory` refuses when one
request of max_model_len does not fit, the null block held back) and logs the capacity
(`get_kv_cache_capacity`). Here those functions run on the real model's specs, the memory
given, not measured: vLLM's loader makes DeepSeek-V4 from a config.json as the head of `tp`
nodes makes it (`vllm serve`'s parser and EngineArgs, as smoke_layers.py), and the DSpark
draft (`load_dspark_model`), on the meta device; no weight is loaded or processed.

The platform is told the tag's GPU with CUDA's hooks, but does not report itself CUDA: vLLM's
modules import compiled kernels and kernel packages when on CUDA, which a source tree on
PYTHONPATH lacks and no cache spec reads. For the same reason the model is made unquantized
(the weights' format picks kernels only) and STAND_INS answer for the kernels' own checks.
Runs in an image (CPU only, the CUDA driver's stub where there is none) and on a patched
tree in the patch-tests venv alike. vLLM 0.34.0 on CUDA sizes an extensible KV cache: its
block count is settled after warmup from the memory then measured and held to the same rule
(`finalize_extensible_kv_cache`); not on CUDA here, it is off, which changes only the advice
in vLLM's refusal.

As a script: `smoke_kv.py CONFIG_JSON [--tp N] [--dcp N] [--dspark] [--max-model-len N]
[--max-num-batched-tokens N] [--speculative-tokens N] [--available BYTES[,BYTES...] ...]
[--cuda-arch ARCH]`, or `--layouts FILE` (a JSON list of layouts; one model made per
tp/dcp/dspark/batched), prints one JSON document as its last line: vLLM's version and, per
layout, its groups, block bytes, request bytes and, per trial of each rank's available bytes,
num_blocks, tokens, concurrency and vLLM's refusal (its own error text) or null. Standard
library plus vLLM and torch; for the image, mounted beside smoke_check.py (never baked), its
check `check_kv_plan`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from smoke_common import CheckFailed, CheckSkipped, Image

TIMEOUT = 1800  # seconds: importing vLLM and building the model under emulation
CUDA_ARCH = "12.1a"  # GB10's
DEFAULT_BATCHED = 8192  # the reference deployment's MAX_NUM_BATCHED_TOKENS
HOST_MODEL = "opt/sparkbake/kv_plan.py"  # the host model, as the image bakes it
REFERENCE_TP = (1, 2, 4)
REFERENCE_CONTEXT = (163840, 393216)
GIB = 1 << 30
SPECULATIVE_TOKENS = 6  # the reference deployment's NUM_SPECULATIVE_TOKENS
STAND_INS = {
    "vllm.utils.flashinfer.has_flashinfer_sparse_mla_sm120_config":
        "FlashInfer's decode specialization for the SM12x attention class, asked when the "
        "class is made: True here (a kernel of the forward)",
}


@dataclass(frozen=True)
class Layout:
    """What a layout asks of the planner: the engine's shape and the memory tried."""

    tp: int = 1
    dcp: int = 1
    dspark: bool = False
    max_model_len: int = 163840
    max_num_batched_tokens: int = DEFAULT_BATCHED
    speculative_tokens: int = SPECULATIVE_TOKENS  # the draft's, with dspark
    available: tuple[tuple[int, ...], ...] = ()  # per trial, each rank's bytes

    @property
    def build(self) -> tuple[int, int, bool, int, int]:
        """What the built model depends on (max_model_len and memory do not)."""
        return (self.tp, self.dcp, self.dspark, self.max_num_batched_tokens,
                self.speculative_tokens)


def command(layout: Layout, model: Path) -> str:
    """The `vllm serve` command of the entrypoint's fixed options for this layout."""
    speculative = json.dumps({"method": "dspark",
                              "num_speculative_tokens": layout.speculative_tokens})
    draft = f" --speculative-config {shlex.quote(speculative)}" if layout.dspark else ""
    return (f"vllm serve {model} --tensor-parallel-size {layout.tp} "
            f"--decode-context-parallel-size {layout.dcp} --kv-cache-dtype fp8 "
            f"--block-size 256 --max-model-len {layout.max_model_len} "
            f"--max-num-batched-tokens {layout.max_num_batched_tokens} --async-scheduling "
            f"--enable-chunked-prefill{draft}")


# --- the model, built as a rank builds it ------------------------------------------------


def built(layout: Layout, model: Path) -> Any:
    """The VllmConfig of this layout with the target's and the draft's layers registered in
    its static forward context, the draft's marked as the speculator marks them."""
    import smoke_layers
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader import base_loader, get_model

    config = smoke_layers.engine_config(command(layout, model), model, layout.tp)
    config.kernel_config.enable_jit_warmup = False  # no kernel is compiled here
    smoke_layers.one_rank_groups()
    base_loader.BaseModelLoader.load_model = created
    with set_current_vllm_config(config):
        parallel_state._TP.world_size = layout.tp  # this rank's shard of a group of tp
        target = get_model(vllm_config=config)
        if config.speculative_config is not None:
            from vllm.v1.worker.gpu.spec_decode.dspark.utils import load_dspark_model

            before = set(attention_layers(config))
            load_dspark_model(target, config)
            for name, layer in attention_layers(config).items():
                layer.is_draft_layer = name not in before  # as Speculator.load_model
    parallel_state._TP.world_size = 1
    return config


def created(loader: Any, vllm_config: Any, model_config: Any, prefix: str = "") -> Any:
    """The loader's model, made on the meta device and left there: no weight is loaded or
    processed, which no cache spec reads (BaseModelLoader.load_model's first step)."""
    import torch
    from vllm.utils.torch_utils import set_default_torch_dtype

    with set_default_torch_dtype(model_config.dtype), torch.device("meta"):
        return loader.create_model(vllm_config=vllm_config, model_config=model_config,
                                   prefix=prefix)


def attention_layers(config: Any) -> dict[str, Any]:
    from vllm.config.vllm import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    layers: dict[str, Any] = get_layers_from_vllm_config(config, AttentionLayerBase)
    return layers


def specs_of(config: Any) -> dict[str, Any]:
    """Each layer's cache spec as Model Runner V2 reports it to the engine core."""
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    specs: dict[str, Any] = get_kv_cache_spec(config)
    return specs


def layouts_supported(config: Any) -> list[str]:
    """The cache layouts every attention backend of the model takes (a worker's answer)."""
    from vllm.v1.worker.worker_base import WorkerBase

    names: list[str] = WorkerBase.get_supported_kv_cache_layouts(
        SimpleNamespace(vllm_config=config))
    return names


# --- the planner -------------------------------------------------------------------------


def groups_of(config: Any, specs: dict[str, Any], ranks: int) -> list[Any]:
    """The cache layout resolved and the layers grouped, as the engine core does."""
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups

    resolve_kv_cache_layout(config, [layouts_supported(config)] * ranks, list(specs.values()))
    groups: list[Any] = get_global_kv_cache_groups(config, [specs] * ranks)
    return groups


def planned(config: Any, specs: dict[str, Any], groups: list[Any],
            available: tuple[int, ...]) -> dict[str, Any]:
    """One trial of get_kv_cache_configs with each rank's available bytes: the blocks, and
    the capacity update_kv_cache_capacity logs, or vLLM's refusal."""
    from vllm.v1.core.kv_cache_planning import get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_kv_cache_capacity,
    )

    try:
        configs = get_kv_cache_configs(config, [specs] * len(available), list(available),
                                       groups)
    except ValueError as exc:  # _check_enough_kv_cache_memory's refusal
        return {"available": list(available), "refused": str(exc)}
    scheduler = generate_scheduler_kv_cache_config(configs)
    tokens, concurrency = get_kv_cache_capacity(config, scheduler)
    return {"available": list(available), "refused": None, "num_blocks": scheduler.num_blocks,
            "tokens": tokens, "concurrency": concurrency}


def sizes(config: Any, groups: list[Any]) -> dict[str, Any]:
    """The pool's bytes per block and one request's bytes (the check's), and each group."""
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_planning import (
        _max_memory_usage_bytes_from_groups,
        _pool_bytes_per_block_from_builder,
    )

    builder = get_kv_cache_config_builder(config)
    return {"block_bytes": _pool_bytes_per_block_from_builder(builder, config, groups),
            "request_bytes": _max_memory_usage_bytes_from_groups(builder, config, groups),
            "groups": [group_record(config, group) for group in groups]}


def group_record(config: Any, group: Any) -> dict[str, Any]:
    """A group as the planner counts it: its layers' kind, page bytes and blocks per
    request (get_max_concurrency_for_kv_cache_config's count)."""
    from vllm.utils.math_utils import cdiv
    from vllm.v1.kv_cache_interface import iter_layer_specs

    spec = group.kv_cache_spec
    first = next(iter(iter_layer_specs(spec)))
    return {"layers": len(group.layer_names), "kind": type(first).__name__,
            "block_size": first.block_size, "pages": sorted(
                s.page_size_bytes for s in iter_layer_specs(spec)),
            "blocks_per_request": cdiv(spec.max_memory_usage_bytes(config),
                                       spec.page_size_bytes)}


def plan_layouts(layouts: list[Layout], model: Path) -> Iterator[dict[str, Any]]:
    """Each layout planned; one model built per build key, max_model_len set on its
    config for each (as vLLM's own estimate_max_model_len does)."""
    configs: dict[tuple[int, int, bool, int, int], tuple[Any, dict[str, Any], list[Any]]] = {}
    for layout in layouts:
        if layout.build not in configs:
            config = built(layout, model)
            specs = specs_of(config)
            configs[layout.build] = config, specs, groups_of(config, specs, layout.tp)
        config, specs, groups = configs[layout.build]
        config.model_config.max_model_len = layout.max_model_len
        yield {"layout": asdict(layout), **sizes(config, groups),
               "in_flight_tokens": config.max_in_flight_tokens,
               "trials": [planned(config, specs, groups, available)
                          for available in layout.available]}


# --- the script ----------------------------------------------------------------------------


def told_gpu(major: int, minor: int) -> None:
    """vLLM's platform: CUDA's hooks (hybrid KV cache manager, config checks), a GPU of this
    compute capability, allocating on the meta device, but not reporting itself CUDA, so
    that the modules which import compiled kernels and kernel packages when on CUDA do not
    (a source tree on PYTHONPATH has none; the caches' specs read neither)."""
    import torch
    import vllm.platforms

    if importlib.util.find_spec("vllm._C_stable_libtorch") is None:  # the platform imports it
        sys.modules["vllm._C_stable_libtorch"] = ModuleType("vllm._C_stable_libtorch")
    from vllm.platforms.cuda import NonNvmlCudaPlatform
    from vllm.platforms.interface import DeviceCapability, PlatformEnum

    class ToldGpu(NonNvmlCudaPlatform):  # type: ignore[misc]
        _enum = PlatformEnum.OOT
        device_type = "meta"

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(major=major, minor=minor)

    vllm.platforms.current_platform = ToldGpu()

    class Placeholder:  # the CUDA streams and events the layers keep for their forward
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    torch.cuda.Stream = Placeholder
    torch.cuda.Event = Placeholder


def prepare(cuda_arch: str) -> None:
    import smoke_platform

    match = smoke_platform.ARCH.fullmatch(cuda_arch)
    if match is None:
        raise SystemExit(f"not a CUDA arch: {cuda_arch!r}")
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"  # DSpark needs it; a GPU's Triton picks it
    told_gpu(int(match.group(1)), int(match.group(2)))
    import vllm.utils.flashinfer

    vllm.utils.flashinfer.has_flashinfer_sparse_mla_sm120_config = lambda *args: True


def unquantized(config_path: Path) -> dict[str, Any]:
    """The model's config without its quantization: the weights' format picks linear and
    expert kernels, and no cache spec reads it."""
    config: dict[str, Any] = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    return config


def main(config_path: Path, layouts: list[Layout], cuda_arch: str = CUDA_ARCH) -> dict[str, Any]:
    prepare(cuda_arch)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(unquantized(config_path)))
        plans = list(plan_layouts(layouts, Path(folder)))
    import vllm

    return {"vllm": str(vllm.__version__), "stand_ins": STAND_INS, "plans": plans}


def parse(argv: list[str]) -> tuple[Path, list[Layout], str]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("config", type=Path, help="the model's config.json")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--dcp", type=int, default=1)
    parser.add_argument("--dspark", action="store_true", help="with the DSpark draft")
    parser.add_argument("--max-model-len", type=int, default=163840)
    parser.add_argument("--max-num-batched-tokens", type=int, default=DEFAULT_BATCHED)
    parser.add_argument("--speculative-tokens", type=int, default=SPECULATIVE_TOKENS)
    parser.add_argument("--available", action="append", default=[],
                        help="a trial: each rank's available bytes, comma-separated (one "
                             "value: every rank's)")
    parser.add_argument("--layouts", type=Path, help="a JSON list of layouts instead")
    parser.add_argument("--cuda-arch", default=CUDA_ARCH)
    args = parser.parse_args(argv)
    if args.layouts is not None:
        return args.config, read_layouts(json.loads(args.layouts.read_text())), args.cuda_arch
    layout = Layout(tp=args.tp, dcp=args.dcp, dspark=args.dspark,
                    max_model_len=args.max_model_len,
                    max_num_batched_tokens=args.max_num_batched_tokens,
                    speculative_tokens=args.speculative_tokens,
                    available=tuple(trial(text, args.tp) for text in args.available))
    return args.config, [layout], args.cuda_arch


def trial(text: str, ranks: int) -> tuple[int, ...]:
    values = tuple(int(value) for value in text.split(","))
    return values * ranks if len(values) == 1 else values


def read_layouts(records: list[dict[str, Any]]) -> list[Layout]:
    return [Layout(**{**record, "available": tuple(
        tuple(ranks) for ranks in record.get("available", ()))}) for record in records]


if __name__ == "__main__":
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    print(json.dumps(main(*parse(sys.argv[1:])), sort_keys=True))


# --- the host model against vLLM --------------------------------------------------------------


def host_model(path: Path) -> ModuleType:
    """kv_plan.py loaded from its file (in the image, as baked beside preflight.py)."""
    spec = importlib.util.spec_from_file_location("sparkbake_kv_plan", path)
    if spec is None or spec.loader is None:
        raise CheckFailed(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def disagreements(kv_plan: ModuleType, config: dict[str, Any],
                  record: dict[str, Any]) -> list[str]:
    """Where the host model's plan differs from vLLM's, per layout and trial."""
    found = []
    for planned_by_vllm in record["plans"]:
        layout = planned_by_vllm["layout"]
        mine = kv_plan.plan(config, kv_plan.Layout(
            layout["max_model_len"], tp_size=layout["tp"], dcp_size=layout["dcp"],
            dspark=layout["dspark"], max_num_batched_tokens=layout["max_num_batched_tokens"]))
        where = (f"TP {layout['tp']}{' with DSpark' if layout['dspark'] else ''}, "
                 f"{layout['max_model_len']} tokens")
        if mine is None:
            found.append(f"{where}: the host model knows no plan for this model")
            continue
        found += [f"{where}: {problem}" for problem in plan_differences(mine, planned_by_vllm)]
    return found


def plan_differences(mine: Any, theirs: dict[str, Any]) -> list[str]:
    figures = [("block bytes", mine.block_bytes, theirs["block_bytes"]),
               ("request bytes", mine.request_bytes, theirs["request_bytes"]),
               ("tokens in flight", mine.layout.in_flight, theirs["in_flight_tokens"])]
    for trial in theirs["trials"]:
        least = min(trial["available"])  # vLLM plans every rank for the least one
        figures.append((f"refused with {least} B", mine.refused(least),
                        trial["refused"] is not None))
        if trial["refused"] is None:
            figures += [(f"num_blocks with {least} B", mine.blocks(least), trial["num_blocks"]),
                        (f"tokens with {least} B", mine.tokens(least), trial["tokens"]),
                        (f"concurrency with {least} B", mine.concurrency(least),
                         trial["concurrency"])]
    return [f"{name}: host model {ours}, vLLM {vllms}"
            for name, ours, vllms in figures if ours != vllms]


def reference_layouts(kv_plan: ModuleType, config: dict[str, Any]) -> list[Layout]:
    """TP 1, 2 and 4, with and without the draft, at the reference's context lengths."""
    return [Layout(tp=tp, dspark=dspark, max_model_len=context,
                   available=trials(kv_plan, config, tp, dspark, context))
            for tp in REFERENCE_TP for dspark in (False, True) for context in REFERENCE_CONTEXT]


def trials(kv_plan: ModuleType, config: dict[str, Any], tp: int, dspark: bool,
           context: int) -> tuple[tuple[int, ...], ...]:
    """Each rank's memory where the host model says vLLM refuses by one byte, where it just
    starts, with room for more, and with ranks that differ (vLLM plans for the least)."""
    mine = kv_plan.plan(config, kv_plan.Layout(context, tp_size=tp, dspark=dspark,
                                               max_num_batched_tokens=DEFAULT_BATCHED))
    least = mine.least_available if mine is not None else 8 * GIB
    roomy = 40 * GIB + 12345
    return ((least - 1,) * tp, (least,) * tp, (roomy,) * tp,
            tuple(roomy - rank * 3 * GIB for rank in range(tp)))


def asked(config: dict[str, Any], layouts: list[Layout]) -> dict[str, Any]:
    """main() in a Python of its own, over the CUDA driver's stub where there is no driver."""
    import smoke_platform

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config))
        (Path(folder) / "layouts.json").write_text(json.dumps([asdict(one) for one in layouts]))
        env = {**os.environ, **smoke_platform.driver_stub(Path(folder)),
               "VLLM_LOGGING_LEVEL": "WARNING"}
        done = subprocess.run(
            [sys.executable, "-B", str(Path(__file__)), f"{folder}/config.json",
             "--layouts", f"{folder}/layouts.json"],
            capture_output=True, text=True, timeout=TIMEOUT, check=False, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"vLLM's planner did not answer (exit {done.returncode}): "
                          f"{last[-300:]}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def check_kv_plan(image: Image, expected: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The host model baked in the image and the image's vLLM plan the suite's DeepSeek-V4
    alike, to the byte."""
    model = (image.manifest().get("capabilities") or {}).get("model")
    if model != "deepseek_v4":
        raise CheckSkipped(f"the tag's model family is {model or 'not declared'}; the host "
                           "model of the KV cache planner is DeepSeek-V4's")
    config = (expected.get("layer_model") or {}).get("config")
    if not isinstance(config, dict):
        raise CheckSkipped("no model config.json to plan for")
    if not (image.root / HOST_MODEL).is_file():
        raise CheckSkipped(f"/{HOST_MODEL} is not baked in this image")
    kv_plan = host_model(image.root / HOST_MODEL)
    record = asked(config, reference_layouts(kv_plan, config))
    problems = disagreements(kv_plan, config, record)
    if problems:
        more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
        raise CheckFailed("; ".join(problems[:2]) + more, record)
    first = record["plans"][0]
    return (f"vLLM {record['vllm']} and {HOST_MODEL.rsplit('/', 1)[-1]} agree on "
            f"{len(record['plans'])} layouts (TP {', '.join(map(str, REFERENCE_TP))}, with "
            f"and without DSpark): a block {first['block_bytes']:,} B, one request of "
            f"{first['layout']['max_model_len']:,} tokens {first['request_bytes']:,} B"), record
