"""The training sample: which documents the tokenizer learns from.

Language balance is done on counts (see `counting.weighted_counts`), so this module only has
to choose documents. Without a size bound every document of a wanted language streams straight
through. With `max_training_chars`, each language gets its share of the bound and keeps a
uniform random subset of its documents that fits ("bottom-k": every document gets a key from a
seeded hash of its text, the smallest keys win). That needs one pass, memory of at most the
bound, and gives the same sample for the same seed and input.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Iterator


def wanted(lang: str, weights: dict[str, float] | None) -> bool:
    """Whether documents of `lang` take part at all (weight > 0, or no weights given)."""
    return weights is None or weights.get(lang, 0.0) > 0


def sample_documents(
    texts: Iterable[tuple[str, str]],
    weights: dict[str, float] | None,
    max_chars: int | None,
    seed: int,
) -> Iterator[tuple[str, str]]:
    """(lang, text) pairs of the training sample, streamed when unbounded."""
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
        self.heap: list[tuple[int, str, str]] = []  # (-key, lang, text): the largest key on top
        self.chars = 0

    def offer(self, key: int, lang: str, text: str) -> None:
        text = text[: self.quota]  # a document longer than the whole quota still contributes
        if self.heap and self.chars + len(text) > self.quota and key > -self.heap[0][0]:
            return  # would be evicted straight away
        heapq.heappush(self.heap, (-key, lang, text))
        self.chars += len(text)
        while self.chars > self.quota:
            _, _, dropped = heapq.heappop(self.heap)
            self.chars -= len(dropped)

    def items(self) -> Iterator[tuple[str, str]]:
        for _, lang, text in sorted(self.heap, reverse=True):  # ascending key: a fixed order
            yield lang, text
