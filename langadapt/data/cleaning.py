"""Document cleaning: normalise, filter by length, deduplicate, and optionally check the language.

Each filter returns the reason it dropped a document, so the stage can report what was removed
and why. Order matters for cost: cheap filters run first, MinHash (the most expensive) last and
only on documents that survived everything else.

Language ID uses `py3langid` (langid.py's model shipped inside the package, 97 languages including
nb, nn, se, fo, is; no download at run time). It labels Bokmål mostly as `no`, hence the aliases.
Near-duplicates use `datasketch` MinHash LSH. Both are optional imports: only the recipes that
switch these filters on need them installed.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.recipe.data import CleaningConfig

_BUILTIN_ALIASES = {"nb": {"no"}, "nn": {"no"}, "no": {"nb", "nn"}}
_WORD = re.compile(r"\w+", re.UNICODE)
_SHINGLE = 5


def text_hash(text: str) -> bytes:
    """A stable 16-byte digest of a document (exact dedup, held-out split, document ids)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def hash_fraction(digest: bytes) -> float:
    """Map a digest uniformly onto [0, 1): the held-out split compares it with valid_fraction."""
    return int.from_bytes(digest[:8], "big") / 2**64


class Cleaner:
    """Stateful filter chain: remembers hashes/MinHashes of kept documents across all sources."""

    def __init__(self, config: CleaningConfig) -> None:
        self.config = config
        self._seen: set[bytes] = set()
        self._lsh: Any = None
        self._langid: Any = None
        if config.near_dedup:
            self._lsh = _import("datasketch", "cleaning.near_dedup").MinHashLSH(
                threshold=config.near_dedup_threshold, num_perm=config.near_dedup_num_perm
            )
        if config.lang_filter:
            self._langid = _import("py3langid", "cleaning.lang_filter")

    def normalize(self, text: str) -> str:
        """NFC and strip, as configured; applied before any comparison so duplicates match."""
        if self.config.normalize_nfc:
            text = unicodedata.normalize("NFC", text)
        return text.strip() if self.config.strip else text

    def reject(self, text: str, digest: bytes, lang: str, check_lang: bool) -> str | None:
        """Why `text` (already normalised) is dropped, or None to keep it (and remember it)."""
        cfg = self.config
        if len(text) < max(cfg.min_chars, 1):
            return "too_short" if text else "empty"
        if cfg.max_chars is not None and len(text) > cfg.max_chars:
            return "too_long"
        if cfg.exact_dedup and digest in self._seen:
            return "duplicate"
        decidable = check_lang and self._langid is not None and len(text) >= cfg.lang_filter_min_chars
        if decidable and not self._language_ok(text, lang):
            return "wrong_language"
        if self._lsh is not None and self._near_duplicate(text, digest):
            return "near_duplicate"
        if cfg.exact_dedup:
            self._seen.add(digest)
        return None

    def _language_ok(self, text: str, lang: str) -> bool:
        accepted = {lang} | _BUILTIN_ALIASES.get(lang, set()) | set(self.config.lang_aliases.get(lang, []))
        return self._langid.classify(text)[0] in accepted

    def _near_duplicate(self, text: str, digest: bytes) -> bool:
        import datasketch

        words = _WORD.findall(text.lower())
        shingles = {" ".join(words[i : i + _SHINGLE]) for i in range(max(1, len(words) - _SHINGLE + 1))}
        minhash = datasketch.MinHash(num_perm=self.config.near_dedup_num_perm, seed=1)
        minhash.update_batch([s.encode("utf-8") for s in shingles])
        if self._lsh.query(minhash):
            return True
        self._lsh.insert(digest.hex(), minhash)
        return False


def _import(module: str, flag: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise LangadaptError(f"{flag} needs the {module} package: pip install {module}") from None
