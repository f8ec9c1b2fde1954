"""Embeddings stage: map the old vocabulary onto the new one and initialise the new rows.

Library use: `transfer_embeddings(model, old_tokenizer, new_tokenizer, EmbeddingConfig())`;
`build_mapping` alone inspects how a new vocabulary decomposes into the old one.

Names are imported lazily (the settings, `recipe.embeddings`, are plain pydantic): loading
a recipe must not import torch and transformers (an invalid recipe then errors in a fraction of a
second instead of ~5 s; `tests/cli/test_schema_import.py` checks it).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from langadapt.recipe.embeddings import EmbeddingConfig  # the recipe's slice (no torch)

_EXPORTS = {
    "VocabMapping": "mapping",
    "build_mapping": "mapping",
    "transfer_embeddings": "transfer",
}
__all__ = ["EmbeddingConfig", "VocabMapping", "build_mapping", "transfer_embeddings"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'langadapt.embeddings' has no attribute {name!r}")
    return getattr(import_module(f"langadapt.embeddings.{_EXPORTS[name]}"), name)
