"""The data stage: sources in, cleaned train/held-out documents out.

`run(slice_, ctx)` reads every source of `slice_.config` (the data section), cleans it (`cleaning.Cleaner`),
splits off held-out documents by a hash of their normalised text (or, with `data.split_by: id`, of
their id's last path component: `split_digest`), and writes `ctx.out/{train,valid}/<source>.jsonl.gz`
(format: `langadapt.data.documents`) plus `DataPaths.stats`. The split depends only on each document's
text (or id), so it is the same across runs and whatever order the files are read in; by text, exact
duplicates always land on the same side, by id, a page and its translations do. A target source the hash
leaves with fewer than `data.min_valid_documents` held-out documents is topped up with its lowest keys
(`held_out_floor`). Everything is streamed: train and held-out files are written at the same time, each by
`write_documents` fed through a bounded queue.
"""

from __future__ import annotations

import heapq
import json
import logging
import queue
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from langadapt.data.cleaning import Cleaner, hash_fraction, text_hash
from langadapt.data.documents import write_documents
from langadapt.data.held_out_floor import FloorCandidates, move_to_valid, shortfall_warning
from langadapt.data.sources import iter_documents, resolve_paths
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, DataSlice, SourceConfig
from langadapt.run.context import StageContext
from langadapt.run.layout import DataPaths

log = logging.getLogger("langadapt")

_DONE, _ABORT = object(), object()


class _Aborted(Exception):
    """Raised inside `write_documents` so that an aborted file is never renamed into place."""


class _DocumentWriter:
    """Feeds `write_documents` from another thread so two split files can be written in one pass."""

    def __init__(self, path: Path) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1024)
        self._error: BaseException | None = None
        self.count = 0
        self.chars = 0
        self._thread = threading.Thread(target=self._write, args=(path,), daemon=True)
        self._thread.start()

    def _items(self) -> Iterator[dict]:
        while (item := self._queue.get()) is not _DONE:
            if item is _ABORT:
                raise _Aborted
            yield item

    def _write(self, path: Path) -> None:
        try:
            write_documents(path, self._items())
        except _Aborted:
            path.with_name(path.name + ".tmp").unlink(missing_ok=True)
        except BaseException as err:
            self._error = err
            while self._queue.get() not in (_DONE, _ABORT):  # drain so put() never blocks forever
                pass

    def put(self, doc: dict) -> None:
        self._queue.put(doc)
        self.count += 1
        self.chars += len(doc["text"])

    def close(self, abort: bool = False) -> None:
        """Finish the file (or, on abort, leave nothing behind) and surface a writer error."""
        self._queue.put(_ABORT if abort else _DONE)
        self._thread.join()
        if self._error is not None:
            raise self._error


def run(slice_: DataSlice, ctx: StageContext) -> dict[str, Any]:
    """Clean and split every source; returns the per-source summary for the manifest."""
    config = slice_.config
    # Resolve every source first, so that a typo in the last path fails before any long work.
    resolved = {s.name: resolve_paths(s, s.path) for s in config.sources}
    held_out = {s.name: resolve_paths(s, s.valid_path, "valid_path") for s in config.sources if s.valid_path}
    cleaner = Cleaner(config.cleaning)
    ctx.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"valid_fraction": config.valid_fraction, "split_by": config.split_by, "sources": {}}
    for source in config.sources:
        ctx.log.info("data: reading source %s (%d file(s))", source.name, len(resolved[source.name]))
        stats = _process_source(source, config, cleaner, resolved[source.name], held_out.get(source.name), ctx.out)
        summary["sources"][source.name] = stats
        ctx.log.info(
            "data: %s kept %d train / %d held-out documents, dropped %s",
            source.name, stats["train_docs"], stats["valid_docs"], stats["dropped"] or "none",
        )
    ctx.layout.data.stats.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    return summary


