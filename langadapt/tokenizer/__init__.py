"""Tokenizer stage: train a tokenizer for the target language in the base tokenizer's mould.

Public API (imported lazily, so that loading a recipe does not import transformers):

    TokenizerConfig                                  the recipe slice (langadapt.recipe.tokenizer)
    train_tokenizer(config, texts, base, seed)       (lang, text) pairs -> PreTrainedTokenizerFast
    tokenizer_metrics(tokenizer, texts)              fertility, split share, bytes per token
    compare_tokenizers(tokenizers, texts_by_lang)    the same per tokenizer and language (JSON-able)
    render_table(metrics), plot_fertility(metrics, path)
    run(slice_, ctx)                                 the pipeline stage (stage.py)
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from langadapt.recipe.tokenizer import TokenizerConfig  # the recipe's slice (no torch)

_EXPORTS = {
    "train_tokenizer": "train",
    "tokenizer_metrics": "metrics",
    "compare_tokenizers": "metrics",
    "render_table": "metrics",
    "plot_fertility": "metrics",
    "run": "stage",
}
__all__ = ["TokenizerConfig", "compare_tokenizers", "plot_fertility", "render_table", "run", "tokenizer_metrics",
           "train_tokenizer"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'langadapt.tokenizer' has no attribute {name!r}")
    return getattr(import_module(f"langadapt.tokenizer.{_EXPORTS[name]}"), name)
