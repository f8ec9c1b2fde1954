"""The data stage's work, whatever runs it: pieces cleaned in any order, merged in piece order.

Parallel by design, with the output of one process: the sources are cut into pieces (`plan_jobs`,
`pieces`: files, line spans of a big file, Parquet row groups, dataset shards), workers read and
clean pieces (`clean_piece`: decoding, NFC, length and language filters, digests, MinHash
signatures, the JSON line), and one process takes their results back in piece order
(`merge.merge`) and does what depends on earlier documents: exact and near dedup
(`cleaning.Deduplicator`), the held-out split with its cap and floor (`held_out_split`,
`held_out_floor`), and writing. The pieces and their order do not depend on the number of
workers, so 1 and N workers write the same bytes (tests/data/test_data_parallel.py). Two engines
run it: local worker processes (`stage.run`, `workers.ordered_batches`) and datatrove tasks
(`datatrove_engine`).

This module is the workers' side and what both sides share: the plan (`Job`), a worker's answer
(`Cleaned`), how many workers, and what a worker does with one piece; `merge` is the writing
process's side. Memory does not grow with the corpus: pieces stream in bounded batches; what does
grow, the dedup digests, moves to disk past `cleaning.DIGESTS_IN_MEMORY`.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from langadapt.data.cleaning import DocumentFilter, text_hash
from langadapt.data.documents import document_line
from langadapt.data.pieces import PIECE_BYTES, Piece, plan_pieces
from langadapt.data.source_paths import resolve_paths
from langadapt.data.sources import format_of, read_piece
from langadapt.inputs.text import Bound
from langadapt.recipe.data import DataConfig

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


def worker_count(requested: int | None, input_bytes: int) -> int:
    """`data.num_workers`, or every core this process may run on (one below `IN_PROCESS_BYTES`)."""
    if requested is not None:
        return requested
    if input_bytes < IN_PROCESS_BYTES:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def split_digest(text_digest: bytes, doc_id: str | None, split_by: str) -> bytes:
    """The digest whose `hash_fraction` decides a document's side of the held-out split.

    By `id`: the hash of the id's last path component, the part a page shares with its translations
    (`.../html/nb-NO/intro.html` and `.../html/en-US/intro.html` both give `intro.html`), so every
    language holds out the same pages. By `text`, or for a document without an id: its text digest."""
    if split_by == "id" and doc_id:
        return text_hash(PurePosixPath(doc_id).name)
    return text_digest


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
