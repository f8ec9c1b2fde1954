"""Word counting for tokenizer training: each distinct piece of text is pre-tokenised once.

Why not hand the documents straight to `Tokenizer.train_from_iterator`? That works, but it runs
the regex pre-tokeniser over every character and cannot weight languages or bound memory. Here
documents are cut into chunks at spaces that are certainly pre-token boundaries ("word word"),
the chunks are counted with `collections.Counter` (C speed), and only the distinct chunks go
through the tokenizer's own normaliser and pre-tokeniser. Natural text repeats its words, so
that is a small fraction of the text, and the counts are exact: the first documents are also
pre-tokenised whole and compared, and any pre-tokeniser for which the cut is not transparent
falls back to whole documents. Memory is bounded by the number of distinct chunks, not by the
corpus size.

Counting runs on worker processes (`ChunkCounter.add_all`) once the text is large enough to repay
starting them: batches of documents go out in order and their Counters are merged back in the same
order, so every count, and even the order of first occurrence that the Counters keep, is what one
process gives; the tokenizer is the same byte for byte whatever the number of workers.
"""

from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from langadapt.data.workers import ordered_map, worker_pool

# A space is a boundary of every regex/Metaspace pre-tokeniser we know of when a word-ish
# character precedes it and a word character follows it; the check in `ChunkCounter` proves it
# for the tokenizer at hand.
_CUT = re.compile(r"(?= \w)(?<=[\w.,;:!?)\]}\"'])")  # lookahead first: most positions fail fast
_CHECK_CHARS = 30_000
"""Characters of the first documents pre-tokenised whole to check that chunking is transparent."""
BATCH_CHARS = 4_000_000
"""Characters per batch sent to a worker: ~0.3 s of counting, against a few ms to send the text and
to merge the batch's Counter back (distinct chunks grow much slower than the text)."""
IN_PROCESS_CHARS = 16_000_000
"""Below this much text the parent counts alone: ~1 s of counting, about what starting spawned
workers costs (the demo's ~2 MB never starts one)."""

Batch = list[tuple[str, str]]
BatchCounts = tuple[dict[str, Counter[str]], Counter[str], int]


class ChunkCounter:
    """Counts the chunks of each language's documents; turns them into pre-token counts."""

    def __init__(self, normalizer: Any | None, pre_tokenizer: Any) -> None:
        self.normalizer = normalizer
        self.pre_tokenizer = pre_tokenizer
        self.chunks: dict[str, Counter[str]] = {}
        self.chars: Counter[str] = Counter()
        self.documents = 0
        self.chunking = True
        self._checked_chars = 0

    def add(self, lang: str, text: str) -> None:
        """Count one document of language `lang`."""
        if self.normalizer is not None:
            text = self.normalizer.normalize_str(text)
        counter = self.chunks.setdefault(lang, Counter())
        self.chars[lang] += len(text)
        self.documents += 1
        if self.chunking and self._checked_chars < _CHECK_CHARS:
            self._checked_chars += len(text)
            # Documents counted before a failed check passed it, so their chunk counts stay exact.
            self.chunking = self._transparent(text)
        counter.update(_CUT.split(text) if self.chunking else (text,))

    def add_all(self, texts: Iterable[tuple[str, str]], num_workers: int | None = None) -> None:
        """Count every (lang, text) document, on `num_workers` processes where the text is large.

        None means every core this process may run on. The first documents are counted here, as
        `add` does, until the transparency check is decided; whether later documents are cut into
        chunks is then fixed, so workers only normalise, cut and count.
        """
        texts = iter(texts)
        for lang, text in texts:
            self.add(lang, text)
            if not (self.chunking and self._checked_chars < _CHECK_CHARS):
                break
        workers = len(os.sched_getaffinity(0)) if num_workers is None else num_workers
        batches = _batches(texts)
        pending: list[Batch] = []  # held until the text is known to be large: at most IN_PROCESS_CHARS
        for batch in batches:
            if workers <= 1:
                self._merge(_count_batch(batch, self.normalizer, self.chunking))
                continue
            pending.append(batch)
            if len(pending) * BATCH_CHARS >= IN_PROCESS_CHARS:
                self._count_on_pool(workers, itertools.chain(pending, batches))
                return
        for batch in pending:  # small: pool start-up would cost more than it saves
            self._merge(_count_batch(batch, self.normalizer, self.chunking))

    def _count_on_pool(self, workers: int, batches: Iterable[Batch]) -> None:
        with worker_pool(workers, _init_worker, (self.normalizer, self.chunking)) as pool:
            for _, counts in ordered_map(_count_worker_batch, batches, pool, workers, lambda _: "counting words"):
                self._merge(counts)

    def _merge(self, counts: BatchCounts) -> None:
        """Add one batch's counts; merged in input order, first occurrences stay in input order."""
        chunks, chars, documents = counts
        for lang, counter in chunks.items():
            self.chunks.setdefault(lang, Counter()).update(counter)
        self.chars.update(chars)
        self.documents += documents

    def _transparent(self, text: str) -> bool:
        whole = Counter(w for w, _ in self.pre_tokenizer.pre_tokenize_str(text))
        cut = Counter(w for c in _CUT.split(text) for w, _ in self.pre_tokenizer.pre_tokenize_str(c))
        return whole == cut

    def word_counts(self, weights: dict[str, float] | None = None) -> Counter[str]:
        """Language-weighted pre-token counts (the strings the trainer sees).

        Languages are weighted on chunk counts, before pre-tokenisation, so that a chunk shared
        by several languages is pre-tokenised once.
        """
        return pretokenize_counts(weighted_counts(self.chunks, self.chars, weights), self.pre_tokenizer)


