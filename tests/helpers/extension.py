"""Read an extended tokenizer's merge tree: the base tokens each new token was merged from."""

from __future__ import annotations

from collections.abc import Callable


def expander(tokenizer_json: dict, base_n: int) -> Callable[[list[int]], list[int]]:
    """A function that replaces each new id (>= base_n) by the base ids it was merged from, recursively."""
    model = tokenizer_json["model"]
    vocab = model["vocab"]
    parents = {vocab[a + b]: (vocab[a], vocab[b]) for a, b in model["merges"][-(len(vocab) - base_n):]
               if vocab[a + b] >= base_n}

    def leaves(i: int) -> list[int]:
        return leaves(parents[i][0]) + leaves(parents[i][1]) if i in parents else [i]

    return lambda ids: [leaf for i in ids for leaf in leaves(i)]
