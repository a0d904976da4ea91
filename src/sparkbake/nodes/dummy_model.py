"""A model too large for one node, served by the serve checks as its own architecture with
dummy weights and only its first layers.

A suite's serve.env declares it with LAYERS_VARIABLE, the number of layers to keep. The
serve checks read and remove that variable, read `config.json` of the --model folder on the
host, and append vLLM's `--load-format dummy` and `--hf-overrides JSON` to the container's
SERVE_EXTRA_ARGS: `num_hidden_layers` set to the number kept, and each per-layer list of the
config cut to match. The checkpoint's weights are never loaded.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["EXTRA_ARGS", "LAYERS_VARIABLE", "Cut", "UnusableModel", "container_env", "cut",
           "read_config"]

LAYERS_VARIABLE = "SMOKE_DUMMY_LAYERS"
EXTRA_ARGS = "SERVE_EXTRA_ARGS"  # the entrypoint appends it to `vllm serve`, shell-split
NESTED = "text_config"  # where a multimodal checkpoint may keep its language model's fields
WHOLE = re.compile(r"[0-9]+")


class UnusableModel(Exception):
    """Why the cut model cannot be made: one line, naming the file."""


@dataclass(frozen=True)
class Cut:
    """The layers kept of the model's, and the --hf-overrides that keep them."""

    layers: int
    total: int
    overrides: dict[str, Any] = field(hash=False)

    def args(self) -> list[str]:
        return ["--load-format", "dummy", "--hf-overrides",
                json.dumps(self.overrides, separators=(",", ":"))]

    def describe(self) -> str:
        return f"dummy weights, first {self.layers} of {self.total} layers"


def read_config(model: Path) -> dict[str, Any]:
    path = model / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnusableModel(f"{path}: no such file; --model must be the model's folder, with "
                            "its config.json") from None
    except json.JSONDecodeError as exc:
        raise UnusableModel(f"{path}: not JSON: {exc.msg} at line {exc.lineno} column "
                            f"{exc.colno}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnusableModel(f"{path}: cannot be read: {exc}") from None
    if not isinstance(config, dict):
        raise UnusableModel(f"{path}: not a JSON object")
    return config


def layer_fields(config: dict[str, Any], path: Path) -> tuple[str | None, dict[str, Any]]:
    """Where the layer count lives: the top level (None), or the nested text config."""
    if "num_hidden_layers" in config:
        return None, config
    nested = config.get(NESTED)
    if isinstance(nested, dict) and "num_hidden_layers" in nested:
        return NESTED, nested
    raise UnusableModel(f"{path}: no num_hidden_layers, neither at the top nor in {NESTED}: "
                        "nothing says how many layers the model has")


def count(fields: dict[str, Any], name: str, path: Path) -> int:
    value = fields.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnusableModel(f"{path}: {name} is {value!r}, not a whole number")
    return value


def cut_lists(fields: dict[str, Any], total: int, keep: int, mtp: int) -> dict[str, Any]:
    """Each per-layer list cut to its first `keep` entries. A list with an entry for each MTP
    layer too (DeepSeek-V4's legacy compress_ratios) keeps those: vLLM reads them after the
    last decoder layer's."""
    cut: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, list) and len(value) == total:
            cut[name] = value[:keep]
        elif isinstance(value, list) and mtp and len(value) == total + mtp:
            cut[name] = value[:keep] + value[total:]
    return cut


def cut(config: dict[str, Any], layers: int, path: Path) -> Cut:
    """The override that keeps the first `layers` layers of the model `config` (read from
    path). The counts vLLM's DeepSeek-V4 reads stay right unchanged: its hash-routed MoE
    layers are the first num_hash_layers, and its MTP layers come after the last layer kept."""
    nested, fields = layer_fields(config, path)
    total = count(fields, "num_hidden_layers", path)
    if layers > total:
        raise UnusableModel(f"{LAYERS_VARIABLE}={layers}, but {path} has {total} layers: keep "
                            f"at most {total}")
    mtp = count(fields, "num_nextn_predict_layers", path)
    overrides = {"num_hidden_layers": layers, **cut_lists(fields, total, layers, mtp)}
    return Cut(layers, total, {nested: overrides} if nested else overrides)


def declared_layers(value: str, source: Path | None) -> int:
    if not WHOLE.fullmatch(value) or int(value) < 1:
        raise UnusableModel(f"{source or 'the serve env'}: {LAYERS_VARIABLE}={value!r} is not "
                            "a number of layers (a whole number, 1 or more)")
    return int(value)


def container_env(env: dict[str, str], model: Path,
                  source: Path | None) -> tuple[dict[str, str], Cut | None]:
    """The serve container's environment without LAYERS_VARIABLE, and the cut it declares
    (None when it is unset or empty), whose flags then end SERVE_EXTRA_ARGS."""
    rest = {name: value for name, value in env.items() if name != LAYERS_VARIABLE}
    if not env.get(LAYERS_VARIABLE):
        return rest, None
    layers = declared_layers(env[LAYERS_VARIABLE], source)
    made = cut(read_config(model), layers, model / "config.json")
    extra = " ".join(part for part in (rest.get(EXTRA_ARGS, ""), shlex.join(made.args()))
                     if part)
    return {**rest, EXTRA_ARGS: extra}, made
