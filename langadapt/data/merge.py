"""What depends on earlier documents, in one process: dedup, the held-out split and writing, in piece order.

The writing process's side of the data stage (`preparation` is the workers'): it takes the
cleaned pieces back in job order, from worker processes or from the files datatrove's tasks wrote,
so every engine and any number of workers write the same bytes. Exact and near dedup
(`cleaning.Deduplicator`) keep the first copy read; the split (`held_out_split`) and the held-out
floor (`held_out_floor`) decide each kept document's side; each source's train and held-out files
are written, compressed on threads beside the deciding thread (`compress_threads`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langadapt.data.cleaning import Deduplicator
from langadapt.data.documents import DocumentFile, derived_mode
from langadapt.data.held_out_floor import FloorCandidates, move_to_valid, shortfall_warning
from langadapt.data.held_out_split import TEXT_FALLBACK, IdKeys, split_by_hash
from langadapt.data.pieces import Piece
from langadapt.data.preparation import Cleaned, Job
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, SourceConfig
from langadapt.run.context import StageContext
from langadapt.run.layout import DataPaths

log = logging.getLogger("langadapt")


def write_stats(summary: dict[str, Any], input_bytes: int, ctx: StageContext) -> None:
    """stats.json, the data folder's summary: one writer for every engine, so their folders are the same bytes."""
    summary["input_bytes"] = input_bytes
    ctx.layout.data.stats.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")


def merge(config: DataConfig, jobs: list[Job], stream: Iterator[tuple[int, Any]], ctx: StageContext,
          workers: int = 1) -> tuple[dict[str, Any], float]:
    """Everything that depends on earlier documents, over `preparation.clean_piece`'s batches in job order
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
            keys = IdKeys() if config.split_by == "id" else None
            split_by_hash(kept.filter(feed, index, "split"), config, counts, files.train, files.valid,
                          candidates, keys)
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
    fallback = ({TEXT_FALLBACK: counts.pop(TEXT_FALLBACK, 0)}
                if config.split_by == "id" and source.valid_path is None else {})
    if fallback.get(TEXT_FALLBACK):
        log.warning("source %s: %d of its %d kept documents have no %r field, so data.split_by: id split them by "
                    "their text (their translations may fall on the other side)", source.name, fallback[TEXT_FALLBACK],
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
