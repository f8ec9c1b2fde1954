"""Model folders made without torch, for checks that read headers only (`inputs.model_folder`):
config.json, safetensors written by numpy and a tokenizer.json, each part's size chosen apart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save as safetensors_bytes
from tokenizers import Tokenizer, models


def header_model(folder: Path, vocab_size: int = 64, rows: int = 64, tokenizer_ids: int | None = 60,
                 weights: bool = True) -> Path:
    """A Llama-shaped folder: config.json with `vocab_size`, an embedding and a head of `rows` rows,
    a BPE tokenizer.json using `tokenizer_ids` ids (None: no tokenizer files), weights unless not asked."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": vocab_size, "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 128,
        "bos_token_id": 0, "eos_token_id": 1}), encoding="utf-8")
    if tokenizer_ids is not None:  # one the tokenizers library loads: ids 0 and 1 the specials
        tokenizer = Tokenizer(models.BPE({"<s>": 0, "</s>": 1, **{f"t{i}": i for i in range(2, tokenizer_ids)}}, []))
        tokenizer.add_special_tokens(["<s>", "</s>"])
        tokenizer.save(str(folder / "tokenizer.json"))
    if weights:
        tensors = {"model.embed_tokens.weight": np.zeros((rows, 8), np.float32),
                   "lm_head.weight": np.ones((rows, 8), np.float32)}
        (folder / "model.safetensors").write_bytes(safetensors_bytes(tensors, metadata={"format": "pt"}))
    return folder
