"""The document format every stage after `data` reads.

The data stage writes one gzip-compressed JSONL file per source and split:
`runs/<name>/data/{train,valid}/<source>.jsonl.gz`, one object per line with the keys
`id`, `text`, `lang`, `source`, `role`. Later stages (tokenizer, embeddings, evaluation) read
them only through these functions, so the format can change in one place.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import orjson
from isal import isal_zlib

from langadapt.errors import LangadaptError
from langadapt.inputs.text import WRITTEN_LINE_BYTES, Bound, iter_lines

SPLITS = ("train", "valid")
GZIP_LEVEL = 1
"""ISA-L's deflate level of the data stage's files (0-3; see `DocumentFile`)."""
BLOCK_BYTES = 4 << 20
"""Bytes of JSON lines per gzip member: large enough that a member's header and the restarted
dictionary cost nothing measurable (< 0.1%), small enough to keep `threads` of them in flight."""
_WRITTEN = Bound(WRITTEN_LINE_BYTES, setting=None)
"""The data stage wrote no line longer than this (each document passed the recipe's bound)."""


def write_documents(path: Path, documents: Iterable[dict], mode: int | None = None) -> int:
    """Write documents to a .jsonl.gz file atomically; returns how many were written. A file
    rewritten in place keeps its permission bits unless `mode` says otherwise."""
    if mode is None and path.exists():
        mode = path.stat().st_mode & 0o777
    with DocumentFile(path, mode=mode) as out:
        for doc in documents:
            out.write(document_line(doc), len(doc["text"]))
    return out.count


def derived_mode(sources: Iterable[Path]) -> int:
    """Permission bits for a file derived from `sources`: what a new file gets (the umask's), with no
    bit that some source lacks. A corpus only its owner may read must not come out world-readable in
    a training shard (a link to a private file is read through its target's mode)."""
    umask = os.umask(0)
    os.umask(umask)
    mode = 0o666 & ~umask
    for source in sources:
        try:
            mode &= os.stat(source).st_mode & 0o777
        except OSError:
            continue  # not a local file (a Hub id): nothing to narrow by
    return mode


def document_line(doc: dict) -> bytes:
    """One document as its line of a data-stage file, UTF-8 encoded (keys in the order given).

    The text is `json.dumps(doc, ensure_ascii=False)`'s, the format of every earlier run (", " and
    ": " between items), but made by orjson one key and string value at a time: json's encoder and the
    encode to UTF-8 after it cost 13.5 CPU s per GB of text, this 1.7 (benchmarks/README.md
    data_scale). orjson escapes every code point as json does (`tests/data/test_parallel_writing.py`
    checks all of them); other value types, and a string orjson refuses (one holding a lone
    surrogate), go through json."""
    items = [_json_value(key) + b": " + _json_value(value) for key, value in doc.items()]
    return b"{" + b", ".join(items) + b"}\n"


def _json_value(value: object) -> bytes:
    if type(value) is str:
        try:
            return orjson.dumps(value)
        except TypeError:
            pass  # a lone surrogate: json's spelling, and its encoding error, as before
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


class DocumentFile:
    """A data-stage .jsonl.gz being written: lines in, complete gzip members of `BLOCK_BYTES` out.

    Why members and not one gzip stream: a block compresses on its own, so `threads` blocks compress
    at once on threads beside the one that writes lines (the compressor releases the GIL), and compressing is
    not the writing process's serial work: with cleaning workers on every core, that process's one
    thread is the stage's bottleneck (compressing was 14 of its ~19 CPU-s per GB). `threads=0`
    compresses on the writing thread (one core: nothing beside it to overlap with). Any gzip reader
    reads concatenated members as one stream. ISA-L's deflate (python-isal, the compressor of
    xopen/cutadapt) at level 1, not zlib's: the files are an intermediate read a few times by the next
    stages; zlib level 9 cost 92 CPU-s per GB of text for files 19% smaller than zlib level 1's, zlib
    level 1 16 CPU-s per GB, ISA-L level 1 4 for files 3% smaller than zlib level 1's. The bytes depend
    only on the lines written (blocks are cut by size in bytes, headers carry no time), so the file is
    the same for any number of threads or cleaning workers. Written to `<name>.tmp` and renamed by `close()`; after `abort()` (or an
    exception inside `with`) nothing is left. `mode`: its permission bits (`derived_mode` of what it
    is made from)."""

    def __init__(self, path: Path, threads: int = 0, mode: int | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._mode = mode
        self.path, self._tmp = path, path.with_name(path.name + ".tmp")
        self._file = open(self._tmp, "wb")  # noqa: SIM115 - closed by close()/abort()
        self._pool = ThreadPoolExecutor(threads) if threads > 0 else None
        self._pending: deque[Future[bytes]] = deque()
        self._threads = max(1, threads)
        self._buffer: list[bytes] = []
        self._buffered = 0
        self.count = 0
        self.chars = 0

    def __enter__(self) -> DocumentFile:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        self.abort() if kind is not None else self.close()

    def write(self, line: bytes, chars: int) -> None:
        """Append one document line (`document_line`, made by whoever cleaned the document: a worker,
        not the writing process); `chars` is its text's length in characters, for the summary."""
        self._buffer.append(line)
        self._buffered += len(line)
        self.count += 1
        self.chars += chars
        if self._buffered >= BLOCK_BYTES:
            self._flush_block()

    def _flush_block(self) -> None:
        data = b"".join(self._buffer)
        self._buffer, self._buffered = [], 0
        if self._pool is None:
            self._file.write(_gzip_member(data))
            return
        self._pending.append(self._pool.submit(_gzip_member, data))
        while len(self._pending) > 2 * self._threads:  # bounded: at most a few blocks in memory
            self._file.write(self._pending.popleft().result())

    def close(self) -> None:
        """Finish the file and move it into place."""
        if self._buffer or self.count == 0:
            self._flush_block()
        while self._pending:
            self._file.write(self._pending.popleft().result())
        self._shutdown()
        if self._mode is not None:
            os.chmod(self._tmp, self._mode)
        self._tmp.replace(self.path)

    def abort(self) -> None:
        """Leave nothing behind."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._shutdown()
        self._tmp.unlink(missing_ok=True)

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._file.close()


def _gzip_member(data: bytes) -> bytes:
    """`data` as one complete gzip member (no name, no time: no run-dependent bytes). ISA-L releases
    the GIL, so members compress on threads in parallel."""
    return isal_zlib.compress(data, GZIP_LEVEL, wbits=31)


def read_documents(path: Path) -> Iterator[dict]:
    """Yield the documents of one data-stage file, through the bounded reader (`bounded`): a run
    folder's file that was cut short (a full disk, a copy interrupted) is one error naming it, not
    a tokenizer trained on part of the corpus."""
    for line in iter_lines(path, "data stage file", _WRITTEN):
        try:
            yield orjson.loads(line.raw)  # a third less CPU than json's; the same objects
        except orjson.JSONDecodeError:
            yield _json_document(line.raw, path, line.number)


def _json_document(raw: bytes, path: Path, number: int) -> dict:
    """A line orjson refused, through json: its escaped lone surrogates are valid JSON to json
    (`document_line` wrote them), and for a broken line json's message names the problem."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise LangadaptError(f"data stage file {path}: line {number} is not a document ({err.msg}): "
                             "the file was changed after the data stage wrote it; run again with --from data") from None


def split_files(data_dir: Path, split: str) -> list[Path]:
    """The per-source files of one split, sorted by source name."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return sorted((data_dir / split).glob("*.jsonl.gz"))


def iter_split(
    data_dir: Path, split: str, langs: set[str] | None = None, roles: set[str] | None = None
) -> Iterator[dict]:
    """Yield the documents of a split, optionally only some languages and roles."""
    for path in split_files(data_dir, split):
        for doc in read_documents(path):
            if (langs is None or doc["lang"] in langs) and (roles is None or doc["role"] in roles):
                yield doc


def texts_by_lang(data_dir: Path, split: str) -> dict[str, list[str]]:
    """All texts of a split grouped by language (held-out evaluation, tokenizer metrics)."""
    grouped: dict[str, list[str]] = {}
    for doc in iter_split(data_dir, split):
        grouped.setdefault(doc["lang"], []).append(doc["text"])
    return grouped
