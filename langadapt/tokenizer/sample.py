"""The training sample: which documents the tokenizer learns from.

Language balance is done on counts (see `counting.weighted_counts`), so this module only has
to choose documents. With a bound (`max_training_chars`; unset means
`DEFAULT_MAX_TRAINING_CHARS`), each language gets its share of the bound and keeps a uniform
random subset of its documents that fits ("bottom-k": every document gets a key from a seeded
hash of its text, the smallest keys win). That needs one pass and gives the same sample for the
same seed and input. The kept documents come out in the order they went in, so a corpus below the
bound gives exactly the unbounded stream (and the same tokenizer). With `all` every document of a
wanted language streams straight through.

Memory: the bottom-k holds the sample's text, at most the bound: a Python str costs 1 byte per
character for Latin-1 text (Norwegian included), 2 beyond U+00FF, 4 beyond U+FFFF, plus ~120 bytes
per document of tuple and heap overhead; ~1.0-1.1 GB per 10^9 characters of bound for Latin text.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Iterator
from typing import Literal

from langadapt.recipe.tokenizer import DEFAULT_MAX_TRAINING_CHARS


def wanted(lang: str, weights: dict[str, float] | None) -> bool:
    """Whether documents of `lang` take part at all (weight > 0, or no weights given)."""
    return weights is None or weights.get(lang, 0.0) > 0


def sample_bound(max_training_chars: int | Literal["all"] | None) -> int | None:
    """The bound in characters that `tokenizer.max_training_chars` means; None for `all` (no bound)."""
    if max_training_chars == "all":
        return None
    return DEFAULT_MAX_TRAINING_CHARS if max_training_chars is None else max_training_chars


def sample_documents(
    texts: Iterable[tuple[str, str]],
    weights: dict[str, float] | None,
    max_chars: int | None,
    seed: int,
) -> Iterator[tuple[str, str]]:
    """(lang, text) pairs of the training sample (`max_chars` from `sample_bound`), streamed when
    unbounded; bounded, each language's kept documents in input order, languages in name order."""
    texts = ((lang, text) for lang, text in texts if text and wanted(lang, weights))
    if max_chars is None:
        yield from texts
        return
    quotas = _quotas(weights, max_chars)
    pools: dict[str, _BottomK] = {}
    for lang, text in texts:
        pool_name = lang if weights is not None else ""
        if pool_name not in pools:
            pools[pool_name] = _BottomK(quotas[pool_name] if weights is not None else max_chars)
        pools[pool_name].offer(_key(seed, lang, text), lang, text)
    for pool_name in sorted(pools):
        yield from pools[pool_name].items()


def _quotas(weights: dict[str, float] | None, max_chars: int) -> dict[str, int]:
    if weights is None:
        return {"": max_chars}
    total = sum(w for w in weights.values() if w > 0)
    return {lang: int(max_chars * w / total) for lang, w in weights.items() if w > 0}


def _key(seed: int, lang: str, text: str) -> int:
    digest = hashlib.blake2b(f"{seed}\x00{lang}\x00".encode() + text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class _BottomK:
    """The documents with the smallest keys whose lengths add up to at most `quota` characters."""

    def __init__(self, quota: int) -> None:
        self.quota = quota
        self.heap: list[tuple[int, int, str, str]] = []  # (-key, arrival, lang, text): largest key on top
        self.chars = 0
        self.offered = 0

    def offer(self, key: int, lang: str, text: str) -> None:
        text = text[: self.quota]  # a document longer than the whole quota still contributes
        self.offered += 1
        if self.heap and self.chars + len(text) > self.quota and key > -self.heap[0][0]:
            return  # would be evicted straight away
        heapq.heappush(self.heap, (-key, self.offered, lang, text))
        self.chars += len(text)
        while self.chars > self.quota:
            dropped = heapq.heappop(self.heap)[3]
            self.chars -= len(dropped)

    def items(self) -> Iterator[tuple[str, str]]:
        """The kept documents in arrival order, emptying the pool as they go (memory is freed early)."""
        self.heap.sort(key=lambda item: item[1], reverse=True)
        while self.heap:
            _, _, lang, text = self.heap.pop()
            yield lang, text
