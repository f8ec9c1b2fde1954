"""The held-out floor: a target source keeps at least `data.min_valid_documents` held-out documents.

The hash split (`data.held_out_split`) holds a document out when the hash fraction of its key (its
text, or with `split_by: id` its id's last path component: `preparation.split_digest`) is below
`valid_fraction`. On a tiny corpus or with a tiny fraction that can be none of a target source's
documents, and every report then measures nothing for the language the run is for. The floor tops
the held-out side up with the train documents of the LOWEST keys: exactly the ones a slightly
larger `valid_fraction` would have held out first, so the floor is the hash split continued, not a
second rule:

- it depends only on the set of documents (which keys are lowest), never on the order they are read
  in, so a re-run gives the same split;
- it moves whole key groups: by text, exact duplicates (deduplication off) stay on one side; by id,
  a page is never split between train and valid, and two languages holding the same pages move
  the same pages (the lowest hash over the same set of names), so `split_by: id` pairing holds.
  Languages holding different page sets may move different pages: only pages held out by the hash
  itself are paired whatever the sets are;
- it never moves a source's last train document (a source of one document, or of one id group,
  can hold nothing out: `shortfall_warning` says so);
- when the hash already holds out enough it changes nothing: the train file the streaming pass
  wrote stays byte for byte what it was. Only when the floor acts is the train file read once
  more and rewritten without the moved documents.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

from langadapt.data.documents import read_documents, write_documents


class FloorCandidates:
    """The train-file positions of the documents of the `limit` lowest keys seen (no text kept:
    `limit` keys, each with the positions of its documents, is all the floor can need)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._keys: list[bytes] = []  # ascending
        self._positions: dict[bytes, list[int]] = {}

    def offer(self, key: bytes, position: int) -> None:
        """Record that the train document at `position` has split key `key`."""
        if self.limit == 0:
            return
        if key in self._positions:
            self._positions[key].append(position)
        elif len(self._keys) < self.limit or key < self._keys[-1]:
            bisect.insort(self._keys, key)
            self._positions[key] = [position]
            if len(self._keys) > self.limit:
                del self._positions[self._keys.pop()]

    def choose(self, needed: int, train_docs: int) -> set[int]:
        """Positions of whole key groups, lowest key first, until `needed` documents are chosen;
        a group that would leave train empty stops the choice."""
        chosen: list[int] = []
        for key in self._keys:
            group = self._positions[key]
            if len(chosen) >= needed or len(chosen) + len(group) >= train_docs:
                break
            chosen.extend(group)
        return set(chosen)


def move_to_valid(train_path: Path, valid_path: Path, positions: set[int]) -> tuple[int, int]:
    """Rewrite `train_path` without the documents at `positions` and append them to `valid_path`
    (both atomically); returns the documents and characters moved."""
    moved: list[dict] = []

    def kept() -> Iterator[dict]:
        for number, doc in enumerate(read_documents(train_path)):
            if number in positions:
                moved.append(doc)
            else:
                yield doc

    write_documents(train_path, kept())
    write_documents(valid_path, chain(read_documents(valid_path), moved))
    return len(moved), sum(len(doc["text"]) for doc in moved)


def shortfall_warning(source: str, lang: str, held_out: int, train_docs: int, floor: int,
                      valid_fraction: float) -> str:
    """The line for a target source left below the floor (or, with the floor off, holding out
    nothing): said, not refused, because a one-document smoke-test corpus is a fine run to train,
    but its reports measure nothing (or little) for its language, and the user should know why."""
    total = held_out + train_docs
    if floor == 0:
        why = (f"data.valid_fraction: {valid_fraction:g} picks none and data.min_valid_documents is 0; "
               f"the evaluation and validation measure nothing for {lang}; raise either, or give the source a valid_path")
    else:
        measured = "nothing" if held_out == 0 else f"only {held_out:,} document(s)"
        why = (f"below data.min_valid_documents ({floor}): at least one must stay in train and documents sharing a "
               f"split key move together; the evaluation and validation measure {measured} for {lang}; give the "
               "source more documents or a valid_path")
    return f"data: target source {source} ({lang}) holds out {held_out:,} of its {total:,} document(s), {why}"
