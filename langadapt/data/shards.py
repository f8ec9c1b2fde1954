"""Pre-tokenisation: the data stage's documents -> memory-mappable token shards, one per source.

Layout, for every `data_dir/train/<source>.jsonl.gz` (and the held-out split under `valid/`):

    out_dir/<source>/tokens.bin       raw ids (uint16 when every id fits, else uint32), each
                                      document followed by EOS; open with np.memmap
    out_dir/<source>/doc_offsets.npy  int64 [num_docs + 1]: document i is tokens[o[i]:o[i+1]]
                                      (EOS included); the last entry is num_tokens
    out_dir/<source>/meta.json        dtype, num_tokens, num_docs, eos_id, vocab_size, lang, role,
                                      source, backend; written last, so its presence means complete
    out_dir/valid/<source>/...        the same for the held-out split

Memory stays bounded whatever the corpus size: documents are read in batches, at most two
batches per worker are in flight, and tokens and offsets are appended to disk as they arrive.
Workers are separate processes (tokenisers hold the GIL for part of the work) fed in order, so
the output is byte-identical for any number of workers.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from langadapt.data.documents import derived_mode, read_documents, split_files
from langadapt.data.encoders import EncoderSpec, TextEncoder, build_encoder, choose_encoder, load_tokenizer_info
from langadapt.data.workers import ordered_map, worker_pool
from langadapt.errors import LangadaptError

TOKENS, OFFSETS, META = "tokens.bin", "doc_offsets.npy", "meta.json"
"""A shard's files (see the module docstring); only this module spells them."""
VALID = "valid"
"""The held-out split's subfolder of a tokens folder (not a source)."""
BATCH_CHARS = 1 << 20
"""Characters of text per worker task: big enough to amortise pickling, small enough to bound memory."""
SAMPLE_CHARS = 200_000
"""Characters of corpus text used for the tiktoken equivalence check at start-up."""
SMALL_CORPUS_BYTES = 2 << 20
"""Compressed train size below which `num_workers=None` encodes in-process."""
_WORKER_ENCODE: Any = None


def shard_dtype(vocab_size: int, requested: str = "auto", where: str = "") -> np.dtype:
    """uint16 when every id fits (vocab <= 65,536), else uint32; an explicit uint16 is checked."""
    fits16 = vocab_size <= 1 << 16
    if requested == "uint16" and not fits16:
        raise LangadaptError(
            f"tokenizer vocab of {vocab_size} does not fit uint16 shards (max 65,536 ids){where}: "
            "use dtype uint32 or auto"
        )
    if requested not in ("auto", "uint16", "uint32"):
        raise LangadaptError(f"shard dtype must be auto, uint16 or uint32, got {requested!r}")
    return np.dtype(np.uint16 if (requested == "uint16" or (requested == "auto" and fits16)) else np.uint32)


def encode_corpus(
    tokenizer: Any,
    data_dir: Path,
    out_dir: Path,
    num_workers: int | None = None,
    dtype: Literal["auto", "uint16", "uint32"] = "auto",
    include_valid: bool = True,
) -> dict:
    """Tokenise every train (and held-out) file of the data stage into `out_dir`; returns a summary.

    `tokenizer` is a `PreTrainedTokenizerFast`, a tokenizer folder or a tokenizer.json path.
    `num_workers` None uses every core this process may run on.
    """
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    train_files = split_files(data_dir, "train")
    if not train_files:
        raise LangadaptError(f"encode: no train/*.jsonl.gz under {data_dir}: run the data stage first")
    names = ", ".join(f.name.removesuffix(".jsonl.gz") for f in train_files)
    info = load_tokenizer_info(tokenizer)
    np_dtype = shard_dtype(info.vocab_size, dtype, f" for sources {names} in {data_dir}")
    spec, why = choose_encoder(info.tokenizer_json, _sample(train_files))
    workers = num_workers or _default_workers(train_files)
    jobs = [("sources", f, out_dir / f.name.removesuffix(".jsonl.gz")) for f in train_files]
    if include_valid:
        jobs += [("valid", f, out_dir / VALID / f.name.removesuffix(".jsonl.gz"))
                 for f in split_files(data_dir, "valid")]
    summary: dict[str, Any] = {"backend": spec.backend, "backend_reason": why, "dtype": np_dtype.name,
                               "vocab_size": info.vocab_size, "eos_id": info.eos_id, "workers": workers,
                               "sources": {}, "valid": {}}
    start = time.perf_counter()
    with Encoder(spec, workers, np_dtype, info.eos_id) as encoder:
        for split, path, target in jobs:
            meta = write_shard(read_documents(path), path.name.removesuffix(".jsonl.gz"), target, encoder,
                               info.vocab_size, derived_mode([path]))
            summary[split][meta["source"]] = meta
    summary["seconds"] = time.perf_counter() - start
    summary["text_bytes"] = sum(m["text_bytes"] for m in summary["sources"].values())
    return summary


