"""The uniform-prediction reference: the bits per byte of a model that gives every token of its
vocabulary the same probability, on the same held-out text.

    uniform bpb = log2(V) * tokens / bytes = log2(V) / (bytes per token)

It is the line a step-0 model has to beat to have learned anything about the text: a freshly
initialised model predicts near-uniformly, and an initialisation that lands above this line is
confidently wrong (so an init is judged against the same warm model's baseline rows and beside this
line, not against a cold model). It depends only on the tokenizer and the text, so it
is computed once per distinct tokenizer, from the token counts its first model's scoring recorded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def uniform_reference(models: dict[str, dict], tokenizers: Iterable[tuple[str, Any]],
                      used_by: dict[str, list[str]]) -> dict[str, dict]:
    """{TOKENIZER: {"vocab": V, "models": [...], "bits_per_byte": {LANG: uniform bpb}}} for every
    tokenizer whose models were scored on held-out text (`models` is results["models"])."""
    found: dict[str, dict] = {}
    for name, tokenizer in tokenizers:
        users = used_by.get(name, [])
        scored = models.get(users[0], {}) if users else {}
        vocab = len(tokenizer)
        per_lang = {lang: math.log2(vocab) * m["tokens"] / m["bytes"]
                    for lang, m in scored.items() if m.get("bytes")}
        if per_lang:
            found[name] = {"vocab": vocab, "models": users, "bits_per_byte": per_lang}
    return found


def uniform_line(results: dict) -> str | None:
    """The report's sentence under the bits-per-byte table (None when nothing was scored)."""
    found = results.get("uniform") or {}
    if not found:
        return None
    parts = []
    for name, ref in found.items():
        values = ", ".join(f"{lang} {bpb:.3f}" for lang, bpb in ref["bits_per_byte"].items())
        parts.append(f"{name} tokenizer ({ref['vocab']:,} tokens; {', '.join(ref['models'])}): {values}")
    return ("Uniform prediction (every token of the vocabulary equally likely, log2(V) / bytes per token): "
            + "; ".join(parts) + ". A step-0 model above this line predicts worse than knowing nothing.")
