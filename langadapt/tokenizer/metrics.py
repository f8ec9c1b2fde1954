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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

_WORD = re.compile(r"\S+")
HELD_OUT_BYTES_PER_LANG = 1_000_000
"""UTF-8 bytes of held-out text measured per language (the evaluation's default cap,
`evaluation.max_bytes_per_lang`): fertility is a ratio of counts that 1 MB (~150k words) pins to
the third decimal, while reading all held-out text (8% of the corpus) cost as much as cleaning it."""


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
    """Tokens per word of `text`, vectorised (a Python loop per token was half the stage's metrics)."""
    spans = np.array([m.span() for m in _WORD.finditer(text)], dtype=np.int64).reshape(-1, 2)
    # character -> word index, -1 outside words (words are disjoint runs of non-space)
    edges = np.zeros(len(text) + 2, dtype=np.int64)
    np.add.at(edges, spans[:, 0], 1)
    starts_seen = np.cumsum(edges)[: len(text) + 1]
    np.add.at(edges, spans[:, 1], -1)
    word_of = np.where(np.cumsum(edges)[: len(text) + 1] > 0, starts_seen - 1, -1)
    if not len(offsets):
        return np.zeros(len(spans), dtype=np.int64)
    bounds = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    starts, ends = bounds[:, 0], bounds[:, 1]
    # the last character of the token's span; byte-level and SentencePiece tokens carry their
    # leading space, so the first character would often be a space
    owner = np.where(ends > starts, word_of[np.maximum(starts, ends - 1)], -1)
    return np.bincount(owner[owner >= 0], minlength=len(spans))[: len(spans)].astype(np.int64)


def held_out_sample(
    files: list[Path], read: Any, max_bytes: int | None = HELD_OUT_BYTES_PER_LANG
) -> tuple[dict[str, list[str]], dict[str, dict[str, int | bool]]]:
    """Held-out texts per language, at most `max_bytes` UTF-8 bytes each, and what was measured.

    `files` are the held-out files, one source (so one language) each; `read(path)` yields their
    documents. A language's documents are taken from its files in turn (the first of each file,
    then the second, ...) until the cap, the last one cut on a character boundary: deterministic,
    every source represented, and reading stops early. A language below the cap is measured whole
    (the metrics are sums over documents, so the same as reading it in file order).
    """
    by_lang: dict[str, list[Path]] = {}
    for path in files:
        if (lang := _first_lang(read(path))) is not None:
            by_lang.setdefault(lang, []).append(path)
    texts: dict[str, list[str]] = {}
    measured: dict[str, dict[str, int | bool]] = {}
    for lang, paths in sorted(by_lang.items()):
        taken = texts[lang] = []
        left = max_bytes
        for text in _in_turn([(doc["text"] for doc in read(path)) for path in paths]):
            data = text.encode("utf-8")
            if left is not None and len(data) >= left:
                if cut := data[:left].decode("utf-8", errors="ignore"):
                    taken.append(cut)
                left = 0
                break
            taken.append(text)
            left = None if left is None else left - len(data)
        measured[lang] = {"bytes": sum(len(t.encode("utf-8")) for t in taken), "documents": len(taken),
                          "capped": left == 0}
    return texts, measured


def _first_lang(documents: Iterator[dict]) -> str | None:
    for doc in documents:
        return doc["lang"]
    return None


def _in_turn(streams: list[Iterator[str]]) -> Iterator[str]:
    """One item of each stream in turn, until all are exhausted."""
    while streams:
        alive = []
        for stream in streams:
            for item in stream:
                yield item
                alive.append(stream)
                break
        streams = alive


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
