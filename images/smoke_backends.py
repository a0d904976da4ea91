"""backend-capability: which attention, MoE and linear backends the image's vLLM runs for the
tag's GPU and model, asked of vLLM's own checks, against the table the preflight enforces.

For the GPU of the tag's `cuda_arch` (12.1a: compute capability 12.1) and the model family it
declares (`capabilities: model`), each backend name of each kind gets vLLM's verdict:
  attention  the model's own backend selection (DeepSeek-V4: `_select_dsv4_attn_cls`, which
             refuses some names and maps the rest to its attention classes), then the chosen
             class's backend `supports_compute_capability`;
  moe        the model's expert oracle (DeepSeek-V4's experts are MXFP4:
             `map_mxfp4_backend`), then its expert classes' `_supports_current_device`;
  linear     the backend's FP8 block-scaled kernels (DeepSeek-V4's linear layers: 128x128
             FP8 blocks) in vLLM's CUDA priority list, then their `is_supported`.
"" means it runs; anything else is why not. The verdicts come from a separate Python whose
vLLM platform reports the tag's GPU from the start (modules bind the platform when they are
imported), and whose torch reports it to the kernel packages that ask torch (b12x), so no
GPU is needed, and where there is no CUDA driver, over its stub (smoke_platform.py).

The table must equal backend-verdicts.json's for the installed vLLM, arch and model, or the
preflight's data is stale. Standard library plus the image's vLLM; mounted beside
smoke_check.py, never baked. As a script, `smoke_backends.py CUDA_ARCH MODEL` prints the table
as JSON (bin/backend_table.py runs it).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import smoke_layers
import smoke_platform
from smoke_common import CheckFailed, CheckSkipped, Image, one_line, public_version
from smoke_vllm import KINDS, installed_vllm

AUTO = "auto"
TIMEOUT = 900  # importing vLLM's kernels under emulation is slow
VERDICTS = "opt/sparkbake/backend-verdicts.json"  # what the image's preflight enforces


def deepseek_v4_attention(capability: Any) -> dict[str, str]:
    from vllm.models.deepseek_v4.nvidia import model
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    table = {}
    for name in (AUTO, *AttentionBackendEnum.__members__):
        chosen = None if name == AUTO else AttentionBackendEnum[name]
        config = SimpleNamespace(attention_config=SimpleNamespace(backend=chosen))
        try:
            backend = model._select_dsv4_attn_cls(config).backend_cls
        except ValueError as exc:  # the model refuses the name
            table[name] = f"DeepSeek-V4 refuses it: {one_line(exc)}"
            continue
        if not backend.supports_compute_capability(capability):
            table[name] = (f"DeepSeek-V4 takes {backend.get_name()} for it, which does not run "
                           f"on compute capability {capability.major}.{capability.minor}")
        elif name not in (AUTO, backend.get_name()):
            table[name] = f"DeepSeek-V4's attention ignores it and runs {backend.get_name()}"
        else:
            table[name] = ""
    return table


def deepseek_v4_moe(capability: Any) -> dict[str, str]:
    from vllm.config.kernel import MoEBackend
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4

    table = {}
    for name in typing.get_args(MoEBackend):
        if name == AUTO:
            table[name] = ""
            continue
        try:
            experts = [cls for backend in mxfp4.map_mxfp4_backend(name)
                       for cls in mxfp4.backend_to_kernel_cls(backend)]
        except ValueError as exc:  # the oracle of DeepSeek-V4's MXFP4 experts refuses it
            table[name] = f"not a backend of DeepSeek-V4's MXFP4 experts: {one_line(exc)}"
            continue
        if any(cls._supports_current_device() for cls in experts):
            table[name] = ""
        else:
            names = ", ".join(sorted({cls.__name__ for cls in experts}))
            table[name] = (f"its experts ({names}) do not run on compute capability "
                           f"{capability.major}.{capability.minor}")
    return table


def deepseek_v4_linear(capability: Any) -> dict[str, str]:
    """Each name's block-FP8 kernel, the first of vLLM's CUDA priority list that it keeps and
    that runs on the GPU, held to DeepSeek-V4's batched-matmul wo_a too (smoke_layers)."""
    from vllm.config.kernel import LinearBackend
    from vllm.model_executor.kernels import linear

    kernels = linear._POSSIBLE_FP8_BLOCK_KERNELS[linear.PlatformEnum.CUDA]
    verdicts = {kernel: kernel.is_supported(capability.to_int()) for kernel in kernels}
    runs = [k for k in kernels if verdicts[k][0]]
    layers = {kernel: smoke_layers.bmm_verdict(kernel) for kernel in runs}
    auto = next((k.__name__ for k in runs), "none")
    table = {}
    for name in typing.get_args(LinearBackend):
        own = kernels if name == AUTO else \
            [k for k in kernels if k in linear._LINEAR_BACKEND_KERNEL_MAP.get(name, set())]
        chosen = next((k for k in own if verdicts[k][0]), None)
        if chosen is not None:
            table[name] = layers[chosen]
        elif not own:
            table[name] = (f"it has no FP8 block-scaled kernel: vLLM ignores it for "
                           f"DeepSeek-V4's linear layers and picks {auto}")
        else:
            table[name] = "; ".join(f"{k.__name__}: {verdicts[k][1]}" for k in own)
    return table


