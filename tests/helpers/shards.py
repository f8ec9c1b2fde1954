"""Token shards as the data stage writes them, for the stream's tests (tests/data, tests/train)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

BASE = 10_000_000  # source i's tokens are i * BASE + position: a window tells where it came from


def make_shards(root: Path, sizes: dict[str, int]) -> Path:
    """Fake encode_corpus output whose token values encode (source, position)."""
    for index, (name, size) in enumerate(sorted(sizes.items())):
        folder = root / name
        folder.mkdir(parents=True)
        (index * BASE + np.arange(size, dtype=np.uint32)).tofile(folder / "tokens.bin")
        meta = {"source": name, "dtype": "uint32", "num_tokens": size, "num_docs": 1, "eos_id": 0,
                "vocab_size": 2**32 - 1, "lang": "nb", "role": "target"}
        (folder / "meta.json").write_text(json.dumps(meta))
    return root


def gzip_members(data: bytes) -> int:
    """How many gzip members a file holds (the data stage writes one per compressed block)."""
    import zlib

    count = 0
    while data:
        member = zlib.decompressobj(31)
        member.decompress(data)
        data, count = member.unused_data, count + 1
    return count
