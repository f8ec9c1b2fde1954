"""Document cleaning: normalise, filter by length, deduplicate, and optionally check the language.

Split in two so that the data stage can clean on every core and still give the result of one
process reading front to back:

- `DocumentFilter` is stateless: normalisation, the length filters, the language check and the
  MinHash signature depend on one document only, so workers run them on their pieces.
- `Deduplicator` is the state: which texts (exact digests, MinHash bands) were kept before. It runs
  in the data stage's parent, over the workers' results taken back in input order, so "the first
  copy wins" means the same document for any number of workers.

Each drop has a reason, counted in the data summary; a document that fails several filters counts
under the first in this order: empty/too_short, too_long, duplicate, wrong_language, near_duplicate.

Language ID uses `py3langid` (langid.py's model shipped inside the package, 97 languages including
nb, nn, se, fo, is; no download at run time). It labels Bokmål mostly as `no`, hence the aliases.
Near-duplicates use `datasketch` MinHash LSH. Both are optional imports: only the recipes that
switch these filters on need them installed.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
import unicodedata
from pathlib import Path
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.recipe.data import CleaningConfig

log = logging.getLogger("langadapt.data")

_BUILTIN_ALIASES = {"nb": {"no"}, "nn": {"no"}, "no": {"nb", "nn"}}
_WORD = re.compile(r"\w+", re.UNICODE)
_SHINGLE = 5
DIGESTS_IN_MEMORY = 2_000_000
"""Exact-dedup digests held in a Python set (measured 93 MB per million: a 16-byte `bytes` and its
set slot) before the store moves to an SQLite file beside the stage's output: memory stops growing at
about 180 MB whatever the corpus; a lookup then costs a B-tree probe instead of a hash."""
NEAR_DEDUP_MAX_DOCUMENTS = 2_000_000
"""Documents the in-memory MinHash LSH may hold (measured 3.9 KB each at 128 permutations and
threshold 0.85: about 8 GB at the limit).
Past it the stage stops and says so: near-dedup of a corpus that size belongs to a multi-stage
MinHash that keeps its signatures on disk (datatrove's, as FineWeb ran it)."""


def text_hash(text: str) -> bytes:
    """A stable 16-byte digest of a document (exact dedup, held-out split, document ids)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def hash_fraction(digest: bytes) -> float:
    """Map a digest uniformly onto [0, 1): the held-out split compares it with valid_fraction."""
    return int.from_bytes(digest[:8], "big") / 2**64


class DocumentFilter:
    """The filters that look at one document alone (run in the data stage's workers)."""

    def __init__(self, config: CleaningConfig) -> None:
        self.config = config
        self._langid: Any = None
        if config.near_dedup:
            _import("datasketch", "cleaning.near_dedup")
        if config.lang_filter:
            self._langid = _import("py3langid", "cleaning.lang_filter")

    def normalize(self, text: str) -> str:
        """NFC and strip, as configured; applied before any comparison so duplicates match."""
        if self.config.normalize_nfc:
            text = unicodedata.normalize("NFC", text)
        return text.strip() if self.config.strip else text

    def length_reason(self, text: str) -> str | None:
        """Why `text` (normalised) is too short or too long, or None."""
        cfg = self.config
        if len(text) < max(cfg.min_chars, 1):
            return "too_short" if text else "empty"
        if cfg.max_chars is not None and len(text) > cfg.max_chars:
            return "too_long"
        return None

    def language_ok(self, text: str, lang: str, check_lang: bool) -> bool:
        """False only when the language filter is on, the text long enough to decide, and the
        detected language is not `lang` (or an accepted alias)."""
        cfg = self.config
        if not check_lang or self._langid is None or len(text) < cfg.lang_filter_min_chars:
            return True
        accepted = {lang} | _BUILTIN_ALIASES.get(lang, set()) | set(cfg.lang_aliases.get(lang, []))
        return self._langid.classify(text)[0] in accepted

    def signature(self, text: str) -> bytes | None:
        """The MinHash signature of the text's word 5-grams (None with near-dedup off): the costly
        part of near-dedup, computed where the document is, so only 8 bytes per permutation travel."""
        if not self.config.near_dedup:
            return None
        import datasketch

        words = _WORD.findall(text.lower())
        shingles = {" ".join(words[i : i + _SHINGLE]) for i in range(max(1, len(words) - _SHINGLE + 1))}
        minhash = datasketch.MinHash(num_perm=self.config.near_dedup_num_perm, seed=1)
        minhash.update_batch([s.encode("utf-8") for s in shingles])
        return minhash.hashvalues.tobytes()


class Deduplicator:
    """What was kept before: exact digests (`DigestSet`) and MinHash LSH bands, across all sources."""

    def __init__(self, config: CleaningConfig, spill_dir: Path) -> None:
        self.config = config
        self.digests = DigestSet(spill_dir / ".dedup.sqlite") if config.exact_dedup else None
        self._lsh: Any = None
        self._template: Any = None
        self._near_count = 0
        if config.near_dedup:
            datasketch = _import("datasketch", "cleaning.near_dedup")
            self._lsh = datasketch.MinHashLSH(threshold=config.near_dedup_threshold, num_perm=config.near_dedup_num_perm)
            # The workers' MinHash, rebuilt from its values: same seed, permutations and scheme.
            self._template = datasketch.MinHash(num_perm=config.near_dedup_num_perm, seed=1)

    def duplicate(self, digest: bytes) -> bool:
        """Whether an identical text was kept before."""
        return self.digests is not None and digest in self.digests

    def near_duplicate(self, digest: bytes, signature: bytes | None) -> bool:
        """Whether a kept document is estimated this similar; otherwise remembers this one."""
        if self._lsh is None or signature is None:
            return False
        import numpy as np

        minhash = self._template.copy()
        minhash.hashvalues = np.frombuffer(signature, dtype=minhash.hashvalues.dtype).copy()
        if self._lsh.query(minhash):
            return True
        if self._near_count >= NEAR_DEDUP_MAX_DOCUMENTS:
            raise LangadaptError(
                f"cleaning.near_dedup: more than {NEAR_DEDUP_MAX_DOCUMENTS:,} documents, the most the in-memory "
                "MinHash index holds (3.9 KB each, ~8 GB); run near-dedup of a corpus this size as a multi-stage "
                "MinHash with signatures on disk (datatrove), or set cleaning.near_dedup: false")
        self._lsh.insert(digest.hex(), minhash)
        self._near_count += 1
        return False

    def keep(self, digest: bytes) -> None:
        """Remember a kept document's text for exact dedup."""
        if self.digests is not None:
            self.digests.add(digest)

    def close(self) -> None:
        if self.digests is not None:
            self.digests.close()


class DigestSet:
    """A set of 16-byte digests: a Python set up to `limit`, then an SQLite table on disk.

    Exact dedup must remember every kept document; at hundreds of millions of documents a set does
    not fit a node's memory, and a partitioned on-disk store is what SQLite's B-tree already is."""

    def __init__(self, path: Path, limit: int = DIGESTS_IN_MEMORY) -> None:
        self.path, self.limit = path, limit
        self._memory: set[bytes] = set()
        self._db: sqlite3.Connection | None = None

    def __len__(self) -> int:
        if self._db is None:
            return len(self._memory)
        return self._db.execute("SELECT count(*) FROM d").fetchone()[0]

    def __contains__(self, digest: bytes) -> bool:
        if digest in self._memory:
            return True
        return self._db is not None and self._db.execute("SELECT 1 FROM d WHERE k = ?", (digest,)).fetchone() is not None

    def add(self, digest: bytes) -> None:
        if self._db is None:
            self._memory.add(digest)
            if len(self._memory) >= self.limit:
                self._spill()
        else:
            self._db.execute("INSERT OR IGNORE INTO d VALUES (?)", (digest,))

    def _spill(self) -> None:
        log.info("data: %s exact-dedup digests in memory; moving them to %s (memory stays flat from here)",
                 f"{len(self._memory):,}", self.path)
        self.path.unlink(missing_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;"
                               "CREATE TABLE d (k BLOB PRIMARY KEY) WITHOUT ROWID; BEGIN;")
        self._db.executemany("INSERT OR IGNORE INTO d VALUES (?)", ((d,) for d in sorted(self._memory)))
        self._memory = set()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self.path.unlink(missing_ok=True)


def _import(module: str, flag: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise LangadaptError(f"{flag} needs the {module} package: pip install {module}") from None