def _batches(texts: Iterator[tuple[str, str]]) -> Iterator[Batch]:
    """Consecutive documents of about BATCH_CHARS characters."""
    batch: Batch = []
    chars = 0
    for lang, text in texts:
        batch.append((lang, text))
        chars += len(text)
        if chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _count_batch(batch: Batch, normalizer: Any | None, chunking: bool) -> BatchCounts:
    """Chunk counts per language, normalised characters per language and documents of one batch."""
    chunks: dict[str, Counter[str]] = {}
    chars: Counter[str] = Counter()
    for lang, text in batch:
        if normalizer is not None:
            text = normalizer.normalize_str(text)
        chars[lang] += len(text)
        counter = chunks.setdefault(lang, Counter())
        counter.update(_CUT.split(text) if chunking else (text,))
    return chunks, chars, len(batch)


_WORKER: dict[str, Any] = {}


def _init_worker(normalizer: Any | None, chunking: bool) -> None:
    _WORKER.update(normalizer=normalizer, chunking=chunking)


def _count_worker_batch(batch: Batch) -> BatchCounts:
    return _count_batch(batch, _WORKER["normalizer"], _WORKER["chunking"])


def pretokenize_counts(chunks: Counter[str], pre_tokenizer: Any) -> Counter[str]:
    """Pre-token counts of counted chunks: every distinct chunk is pre-tokenised once."""
    words: Counter[str] = Counter()
    for chunk, n in chunks.items():
        for word, _ in pre_tokenizer.pre_tokenize_str(chunk):
            words[word] += n
    return words


def weighted_counts(
    counts: dict[str, Counter[str]], chars: Counter[str], weights: dict[str, float] | None
) -> Counter[str]:
    """Merge per-language counts so that each language's share of characters is its weight.

    Counts are scaled by `share * total_chars / language_chars` (a language with too little text
    is repeated, one with too much is thinned), so the total stays about the same and so does the
    training time. Without weights the counts are simply added up.
    """
    merged: Counter[str] = Counter()
    if weights is None:
        for counter in counts.values():
            merged.update(counter)
        return merged
    present = {lang: w for lang, w in weights.items() if w > 0 and chars.get(lang)}
    total_weight, total_chars = sum(present.values()), sum(chars[lang] for lang in present)
    for lang, weight in sorted(present.items()):
        factor = weight / total_weight * total_chars / chars[lang]
        for key, n in counts[lang].items():
            scaled = round(n * factor)
            if scaled:
                merged[key] += scaled
    return merged


def separator_for(words: Iterable[str]) -> str:
    """A character that occurs in no pre-token, to join repeated pre-tokens for the trainer."""
    words = list(words)
    for candidate in (" ", "\x00", "\x01", "\uffff", "\U0010fffe"):
        if not any(candidate in word for word in words):
            return candidate
    raise RuntimeError("no free separator character for the trainer feed")


def feed(words: Counter[str], separator: str, batch_chars: int = 1 << 16) -> Iterator[str]:
    """Counted pre-tokens as trainer input: each pre-token repeated as often as it was counted.

    The trainer only accepts text, so counts travel as repetitions, joined by a separator that
    the training pre-tokeniser splits on. Batches are small (64K characters): the trainer works
    on sequences in parallel and keeps per-byte alignment data for each one, so 1 MB batches
    were slower and cost ~100 MB more memory.
    """
    buffer: list[str] = []
    size = 0
    for word, n in words.items():  # the trainer counts into a hash map: input order is irrelevant
        piece = (word + separator) * n
        buffer.append(piece)
        size += len(piece)
        if size >= batch_chars:
            yield "".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer)
