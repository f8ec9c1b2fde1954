"""The data stage's work, whatever runs it: pieces cleaned in any order, merged in piece order.

Parallel by design, with the output of one process: the sources are cut into pieces (`plan_jobs`,
`pieces`: files, line spans of a big file, Parquet row groups, dataset shards), workers read and
clean pieces (`clean_piece`: decoding, NFC, length and language filters, digests, MinHash
signatures, the JSON line), and one process takes their results back in piece order (`merge`) and
does what depends on earlier documents: exact and near dedup (`cleaning.Deduplicator`), the
held-out cap and floor, and writing. The pieces and their order do not depend on the number of
workers, so 1 and N workers write the same bytes (tests/data/test_data_parallel.py). Two engines
run it: local worker processes (`stage.run`, `workers.ordered_batches`) and datatrove tasks
(`datatrove_engine`).

The split depends only on each document's text (or id), so it is the same across runs and whatever
order the files are read in; by text, exact duplicates always land on the same side, by id, a page
and its translations do. A target source the hash leaves with fewer than `data.min_valid_documents`
held-out documents is topped up with its lowest keys (`held_out_floor`). Memory does not grow with
the corpus: pieces stream in bounded batches; what does grow, the dedup digests, moves to disk past
`cleaning.DIGESTS_IN_MEMORY`.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from langadapt.data.cleaning import Deduplicator, DocumentFilter, hash_fraction, text_hash
from langadapt.data.documents import DocumentFile, derived_mode, document_line
from langadapt.data.held_out_floor import FloorCandidates, move_to_valid, shortfall_warning
from langadapt.data.pieces import PIECE_BYTES, Piece, plan_pieces
from langadapt.data.source_paths import resolve_paths
from langadapt.data.sources import format_of, read_piece
from langadapt.errors import LangadaptError
from langadapt.inputs.text import Bound
from langadapt.recipe.data import DataConfig, SourceConfig
from langadapt.run.context import StageContext
from langadapt.run.layout import DataPaths

log = logging.getLogger("langadapt")

IN_PROCESS_BYTES = 32 << 20
"""Input below which `data.num_workers: null` cleans in this process: starting workers (a fresh
interpreter each) costs more than they save on a corpus this small (the demo's is 3 MB)."""
_BATCH_BYTES = 1 << 20
"""Bytes of cleaned lines per batch a worker sends back."""
AHEAD_BATCHES = PIECE_BYTES // _BATCH_BYTES + 1
"""Batches a worker may clean ahead of the writing process (`workers.ordered_batches`' `ahead`): a
whole piece, so that the other workers finish their pieces while the parent writes the one it is
at. With 4 (until session 16) a worker waited for the parent after 4 MB of its 64 MB piece and 2
workers took turns: 1.07x faster than one. Costs up to a piece of cleaned lines per worker
(~64 MB, held in the worker)."""


@dataclass(frozen=True)
class Job:
    """One piece of one source (what `clean_piece` reads), and which side its documents go to: `valid` (the source's
    valid_path, read first), `train` (its path, when it has a valid_path) or `split` (by hash)."""

    source: int
    part: str
    piece: Piece


class Cleaned(NamedTuple):
    """One raw document after the stateless filters (a worker's answer, in reading order).

    `reason` is why the length filters dropped it; "" marks no document, only `counts` (decode
    problems after a piece's last document). `counts` holds the reader's counters (decode errors,
    NULs stripped) that moved since the previous entry, None when none did. `line` is the document's
    line (`document_line`, UTF-8): the workers encode, and bytes cross between processes at memcpy speed where a str is decoded again,
    so the writing process does no work per byte but compressing (on its own threads)."""

    reason: str | None
    digest: bytes = b""
    key: bytes = b""
    has_id: bool = False
    lang_ok: bool = True
    line: bytes = b""
    chars: int = 0
    signature: bytes | None = None
    counts: dict[str, int] | None = None


def write_stats(summary: dict[str, Any], input_bytes: int, ctx: StageContext) -> None:
    """stats.json, the data folder's summary: one writer for every engine, so their folders are the same bytes."""
    summary["input_bytes"] = input_bytes
    ctx.layout.data.stats.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")


def merge(config: DataConfig, jobs: list[Job], stream: Iterator[tuple[int, Any]], ctx: StageContext,
          workers: int = 1) -> tuple[dict[str, Any], float]:
    """Everything that depends on earlier documents, over `clean_piece`'s batches in job order
    (`stream`: (job index, batch), from workers or from files another engine wrote): dedup, the
    held-out split, writing each source's files. Returns the stats and the cleaning CPU seconds.
    `workers`: how many clean (`compress_threads`)."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"valid_fraction": config.valid_fraction, "split_by": config.split_by, "sources": {}}
    dedup = Deduplicator(config.cleaning, ctx.out)
    worker_cpu: list[float] = []
    feed = _Feed(stream, jobs, worker_cpu)
    try:
        for index, source in enumerate(config.sources):
            pieces = sum(1 for job in jobs if job.source == index)
            ctx.log.info("data: reading source %s (%d piece(s), %d worker(s))", source.name, pieces, workers)
            stats = _process_source(index, source, config, feed, dedup, ctx.out, workers)
            summary["sources"][source.name] = stats
            ctx.log.info(
                "data: %s kept %d train / %d held-out documents, dropped %s",
                source.name, stats["train_docs"], stats["valid_docs"], stats["dropped"] or "none",
            )
        summary["pieces"] = len(jobs)
        summary["dedup_digests"] = len(dedup.digests) if dedup.digests is not None else 0
    finally:
        dedup.close()
    return summary, sum(worker_cpu)


def plan_jobs(config: DataConfig) -> tuple[list[Job], int]:
    """Every source's pieces in reading order (held-out file first), and the bytes of its local files."""
    jobs: list[Job] = []
    total = 0
    for index, source in enumerate(config.sources):
        paths = resolve_paths(source, source.path)
        parts = [("split", paths)]
        if source.valid_path:
            parts = [("valid", resolve_paths(source, source.valid_path, "valid_path")), ("train", paths)]
        for part, files in parts:
            for link in (f for f in files if source.format != "hf_hub" and f.is_symlink()):
                log.info("data: source %s reads %s, a symbolic link to %s (its files keep the target's "
                         "permissions or narrower)", source.name, link, link.resolve())
            total += sum(f.stat().st_size for f in files if source.format != "hf_hub" and f.is_file())
            jobs.extend(Job(index, part, piece) for piece in plan_pieces(source, files, format_of))
    return jobs, total


COMPRESS_THREADS_MAX = 4
"""The most threads compressing one file: more would wait for the writing thread, which takes the
batches back, deduplicates and splits at ~4 CPU-s/GB (~250 MB/s) where one thread compresses at
~14 CPU-s/GB (~70 MB/s) (measured in session 16). That thread is also what bounds the stage on a
big node: past ~8 workers they clean faster than it decides."""


def compress_threads(workers: int) -> int:
    """Threads compressing each output file beside the writing thread: none with one worker (one
    core: nothing to overlap with), else half the workers, at most `COMPRESS_THREADS_MAX`.
    Compression (zlib level 1, ~14 CPU-s/GB) costs about half of cleaning (~27 CPU-s/GB in the
    workers), so half as many threads keep pace with the workers."""
    return 0 if workers <= 1 else min(COMPRESS_THREADS_MAX, max(1, workers // 2))


def worker_count(requested: int | None, input_bytes: int) -> int:
    """`data.num_workers`, or every core this process may run on (one below `IN_PROCESS_BYTES`)."""
    if requested is not None:
        return requested
    if input_bytes < IN_PROCESS_BYTES:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class _Feed:
    """The workers' entries of one (source, part) at a time, from the ordered stream of all jobs."""

    def __init__(self, stream: Iterator[tuple[int, Any]], jobs: list[Job], worker_cpu: list[float]) -> None:
        self._stream, self.jobs, self._worker_cpu = stream, jobs, worker_cpu
        self._head: tuple[int, Any] | None = None

    def entries(self, source: int, part: str) -> Iterator[tuple[Piece, Cleaned]]:
        while True:
            if self._head is None:
                self._head = next(self._stream, None)
                if self._head is None:
                    return
            index, batch = self._head
            job = self.jobs[index]
            if (job.source, job.part) != (source, part):
                return
            self._head = None
            if isinstance(batch, float):  # a piece's end: its worker's CPU seconds
                self._worker_cpu.append(batch)
                continue
            for entry in batch:
                yield job.piece, entry

    def skip(self, source: int, part: str) -> None:
        """Drop what is left of (source, part): entries past `max_docs`."""
        for _ in self.entries(source, part):
            pass


class _Writers:
    """The train and held-out files of one source, aborted together unless both complete."""

    def __init__(self, out: Path, name: str, threads: int, mode: int) -> None:
        folders = DataPaths(out)
        self.train_path, self.valid_path = folders.train / f"{name}.jsonl.gz", folders.valid / f"{name}.jsonl.gz"
        self.train = DocumentFile(self.train_path, threads, mode)
        self.valid = DocumentFile(self.valid_path, threads, mode)

    def close(self, failed: bool) -> None:
        for out in (self.train, self.valid):
            out.abort() if failed else out.close()


def _process_source(
    index: int, source: SourceConfig, config: DataConfig, feed: _Feed, dedup: Deduplicator, out: Path, workers: int,
) -> dict[str, Any]:
    counts: Counter = Counter()
    mode = derived_mode(job.piece.path for job in feed.jobs if job.source == index)
    files = _Writers(out, source.name, compress_threads(workers), mode)
    floored = source.valid_path is None and source.role == "target" and config.valid_fraction > 0
    candidates = FloorCandidates(config.min_valid_documents if floored else 0)
    kept = _Kept(source, dedup, counts)
    failed = True
    try:
        if source.valid_path is not None:
            # Held-out file first: its texts enter the dedup memory, so copies in train are dropped.
            for entry in kept.filter(feed, index, "valid"):
                files.valid.write(entry.line, entry.chars)
            for entry in kept.filter(feed, index, "train"):
                files.train.write(entry.line, entry.chars)
        else:
            keys = _IdKeys() if config.split_by == "id" else None
            _split_by_hash(kept.filter(feed, index, "split"), config, counts, files, candidates, keys)
            if keys is not None and (problem := keys.problem(source)) is not None:
                raise LangadaptError(problem)
        failed = False
    finally:
        files.close(failed)
    train, valid = files.train, files.valid
    train_docs, train_chars, valid_docs, valid_chars = train.count, train.chars, valid.count, valid.chars
    floor: dict[str, int] = {}
    if valid_docs < candidates.limit:
        docs, chars = move_to_valid(files.train_path, files.valid_path,
                                    candidates.choose(candidates.limit - valid_docs, train_docs))
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
    fallback = {_FALLBACK: counts.pop(_FALLBACK, 0)} if config.split_by == "id" and source.valid_path is None else {}
    if fallback.get(_FALLBACK):
        log.warning("source %s: %d of its %d kept documents have no %r field, so data.split_by: id split them by "
                    "their text (their translations may fall on the other side)", source.name, fallback[_FALLBACK],
                    train_docs + valid_docs, "id")
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


class _Kept:
    """The stateful filters over a source's entries, in reading order: `max_docs`, exact dedup,
    the language verdict, near dedup; counts every drop by its first reason."""

    def __init__(self, source: SourceConfig, dedup: Deduplicator, counts: Counter) -> None:
        self.source, self.dedup, self.counts = source, dedup, counts
        self._nul_said = False

    def filter(self, feed: _Feed, index: int, part: str) -> Iterator[Cleaned]:
        """The kept entries of one part; `max_docs` bounds each part's reading on its own (a
        source's held-out file and its train files each give at most that many documents)."""
        counts, dedup, read = self.counts, self.dedup, 0
        for piece, entry in feed.entries(index, part):
            if self.source.max_docs is not None and read >= self.source.max_docs:
                feed.skip(index, part)
                return
            if entry.counts:
                counts.update(entry.counts)
                self._say_nul(piece)
            if entry.reason == "":
                continue
            counts["read"] += 1
            read += 1
            if entry.reason is not None:
                counts[entry.reason] += 1
            elif dedup.duplicate(entry.digest):
                counts["duplicate"] += 1
            elif not entry.lang_ok:
                counts["wrong_language"] += 1
            elif dedup.near_duplicate(entry.digest, entry.signature):
                counts["near_duplicate"] += 1
            else:
                dedup.keep(entry.digest)
                yield entry

    def _say_nul(self, piece: Piece) -> None:
        if not self._nul_said and self.counts["nul_stripped"]:
            self._nul_said = True
            log.warning("source %s: NUL characters removed from documents (first in %s); "
                        "counted as nul_stripped in the data summary", self.source.name, piece.path)


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


class _IdKeys:
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


def _split_by_hash(
    entries: Iterator[Cleaned], config: DataConfig, counts: Counter, files: _Writers, candidates: FloorCandidates,
    keys: _IdKeys | None = None,
) -> None:
    """Held out = hash fraction (`split_digest`) below valid_fraction; with max_valid_docs the lowest
    hashes win. Each document sent to train is offered to `candidates` (the held-out floor's
    lowest keys) with its position in the train file.

    The cap keeps a heap of the held-out candidates with the lowest hashes (bounded by the cap);
    a candidate pushed out goes to train. Ties (documents sharing an id) are broken by the text
    digest, so the result depends only on the set of documents, not on their order.
    """
    train, valid = files.train, files.valid
    capped: list[tuple[float, bytes, bytes, int, Cleaned]] = []  # max-heap via negated fraction
    for number, entry in enumerate(entries):
        if config.split_by == "id" and not entry.has_id:
            counts[_FALLBACK] += 1
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


_WORKER: dict[str, Any] = {}
"""This process's share of the data section and its `DocumentFilter` (set by `init_worker`)."""


def init_worker(config: DataConfig) -> None:
    """Set up a worker (or this process, with one worker): the filters load their models once."""
    _WORKER.update(config=config, filter=DocumentFilter(config.cleaning))


def clean_piece(job: Job) -> Iterator[list[Cleaned] | float]:
    """Read and clean one piece: batches of `Cleaned` in reading order, then the CPU seconds spent."""
    started = time.process_time()
    config: DataConfig = _WORKER["config"]
    cleaner: DocumentFilter = _WORKER["filter"]
    source = config.sources[job.source]
    check_lang = source.role != "code" and source.lang != "code"
    counts: Counter = Counter()  # the reader's counters since the previous entry
    batch: list[Cleaned] = []
    batch_bytes = 0
    for raw in read_piece(source, job.piece, config.on_decode_error, counts, Bound(config.max_document_bytes)):
        text = raw.text
        if "\x00" in text:
            counts["nul_stripped"] += 1
            text = text.replace("\x00", "")
        moved = dict(counts) if counts else None
        counts.clear()
        text = cleaner.normalize(text)
        reason = cleaner.length_reason(text)
        if reason is not None:
            batch.append(Cleaned(reason, counts=moved))
            continue
        digest = text_hash(text)
        record = {"id": f"{source.name}-{digest.hex()[:16]}", "text": text, "lang": source.lang,
                  "source": source.name, "role": source.role}
        line = document_line(record)
        batch.append(Cleaned(None, digest, split_digest(digest, raw.id, config.split_by), bool(raw.id),
                             cleaner.language_ok(text, source.lang, check_lang), line,
                             len(text), cleaner.signature(text), moved))
        batch_bytes += len(line)
        if batch_bytes >= _BATCH_BYTES:
            yield batch
            batch, batch_bytes = [], 0
    if counts:
        batch.append(Cleaned("", counts=dict(counts)))
    if batch:
        yield batch
    yield time.process_time() - started


