"""Texts from Python into the packed, resumable training stream: the library's way in.

The pipeline reaches the stream through the data stage's files (`shards.encode_corpus`); a
fine-tuning project has texts in memory or a Hugging Face dataset instead. This module writes
them with the same shard writer (same layout, same encoders, same tiktoken check), so
`build_stream`, `fit` and the HF adapter (`torch_dataset`) see no difference:

    from langadapt import stream_from_texts
    stream = stream_from_texts({"nb": nb_texts, "en": replay}, tokenizer, "tokens/", seq_len=512,
                               total_samples=10_000, mixture={"nb": {"epochs": 4}, "en": {"weight": 0.2}})

A source may be a list or any iterable of strings, a `datasets.Dataset` or a streaming
`datasets.IterableDataset` (rows read once, in order, never held in memory all at once).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from langadapt.data.encoders import choose_encoder, load_tokenizer_info
from langadapt.data.shards import SAMPLE_CHARS, Encoder, shard_dtype, write_shard
from langadapt.data.stream import PackedStream, build_stream
from langadapt.errors import LangadaptError

TextSource = Iterable[str] | Iterable[Mapping[str, Any]]
"""Strings, or rows with a text column (what iterating a `datasets` dataset yields)."""

DEFAULT_SOURCE = "texts"
"""Source name of a single, unnamed collection of texts."""


def encode_texts(
    sources: TextSource | Mapping[str, TextSource],
    tokenizer: Any,
    out_dir: Path | str,
    *,
    text_column: str = "text",
    lang: str | None = None,
    num_workers: int = 1,
    dtype: Literal["auto", "uint16", "uint32"] = "auto",
) -> dict[str, dict]:
    """Tokenise texts into `out_dir/<source>/` shards (the layout `build_stream` reads); returns
    each source's meta.json.

    `sources` is one collection (written as source "texts") or a mapping source name ->
    collection. `tokenizer` is a `PreTrainedTokenizerFast`, a tokenizer folder or a tokenizer.json.
    `num_workers` > 1 encodes on that many processes (worth it above a few MB of text).
    """
    named = _named_sources(sources)
    info = load_tokenizer_info(tokenizer)
    np_dtype = shard_dtype(info.vocab_size, dtype, f" for sources {', '.join(named)}")
    peeked = {name: _peek(_documents(name, texts, text_column, lang)) for name, texts in named.items()}
    empty = [name for name, (head, _) in peeked.items() if not head]
    if empty:  # checked before anything is written: no shard of an empty source is left behind
        raise LangadaptError(f"encode_texts: no texts in source {', '.join(empty)}")
    spec, _ = choose_encoder(info.tokenizer_json, [doc["text"] for head, _ in peeked.values() for doc in head])
    out_dir = Path(out_dir)
    metas = {}
    with Encoder(spec, num_workers, np_dtype, info.eos_id) as encoder:
        for name, (head, rest) in peeked.items():
            metas[name] = write_shard(itertools.chain(head, rest), name, out_dir / name, encoder, info.vocab_size)
    return metas


def stream_from_texts(
    sources: TextSource | Mapping[str, TextSource],
    tokenizer: Any,
    out_dir: Path | str,
    *,
    seq_len: int,
    total_samples: int,
    seed: int = 0,
    mixture: dict[str, dict] | None = None,
    text_column: str = "text",
    lang: str | None = None,
    num_workers: int = 1,
    document_masking: bool = False,
) -> PackedStream:
    """`encode_texts`, then `build_stream` over what it wrote: the stream `fit` trains on.

    `mixture` as in `build_stream` (None: natural proportions); `document_masking` as the recipe's
    `data.document_masking` (position ids restart after every EOS). The shards stay in `out_dir`:
    a later `build_stream(out_dir, ...)` reopens them without tokenising again, and the stream's
    `state_dict()` / `load_state_dict()` resume it exactly.
    """
    names = encode_texts(sources, tokenizer, out_dir, text_column=text_column, lang=lang, num_workers=num_workers)
    mixture = mixture if mixture is not None else {name: {} for name in names}
    return build_stream(Path(out_dir), mixture, seq_len, total_samples, seed, document_masking=document_masking)


def _named_sources(sources: TextSource | Mapping[str, TextSource]) -> dict[str, TextSource]:
    if isinstance(sources, str):
        raise LangadaptError("encode_texts: got one string; pass a list of texts (or a dataset)")
    if type(sources).__name__ in ("DatasetDict", "IterableDatasetDict"):  # a Mapping, but of splits
        raise LangadaptError(f"encode_texts: got a {type(sources).__name__}; pass one split, e.g. dataset['train']")
    if not isinstance(sources, Mapping):
        return {DEFAULT_SOURCE: sources}
    if not sources:
        raise LangadaptError("encode_texts: no sources given")
    for name in sources:
        if not isinstance(name, str) or not name or "/" in name or name == "valid":
            raise LangadaptError(f"encode_texts: invalid source name {name!r} (a folder name, not 'valid')")
    return dict(sources)


def _documents(source: str, texts: TextSource, text_column: str, lang: str | None) -> Iterator[dict]:
    """Documents in the shard writer's format; empty texts are dropped (they would be bare EOS)."""
    for index, item in enumerate(texts):
        if isinstance(item, Mapping):
            if text_column not in item:
                raise LangadaptError(
                    f"encode_texts: source {source} row {index} has no column {text_column!r} "
                    f"(columns: {', '.join(map(str, item))}); pass text_column="
                )
            item = item[text_column]
        if not isinstance(item, str):
            raise LangadaptError(f"encode_texts: source {source} item {index} is {type(item).__name__}, not str")
        if item:
            yield {"text": item, "lang": lang, "role": "target", "source": source}


def _peek(documents: Iterator[dict]) -> tuple[list[dict], Iterator[dict]]:
    """The first SAMPLE_CHARS of a source (for the encoder check) and the rest, read once."""
    head, chars = [], 0
    for doc in documents:
        head.append(doc)
        chars += len(doc["text"])
        if chars >= SAMPLE_CHARS:
            break
    return head, documents
