"""The document format every stage after `data` reads.

The data stage writes one gzip-compressed JSONL file per source and split:
`runs/<name>/data/{train,valid}/<source>.jsonl.gz`, one object per line with the keys
`id`, `text`, `lang`, `source`, `role`. Later stages (tokenizer, embeddings, evaluation) read
them only through these functions, so the format can change in one place.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

from langadapt.data.bounded import WRITTEN_LINE_BYTES, Bound, iter_lines
from langadapt.errors import LangadaptError

SPLITS = ("train", "valid")
_WRITTEN = Bound(WRITTEN_LINE_BYTES, setting=None)
"""The data stage wrote no line longer than this (each document passed the recipe's bound)."""


def write_documents(path: Path, documents: Iterator[dict]) -> int:
    """Write documents to a .jsonl.gz file atomically; returns how many were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        for doc in documents:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
            count += 1
    tmp.replace(path)
    return count


def read_documents(path: Path) -> Iterator[dict]:
    """Yield the documents of one data-stage file, through the bounded reader (`bounded`): a run
    folder's file that was cut short (a full disk, a copy interrupted) is one error naming it, not
    a tokenizer trained on part of the corpus."""
    for line in iter_lines(path, "data stage file", _WRITTEN):
        try:
            yield json.loads(line.raw)
        except json.JSONDecodeError as err:
            raise LangadaptError(f"data stage file {path}: line {line.number} is not a document ({err.msg}): "
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