def _default_workers(files: list[Path]) -> int:
    """All cores, except for corpora too small to repay starting worker processes (~1 s each)."""
    if sum(f.stat().st_size for f in files) < SMALL_CORPUS_BYTES:
        return 1
    return len(os.sched_getaffinity(0))


def _sample(files: list[Path]) -> list[str]:
    """The first SAMPLE_CHARS of text, spread over every source (each may be another language).

    A document is cut to what its source's share has left: the sample is encoded by both
    encoders, and `tokenizers` holds ~150 bytes per input byte while it encodes (offsets,
    alignments, token strings), so one 50 MB one-line document taken whole cost 7.2 GB of peak
    memory in the tokenizer stage (issue 38) for a check that 200,000 characters settle. A cut
    text is still text both encoders must agree on."""
    sample: list[str] = []
    per_file = SAMPLE_CHARS // len(files) + 1
    for path in files:
        chars = 0
        for doc in read_documents(path):
            text = doc["text"][: per_file - chars]
            sample.append(text)
            chars += len(text)
            if chars >= per_file:
                break
    return sample


def _init_worker(spec: EncoderSpec) -> None:
    global _WORKER_ENCODE
    _WORKER_ENCODE = build_encoder(spec)


def _encode_batch(texts: list[str], eos_id: int, dtype: str, encode: TextEncoder | None = None,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of a batch with EOS after each document, and each document's length."""
    arrays = (encode or _WORKER_ENCODE).arrays(texts)
    eos = np.array([eos_id], dtype=np.uint32)
    lengths = np.fromiter((ids.size + 1 for ids in arrays), dtype=np.int64, count=len(arrays))
    # shard_dtype chose a dtype that holds every id, so narrowing to it loses nothing
    flat = np.concatenate([part for ids in arrays for part in (ids, eos)], dtype=dtype, casting="same_kind")
    return flat, lengths


def _batches(documents: Iterable[dict]) -> Iterator[tuple[list[str], dict]]:
    """Batches of about BATCH_CHARS characters, with the first document's metadata."""
    texts: list[str] = []
    chars = 0
    first: dict = {}
    for doc in documents:
        first = first or doc
        texts.append(doc["text"])
        chars += len(doc["text"])
        if chars >= BATCH_CHARS:
            yield texts, first
            texts, chars = [], 0
    if texts:
        yield texts, first


class Encoder:
    """Encodes batches in input order, in-process or on worker processes (`workers.ordered_map`: at
    most 2 batches per worker in flight, a worker that dies is one error)."""

    def __init__(self, spec: EncoderSpec, workers: int, dtype: np.dtype, eos_id: int) -> None:
        self.spec, self.workers, self.dtype, self.eos_id = spec, workers, dtype, eos_id
        self.local: Any = None
        self.pool: Any = None

    def __enter__(self) -> Encoder:
        if self.workers > 1:
            self.pool = worker_pool(self.workers, _init_worker, (self.spec,))
        else:
            self.local = build_encoder(self.spec)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=exc[0] is not None)

    def encode(self, batches: Iterator[tuple[list[str], dict]]) -> Iterator[tuple[np.ndarray, np.ndarray, int, dict]]:
        """(token ids, document lengths, UTF-8 bytes, first document) per batch, in order."""
        if self.pool is None:
            for texts, first in batches:
                yield (*_encode_batch(texts, self.eos_id, self.dtype.name, self.local), _utf8_bytes(texts), first)
            return
        jobs = ((texts, first, self.eos_id, self.dtype.name) for texts, first in batches)
        for (texts, first, *_), (flat, lengths) in ordered_map(
                _encode_job, jobs, self.pool, self.workers, lambda job: f"encoding source {job[1].get('source', '?')}"):
            yield flat, lengths, _utf8_bytes(texts), first


def _encode_job(job: tuple[list[str], dict, int, str]) -> tuple[np.ndarray, np.ndarray]:
    texts, _, eos_id, dtype = job
    return _encode_batch(texts, eos_id, dtype)


