"""Tiny models for the serve checks on the CPU: a `config.json` of a real architecture and a
byte-level BPE tokenizer trained here with `tokenizers`; no weights (vLLM's
`--load-format dummy` makes them). head_dim 64: vLLM's CPU attention refuses smaller heads.

    python -m tests.tiny_model DIR [--arch llama|qwen3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["ARCHITECTURES", "CHAT_TEMPLATE", "make"]

BOS, EOS = "<s>", "</s>"
VOCAB = 512  # the tokenizer's; the embedding is rounded up to a multiple of 64
CONTEXT = 8192  # enough for the prefix-cache check's prompt of some thousands of tokens
# a chat model's template, plain: a chat request (sparkrun's readiness probe's) needs one
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}"
                 "\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
         "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu"}
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
              "attention_bias": False},
}


def corpus() -> list[str]:
    """Text the tokenizer learns its merges from: the words the checks' prompts use."""
    words = ("The capital of France is Paris . Remember this list . item of list is "
             "Which item is largest ? What colour is this image ? One word . red green blue")
    numbers = " ".join(str(n) for n in range(1000))
    return [words, numbers, "0123456789abcdef [ ] ( ) , : ; ! ?"] * 4


def make(folder: Path, arch: str = "llama") -> Path:
    """Write config.json, tokenizer.json and tokenizer_config.json (with a chat template) of
    a tiny `arch` model into folder; returns folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if arch not in ARCHITECTURES:
        raise ValueError(f"no tiny model of architecture {arch!r}: one of "
                         f"{', '.join(ARCHITECTURES)}")
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[BOS, EOS], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
         "model_max_length": CONTEXT, "chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    vocab = -(-tokenizer.get_vocab_size() // 64) * 64
    config = {**ARCHITECTURES[arch], **SHAPE, "vocab_size": vocab,
              "bos_token_id": tokenizer.token_to_id(BOS),
              "eos_token_id": tokenizer.token_to_id(EOS)}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tiny_model", description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--arch", choices=sorted(ARCHITECTURES), default="llama")
    args = parser.parse_args(argv)
    print(make(args.folder, args.arch))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
