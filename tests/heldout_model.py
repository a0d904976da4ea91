"""A model unlike the suite's tiny Llama and Qwen3 (tests/tiny_model.py): GPT-2's architecture,
whose length key is `n_positions` and whose positions are absolute, 4,096 of them, and a
byte-level BPE tokenizer of its own with few merges, trained here on other text, so that the
serve checks' prompts cut into several times the tokens the suite's tokenizer makes of them.
No weights: vLLM's `--load-format dummy` makes them (the cpu suite's serve.env asks for it).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["POSITIONS", "make"]

END = "<|endoftext|>"  # GPT-2's one special token: its beginning and end of text
POSITIONS = 4096
VOCAB = 320  # the 256 byte symbols, the special token and few merges
SHAPE = {"n_embd": 128, "n_head": 2, "n_layer": 2, "n_inner": 256,  # heads of 64, as on the CPU
         "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
         "tie_word_embeddings": True, "torch_dtype": "bfloat16"}


def corpus() -> list[str]:
    """Text of no language the checks' prompts use: its merges seldom fit them."""
    syllables = ("ka", "lo", "mi", "zu", "re", "ta", "no", "vi")
    words = [a + b for a in syllables for b in syllables]
    return [" ".join(words[i:] + words[:i]) for i in range(0, len(words), 4)]


def make(folder: Path, positions: int = POSITIONS) -> Path:
    """Write config.json, tokenizer.json and tokenizer_config.json of a tiny GPT-2 of
    `positions` positions into folder; returns folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[END], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": END, "eos_token": END,
         "model_max_length": positions}, indent=2) + "\n")
    end = tokenizer.token_to_id(END)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", **SHAPE,
              "n_positions": positions, "n_ctx": positions,
              "vocab_size": -(-tokenizer.get_vocab_size() // 64) * 64,
              "bos_token_id": end, "eos_token_id": end}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder
