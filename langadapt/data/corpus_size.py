"""How big a corpus is, and how many tokens a BPE vocabulary trained on it can possibly have.

For the preflight check, before any stage runs: both must be cheap (file sizes, or one streaming
pass over a small corpus) and must never import a tokenizer library.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

GZIP_ISIZE_LIMIT = 1 << 32
"""gzip stores the uncompressed size modulo 2**32: beyond that the trailer says nothing."""


def uncompressed_bytes(path: Path) -> int | None:
    """Size of the text in `path`: the file size, or the gzip trailer's ISIZE; None when unknown
    (zstd, parquet, datasets, or a gzip file that may hold more than 4 GiB)."""
    if path.is_dir() or path.suffix.lower() in (".zst", ".zstd", ".parquet"):
        return None
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return size
        if size >= GZIP_ISIZE_LIMIT // 4:  # worst-case ratio of text: the trailer may have wrapped
            return None
        f.seek(-4, 2)
        return int(struct.unpack("<I", f.read(4))[0])


def bpe_vocab_ceiling(texts: Iterable[str], fixed_tokens: int) -> int:
    """An upper bound on the vocabulary BPE can learn from `texts`: above it, training yields fewer tokens.

    Every merge joins two symbols inside one pre-token, so a distinct pre-token of n bytes
    (n + 1 with its leading space) can contribute at most n merges; pre-tokenisers only split
    whitespace-separated words further, which lowers the count. Plus the base alphabet (every
    distinct character, for SentencePiece-style BPE) and the fixed tokens (specials, 256 bytes).
    """
    words: set[str] = set()
    for text in texts:
        words.update(text.split())
    chars = {c for word in words for c in word}
    return fixed_tokens + len(chars) + sum(len(word.encode("utf-8")) for word in words)

