"""A synthetic token stream and tiny Llama models: smoke tests, benchmarks, multi-process checks.

Test support, not shipped in `langadapt` (issue 39: only runtime code ships; nothing under
langadapt/ uses it). It lives here, not in benchmarks/, because both import it from here: tests
have tests/ on sys.path (tests/conftest.py's folder, pytest's `prepend` mode) and import
`helpers.synthetic`; the benchmarks put tests/ on sys.path as they do for `helpers.real_bases`
(benchmarks/tokenizer_extension.py), and so do the worker scripts of this folder when run alone.

`SyntheticStream` follows the same protocol as `langadapt.data.stream.PackedStream`
(`langadapt.data.stream.TokenStream`), so the training loop cannot tell them apart. It has no sources:
it trains none by name and reports no progress per source.
Row i of the global sequence of rows depends only on (seed, i): any rank, any resume point and
any world size see the same data, and restoring the position is O(1). The rows are learnable
(each is an arithmetic progression modulo the vocabulary), so a loss curve goes down quickly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from langadapt.data.stream import SourceProgress


class SyntheticStream:
    """Deterministic packed rows of `seq_len + 1` tokens; `served` counts rows handed out."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int = 0) -> None:
        self.vocab_size, self.seq_len, self.seed = vocab_size, seq_len, seed
        self.position = 0
        self.served = 0
        self.last_rows = 0  # rows of the last batch on this rank (rows_of_role)

    def row(self, index: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, index])
        start, stride = rng.integers(0, self.vocab_size, size=2)
        return (start + (stride % 7 + 1) * np.arange(self.seq_len + 1)) % self.vocab_size

    def next_batch(self, global_batch_size: int, rank: int = 0, world_size: int = 1) -> np.ndarray:
        """This rank's share of the next global batch: [global // world, seq_len + 1] int64."""
        per_rank = global_batch_size // world_size
        first = self.position + rank * per_rank
        rows = np.stack([self.row(i) for i in range(first, first + per_rank)]).astype(np.int64)
        self.position += global_batch_size
        self.served += per_rank
        self.last_rows = per_rank
        return rows

    def rows_of_role(self, role: str) -> np.ndarray:
        """No sources, so no row of the last batch comes from a source of any role."""
        return np.zeros(self.last_rows, dtype=bool)

    def position_ids(self, inputs: torch.Tensor) -> None:
        """Rows are single sequences: no document masking."""
        return

    def trained_sources(self) -> list[str]:
        return []

    def progress(self) -> SourceProgress:
        return SourceProgress({}, {})

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position, self.seed = int(state["position"]), int(state["seed"])


def tiny_llama(vocab_size: int = 256, hidden: int = 32, layers: int = 2, seed: int = 0,
               **overrides: Any) -> torch.nn.Module:
    """A small untied LlamaForCausalLM with deterministic weights (for tests and benchmarks)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    heads = max(1, hidden // 32)
    fields: dict[str, Any] = {
        "vocab_size": vocab_size, "hidden_size": hidden, "intermediate_size": int(hidden * 2.75) // 8 * 8,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 2),
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "attn_implementation": "sdpa",
    }
    fields.update(overrides)
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**fields))


def tiny_byte_level_pair(texts: list[str], vocab_size: int = 400, seed: int = 3) -> tuple[Any, Any]:
    """A tiny random Llama and a byte-level BPE tokenizer trained on `texts` that decodes back to
    text (`</s>` its EOS): for generation tasks (translation) that must round-trip strings."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")
    return tiny_llama(len(tok), seed=seed).eval(), tok