def _process_source(
    source: SourceConfig,
    config: DataConfig,
    cleaner: Cleaner,
    paths: list[Path],
    valid_paths: list[Path] | None,
    out: Path,
) -> dict[str, Any]:
    counts: Counter = Counter()
    folders = DataPaths(out)
    train_path, valid_path = folders.train / f"{source.name}.jsonl.gz", folders.valid / f"{source.name}.jsonl.gz"
    train, valid = _DocumentWriter(train_path), _DocumentWriter(valid_path)
    floored = valid_paths is None and source.role == "target" and config.valid_fraction > 0
    candidates = FloorCandidates(config.min_valid_documents if floored else 0)
    failed = True
    try:
        if valid_paths is not None:
            # Held-out file first: its texts enter the dedup memory, so copies in train are dropped.
            for _, _, doc in _clean(source, config, cleaner, valid_paths, counts):
                valid.put(doc)
            for _, _, doc in _clean(source, config, cleaner, paths, counts):
                train.put(doc)
        else:
            _split_by_hash(source, config, cleaner, paths, counts, train, valid, candidates)
        failed = False
    finally:
        train.close(abort=failed)
        valid.close(abort=failed)
    train_docs, train_chars, valid_docs, valid_chars = train.count, train.chars, valid.count, valid.chars
    floor: dict[str, int] = {}
    if valid_docs < candidates.limit:
        docs, chars = move_to_valid(train_path, valid_path, candidates.choose(candidates.limit - valid_docs, train_docs))
        train_docs, train_chars, valid_docs, valid_chars = (train_docs - docs, train_chars - chars,
                                                            valid_docs + docs, valid_chars + chars)
        floor = {"valid_floor_docs": docs} if docs else {}
    if train_docs == 0:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "read") or "nothing"
        raise LangadaptError(
            f"source {source.name}: no training documents left after cleaning "
            f"(read {counts['read']}, dropped: {dropped})"
        )
    if floored and valid_docs < max(config.min_valid_documents, 1):
        log.warning(shortfall_warning(source.name, source.lang, valid_docs, train_docs, config.min_valid_documents,
                                      config.valid_fraction))
    fallback = {_FALLBACK: counts.pop(_FALLBACK, 0)} if config.split_by == "id" and valid_paths is None else {}
    return {
        "lang": source.lang,
        "role": source.role,
        "docs_read": counts.pop("read", 0),
        "decode_errors_replaced": counts.pop("decode_error_replaced", 0),
        "train_docs": train_docs,
        "train_chars": train_chars,
        "valid_docs": valid_docs,
        "valid_chars": valid_chars,
        **floor,
        **fallback,
        "dropped": dict(sorted(counts.items())),
    }


_FALLBACK = "split_by_text_fallback"
"""Summary key: documents that `split_by: id` split by their text, having no id."""


def split_digest(text_digest: bytes, doc_id: str | None, split_by: str) -> bytes:
    """The digest whose `hash_fraction` decides a document's side of the held-out split.

    By `id`: the hash of the id's last path component, the part a page shares with its translations
    (`.../html/nb-NO/intro.html` and `.../html/en-US/intro.html` both give `intro.html`), so every
    language holds out the same pages. By `text`, or for a document without an id: its text digest."""
    if split_by == "id" and doc_id:
        return text_hash(PurePosixPath(doc_id).name)
    return text_digest


def _split_by_hash(
    source: SourceConfig,
    config: DataConfig,
    cleaner: Cleaner,
    paths: list[Path],
    counts: Counter,
    train: _DocumentWriter,
    valid: _DocumentWriter,
    candidates: FloorCandidates,
) -> None:
    """Held out = hash fraction (`split_digest`) below valid_fraction; with max_valid_docs the lowest
    hashes win. Each document sent to train is offered to `candidates` (the held-out floor's
    lowest keys) with its position in the train file.

    The cap keeps a heap of the held-out candidates with the lowest hashes (bounded by the cap);
    a candidate pushed out goes to train. Ties (documents sharing an id) are broken by the text
    digest, so the result depends only on the set of documents, not on their order.
    """
    capped: list[tuple[float, bytes, bytes, int, dict]] = []  # max-heap via negated fraction
    for number, (digest, doc_id, doc) in enumerate(_clean(source, config, cleaner, paths, counts)):
        if config.split_by == "id" and not doc_id:
            counts[_FALLBACK] += 1
        key = split_digest(digest, doc_id, config.split_by)
        fraction = hash_fraction(key)
        if fraction >= config.valid_fraction:
            candidates.offer(key, train.count)
            train.put(doc)
        elif config.max_valid_docs is None:
            valid.put(doc)
        else:
            # The number only separates identical documents (dedup off), whose order is immaterial.
            heapq.heappush(capped, (-fraction, key, digest, number, doc))
            if len(capped) > config.max_valid_docs:
                _, pushed_key, *_, pushed = heapq.heappop(capped)
                candidates.offer(pushed_key, train.count)
                train.put(pushed)
    for *_, doc in sorted(capped, key=lambda item: (-item[0], item[1], item[2])):
        valid.put(doc)


def _clean(
    source: SourceConfig, config: DataConfig, cleaner: Cleaner, paths: list[Path], counts: Counter
) -> Iterator[tuple[bytes, dict]]:
    """(text digest, the id as read, output record) for each document that survives cleaning;
    counts the rest."""
    check_lang = source.role != "code" and source.lang != "code"
    for raw in iter_documents(source, paths, config.on_decode_error, counts, config.max_document_bytes):
        counts["read"] += 1
        text = cleaner.normalize(raw.text)
        digest = text_hash(text)
        reason = cleaner.reject(text, digest, source.lang, check_lang)
        if reason is not None:
            counts[reason] += 1
            continue
        yield digest, raw.id, {
            "id": f"{source.name}-{digest.hex()[:16]}",
            "text": text,
            "lang": source.lang,
            "source": source.name,
            "role": source.role,
        }