def _utf8_bytes(texts: list[str]) -> int:
    return sum(len(t.encode("utf-8")) for t in texts)


def write_shard(documents: Iterable[dict], source: str, target: Path, encoder: Encoder, vocab_size: int,
                mode: int | None = None) -> dict:
    """Stream one source's documents into tokens.bin + doc_offsets.npy, then meta.json (the marker).

    `documents` are dicts with `text` (and optionally `lang`, `role`): a data-stage file, or texts
    from Python (`langadapt.data.texts`). `mode`: the permission bits of the token files (no wider
    than the file the documents came from: `documents.derived_mode`)."""
    target.mkdir(parents=True, exist_ok=True)
    (target / META).unlink(missing_ok=True)
    tokens_tmp, offsets_tmp = target / f"{TOKENS}.tmp", target / "doc_offsets.raw.tmp"
    num_tokens, num_docs, text_bytes, first = 0, 0, 0, {}
    with open(tokens_tmp, "wb") as tokens_file, open(offsets_tmp, "wb") as offsets_file:
        np.zeros(1, dtype=np.int64).tofile(offsets_file)
        for flat, lengths, nbytes, doc in encoder.encode(_batches(documents)):
            first = first or doc
            flat.tofile(tokens_file)
            (num_tokens + np.cumsum(lengths)).tofile(offsets_file)
            num_tokens += int(flat.size)
            num_docs += int(lengths.size)
            text_bytes += nbytes
    _raw_to_npy(offsets_tmp, target / OFFSETS, num_docs + 1)
    if mode is not None:
        os.chmod(tokens_tmp, mode)
        os.chmod(target / OFFSETS, mode)
    tokens_tmp.replace(target / TOKENS)
    meta = {"source": source, "lang": first.get("lang"), "role": first.get("role"),
            "dtype": encoder.dtype.name, "num_tokens": num_tokens, "num_docs": num_docs,
            "eos_id": encoder.eos_id, "vocab_size": vocab_size, "backend": encoder.spec.backend,
            "text_bytes": text_bytes}
    (target / META).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


@dataclass(frozen=True)
class Shard:
    """One source's complete token shard, as `write_shard` left it (the one reader of the format)."""

    folder: Path
    meta: dict[str, Any]
    """dtype, num_tokens, num_docs, eos_id, vocab_size, lang, role, source, backend, text_bytes."""

    @property
    def num_tokens(self) -> int:
        return int(self.meta["num_tokens"])

    def tokens(self) -> np.memmap:
        """Every token id of the source, read-only, paged in on demand (a shard can outgrow memory)."""
        dtype = np.dtype(self.meta["dtype"])
        return np.memmap(self.folder / TOKENS, dtype=dtype, mode="r", shape=(self.num_tokens,))

    def doc_offsets(self) -> np.ndarray:
        """int64 [num_docs + 1]: document i is tokens[o[i]:o[i+1]], its EOS included."""
        return np.load(self.folder / OFFSETS, mmap_mode="r")


def read_shard(folder: Path) -> Shard:
    """The shard in `folder`; one clear error when it is not complete (meta.json is written last)."""
    try:
        meta = json.loads((Path(folder) / META).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LangadaptError(f"{folder}: no complete token shard ({META} missing)") from None
    except (OSError, ValueError) as exc:
        raise LangadaptError(f"{Path(folder) / META}: unreadable ({exc})") from None
    return Shard(Path(folder), meta)


def read_shards(tokens_dir: Path) -> dict[str, Shard]:
    """source -> shard of every complete shard in `tokens_dir` (a tokens folder, or its `valid/`),
    by name; the held-out split's subfolder is not a source."""
    return {meta.parent.name: read_shard(meta.parent) for meta in sorted(Path(tokens_dir).glob(f"*/{META}"))
            if meta.parent.name != VALID}


def _raw_to_npy(raw: Path, out: Path, count: int, chunk: int = 1 << 20) -> None:
    """Wrap a raw int64 file into .npy in chunks (the document count was unknown up front)."""
    array = np.lib.format.open_memmap(out.with_name(out.name + ".tmp"), mode="w+", dtype=np.int64, shape=(count,))
    source = np.memmap(raw, dtype=np.int64, mode="r", shape=(count,))
    for start in range(0, count, chunk):
        array[start : start + chunk] = source[start : start + chunk]
    array.flush()
    del array, source
    out.with_name(out.name + ".tmp").replace(out)
    raw.unlink()
