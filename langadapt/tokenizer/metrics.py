"""How well a tokenizer fits a language, measured on held-out text.

- fertility: tokens per whitespace-separated word (NorMistral: Bokmål 1.79 with Mistral-Nemo's
  tokenizer, 1.22 with its own); lower means shorter sequences and more text per context;
- split share: the share of words cut into two or more tokens;
- bytes per token: UTF-8 bytes per token (the exchange rate between bits-per-byte and loss);
- premium vs English: tokens for a text / tokens for its English translation (Petrov et al.
  2023), computed only when parallel documents are given.

Tokens are counted without special tokens. A token belongs to the word that contains its last
non-space character; tokens made only of whitespace count towards fertility but not to a word.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

_WORD = re.compile(r"\S+")


def tokenizer_metrics(tokenizer: Any, texts: list[str]) -> dict[str, float | int]:
    """Fertility, split share and bytes per token of one tokenizer on some texts."""
    texts = [t for t in texts if t.strip()]
    encodings = _backend(tokenizer).encode_batch(texts, add_special_tokens=False)
    tokens = words = split = 0
    for text, encoding in zip(texts, encodings):
        per_word = _tokens_per_word(text, encoding.offsets)
        tokens += len(encoding.ids)
        words += len(per_word)
        split += int(np.count_nonzero(per_word >= 2))
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return {
        "fertility": tokens / words if words else float("nan"),
        "split_share": split / words if words else float("nan"),
        "bytes_per_token": n_bytes / tokens if tokens else float("nan"),
        "tokens": tokens,
        "words": words,
        "bytes": n_bytes,
        "documents": len(texts),
    }


def _tokens_per_word(text: str, offsets: list[tuple[int, int]]) -> np.ndarray:
    word_of = np.full(len(text) + 1, -1, dtype=np.int64)  # character -> word index
    spans = [m.span() for m in _WORD.finditer(text)]
    for i, (start, end) in enumerate(spans):
        word_of[start:end] = i
    counts = np.zeros(len(spans), dtype=np.int64)
    for start, end in offsets:
        # the last character of the token's span; byte-level and SentencePiece tokens carry their
        # leading space, so the first character would often be a space
        owner = word_of[max(start, end - 1)] if end > start else -1
        if owner >= 0:
            counts[owner] += 1
    return counts


def _backend(tokenizer: Any) -> Any:
    return getattr(tokenizer, "backend_tokenizer", tokenizer)


def compare_tokenizers(
    tokenizers: dict[str, Any],
    texts_by_lang: dict[str, list[str]],
    parallel: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Metrics for every tokenizer and language (JSON-able).

    `parallel` maps languages to lists of documents aligned with `parallel["en"]` (same index,
    same content); each tokenizer then also gets `premium_vs_en` per language.
    """
    result: dict[str, Any] = {"languages": sorted(texts_by_lang), "tokenizers": {}}
    for name, tokenizer in tokenizers.items():
        per_lang = {lang: tokenizer_metrics(tokenizer, texts) for lang, texts in sorted(texts_by_lang.items())}
        if parallel and "en" in parallel:
            english = _count_tokens(tokenizer, parallel["en"])
            for lang, docs in parallel.items():
                if len(docs) != len(parallel["en"]):
                    raise ValueError(f"parallel[{lang!r}] has {len(docs)} documents, parallel['en'] {len(parallel['en'])}")
                per_lang.setdefault(lang, {})["premium_vs_en"] = _count_tokens(tokenizer, docs) / english
        result["tokenizers"][name] = per_lang
    return result


def _count_tokens(tokenizer: Any, texts: list[str]) -> int:
    return sum(len(e.ids) for e in _backend(tokenizer).encode_batch(texts, add_special_tokens=False))


_COLUMNS = (("fertility", "fertility", "{:.3f}"), ("split_share", "split", "{:.1%}"),
            ("bytes_per_token", "bytes/tok", "{:.2f}"), ("premium_vs_en", "vs en", "{:.2f}"))


def render_table(metrics: dict[str, Any]) -> str:
    """A plain-text table: one row per language, column groups per tokenizer."""
    names = list(metrics["tokenizers"])
    langs = sorted({lang for per in metrics["tokenizers"].values() for lang in per})
    columns = [(name, key, label, fmt) for name in names for key, label, fmt in _COLUMNS
               if any(key in per for per in metrics["tokenizers"][name].values())]
    header = ["lang"] + [f"{name} {label}" for name, _, label, _ in columns]
    rows = [header]
    for lang in langs:
        row = [lang]
        for name, key, _, fmt in columns:
            value = metrics["tokenizers"][name].get(lang, {}).get(key)
            row.append("-" if value is None else fmt.format(value))
        rows.append(row)
    if len(names) >= 2:  # the headline: how much shorter the new tokenizer makes each language
        first, last = names[0], names[-1]
        header.append(f"{last}/{first}")
        for row, lang in zip(rows[1:], langs):
            a = metrics["tokenizers"][first].get(lang, {}).get("fertility")
            b = metrics["tokenizers"][last].get(lang, {}).get("fertility")
            row.append("-" if not a or b is None else f"{b / a:.2f}x")
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot_fertility(metrics: dict[str, Any], path: str | Path) -> Path:
    """A grouped bar chart of fertility per language and tokenizer (PNG, for the report)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(metrics["tokenizers"])
    langs = sorted({lang for per in metrics["tokenizers"].values() for lang, m in per.items() if "fertility" in m})
    width = min(0.35, 0.8 / max(1, len(names)))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(langs) + 2), 3.5))
    for i, name in enumerate(names):
        values = [metrics["tokenizers"][name].get(lang, {}).get("fertility", np.nan) for lang in langs]
        ax.bar(np.arange(len(langs)) + (i - (len(names) - 1) / 2) * width, values, width, label=name)
    ax.set_xticks(np.arange(len(langs)), langs)
    ax.set_ylabel("tokens per word")
    ax.set_title("Fertility on held-out text (lower is better)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