MODELS = {"deepseek_v4": {"attention": deepseek_v4_attention, "moe": deepseek_v4_moe,
                          "linear": deepseek_v4_linear}}


def table(cuda_arch: str, model: str) -> dict[str, dict[str, str]]:
    """Every backend name of every kind and vLLM's verdict on it, on this GPU for this model."""
    match = smoke_platform.ARCH.fullmatch(cuda_arch)
    if match is None:
        raise ValueError(f"not a CUDA arch: {cuda_arch!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    smoke_layers.prepare(major, minor)  # the GPU, and the meta device for the layer probes
    from vllm.platforms.interface import DeviceCapability
    capability = DeviceCapability(major=major, minor=minor)
    return {kind: MODELS[model][kind](capability) for kind in KINDS}


def asked(cuda_arch: str, model: str) -> dict[str, dict[str, str]]:
    """table() from a Python of its own: no module here has bound vLLM's platform yet."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, **smoke_platform.driver_stub(Path(folder))}
        done = subprocess.run([sys.executable, "-B", str(Path(__file__)), cuda_arch, model],
                              capture_output=True, text=True, timeout=TIMEOUT, check=False,
                              env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"vLLM's backend checks did not answer (exit {done.returncode}): "
                          f"{last}")
    answer: dict[str, dict[str, str]] = json.loads(lines[-1])
    return answer


def declared(image: Image, version: str, cuda_arch: str, model: str) -> dict[str, Any]:
    try:
        runs: dict[str, Any] = json.loads((image.root / VERDICTS).read_text())
    except (OSError, ValueError) as exc:
        raise CheckFailed(f"{VERDICTS} unreadable: {one_line(exc)}") from exc
    found: dict[str, Any] | None = runs.get(version, {}).get(cuda_arch, {}).get(model)
    if found is None:
        raise CheckFailed(f"{VERDICTS} has no backend verdicts for vLLM {version} on "
                          f"{cuda_arch} for {model}: write them with bin/backend_table.py")
    return found


def stale(computed: dict[str, dict[str, str]], listed: dict[str, Any]) -> list[str]:
    """The names whose verdict the file states otherwise than vLLM does."""
    problems = []
    for kind in KINDS:
        mine, theirs = computed[kind], listed.get(kind, {})
        wrong = sorted(name for name in mine.keys() | theirs.keys()
                       if mine.get(name) != theirs.get(name))
        if wrong:
            problems.append(f"{kind}: {', '.join(wrong)}")
    return problems


def check_backend_capability(image: Image, expected: dict[str, Any]) -> str:
    model = ((image.manifest().get("capabilities") or {}).get("model"))
    if not model:
        raise CheckSkipped("the tag declares no model family (versions.yaml capabilities)")
    if model not in MODELS:
        raise CheckFailed(f"no backend selection known for model family {model!r}: "
                          f"known: {', '.join(MODELS)}")
    version, cuda_arch = public_version(installed_vllm()), str(expected["cuda_arch"])
    computed = asked(cuda_arch, model)
    problems = stale(computed, declared(image, version, cuda_arch, model))
    if problems:
        raise CheckFailed(f"{VERDICTS} is stale for vLLM {version} on {cuda_arch}, "
                          f"{model}: {'; '.join(problems)}; rewrite it with bin/backend_table.py")
    runs = {kind: [name for name, why in computed[kind].items() if not why] for kind in KINDS}
    return (f"vLLM {version} on {cuda_arch} for {model}: " + "; ".join(
        f"{kind} {', '.join(names)}" for kind, names in runs.items()))


def main(cuda_arch: str, model: str) -> dict[str, dict[str, str]]:
    """The table, here if the CUDA driver loads, else from a Python run over its stub."""
    try:
        ctypes.CDLL(smoke_platform.DRIVER)
    except OSError:
        return asked(cuda_arch, model)
    return table(cuda_arch, model)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2]), sort_keys=True))
