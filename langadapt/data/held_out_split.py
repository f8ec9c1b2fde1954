"""Which side of the held-out split each kept document of a source goes to, in the writing process.

The key is each document's `preparation.split_digest`, computed by the workers; what is decided
here needs the documents before it: the `max_valid_docs` cap (the lowest hashes win, whatever the
order) and, under `split_by: id`, whether the ids leave anything to split. The split depends only
on each document's text (or id), so it is the same across runs and whatever order the files are
read in; by text, exact duplicates always land on the same side, by id, a page and its
translations do. A target source the hash leaves with fewer than `data.min_valid_documents`
held-out documents is topped up with its lowest keys afterwards (`held_out_floor`, called by `merge`).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterator

from langadapt.data.cleaning import hash_fraction
from langadapt.data.documents import DocumentFile
from langadapt.data.held_out_floor import FloorCandidates
from langadapt.data.preparation import Cleaned
from langadapt.recipe.data import DataConfig, SourceConfig

TEXT_FALLBACK = "split_by_text_fallback"
"""Summary key: documents that `split_by: id` split by their text, having no id."""


class IdKeys:
    """Whether `split_by: id` found more than one split key among a source's id-bearing documents.

    Every document sharing one id name (a dataset whose `id` column is a constant, ids like
    `page.html` in every row) is one key group: the hash puts all of them on one side, so the source
    either holds out nothing or trains on nothing, and the held-out floor cannot help (it moves
    whole groups and keeps one train document). `valid_fraction: 0`, which also holds out nothing,
    is refused by the recipe schema; this is the same outcome, known only once the documents are
    read, so it is refused too rather than warned (until round four it left 0 held-out documents
    with a warning, or, when the one key hashed low, "no training documents left")."""

    def __init__(self) -> None:
        self.first: bytes | None = None
        self.with_id = 0
        self.distinct = False

    def see(self, entry: Cleaned) -> None:
        if not entry.has_id:
            self.distinct = True  # split by its text: a key of its own
            return
        self.with_id += 1
        if self.first is None:
            self.first = entry.key
        elif entry.key != self.first:
            self.distinct = True

    def problem(self, source: SourceConfig) -> str | None:
        """The refusal line when two or more documents all share one id name (one document is a
        smoke test, said by `shortfall_warning` like any other)."""
        if self.distinct or self.with_id < 2:
            return None
        where = source.path if isinstance(source.path, str) else ", ".join(source.path[:2])
        return (f"source {source.name} ({where}): data.split_by: id, but all {self.with_id:,} of its documents have "
                "ids with the same last path component, so no document can be held out without holding out every "
                "one; give the documents distinct ids, set data.split_by: text, or give the source a valid_path")


def split_by_hash(
    entries: Iterator[Cleaned], config: DataConfig, counts: Counter, train: DocumentFile, valid: DocumentFile,
    candidates: FloorCandidates, keys: IdKeys | None = None,
) -> None:
    """Held out = hash fraction (`preparation.split_digest`) below valid_fraction; with max_valid_docs
    the lowest hashes win. Each document sent to train is offered to `candidates` (the held-out floor's
    lowest keys) with its position in the train file.

    The cap keeps a heap of the held-out candidates with the lowest hashes (bounded by the cap);
    a candidate pushed out goes to train. Ties (documents sharing an id) are broken by the text
    digest, so the result depends only on the set of documents, not on their order.
    """
    capped: list[tuple[float, bytes, bytes, int, Cleaned]] = []  # max-heap via negated fraction
    for number, entry in enumerate(entries):
        if config.split_by == "id" and not entry.has_id:
            counts[TEXT_FALLBACK] += 1
        if keys is not None:
            keys.see(entry)
        fraction = hash_fraction(entry.key)
        if fraction >= config.valid_fraction:
            candidates.offer(entry.key, train.count)
            train.write(entry.line, entry.chars)
        elif config.max_valid_docs is None:
            valid.write(entry.line, entry.chars)
        else:
            # The number only separates identical documents (dedup off), whose order is immaterial.
            heapq.heappush(capped, (-fraction, entry.key, entry.digest, number, entry))
            if len(capped) > config.max_valid_docs:
                _, pushed_key, *_, pushed = heapq.heappop(capped)
                candidates.offer(pushed_key, train.count)
                train.write(pushed.line, pushed.chars)
    for *_, entry in sorted(capped, key=lambda item: (-item[0], item[1], item[2])):
        valid.write(entry.line, entry.chars)
