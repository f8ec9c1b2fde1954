"""Every token of a tokenizer as the BYTES it stands for.

Two tokenizers can only be compared on what their tokens mean, not on how their vocabularies
spell them: a byte-level BPE writes " å" as `Ġ` + `Ã¥` (the GPT-2 byte-to-unicode table),
SentencePiece writes it as `▁å` or as byte-fallback pieces `<0xC3><0xA5>`. Re-tokenising the
spelled form as if it were text is the classic bug (it maps `Ã¥` to the pieces of "Ã" and "¥").
No library exposes "the bytes of token i" for an arbitrary `tokenizers` pipeline, so this
module reads the pipeline's own description (`tokenizer.json`) to decide which spelling it uses
and undoes it. Special tokens have no bytes; they are kept by role.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from transformers import PreTrainedTokenizerBase
from transformers.convert_slow_tokenizer import bytes_to_unicode

Kind = Literal["byte_level", "sentencepiece", "plain"]
ROLES = ("bos", "eos", "pad", "unk")
_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_BYTE_TO_UNICODE = bytes_to_unicode()
_UNICODE_TO_BYTE = {ch: b for b, ch in _BYTE_TO_UNICODE.items()}


@dataclass
class VocabView:
    """A tokenizer's vocabulary seen as bytes, with its special tokens by role."""

    kind: Kind
    """How regular tokens are spelled: GPT-2 byte-level, SentencePiece (`▁`, `<0xNN>`), or plain text."""
    tokens: list[str | None]
    """The raw token string of each id (None where an id has no token)."""
    token_bytes: list[bytes | None]
    """The bytes each id stands for; None for special tokens and holes."""
    specials: dict[int, str] = field(default_factory=dict)
    """Special token id -> its content, e.g. {0: "<s>"}."""
    roles: dict[str, int] = field(default_factory=dict)
    """Role (bos/eos/pad/unk) -> id, for the roles the tokenizer defines."""
    byte_fallback_ids: set[int] = field(default_factory=set)
    """Ids of `<0xNN>` byte-fallback pieces (SentencePiece style)."""
    replacement: str = "\u2581"
    """The character a SentencePiece-style vocabulary writes for a space."""

    def __len__(self) -> int:
        return len(self.tokens)

    def byte_index(self) -> dict[bytes, int]:
        """Bytes -> id of the token the tokenizer itself would use for them (for segmenting text).

        When several tokens spell the same bytes (SentencePiece `a` and `<0x61>`), the ordinary
        piece wins: the base tokenizer only falls back to bytes for characters it has no piece
        for, so `<0x61>` never occurs in its output. The lower id wins among equals.
        """
        index: dict[bytes, int] = {}
        for i, b in enumerate(self.token_bytes):
            if b is None:
                continue
            prev = index.get(b)
            if prev is None or (prev in self.byte_fallback_ids and i not in self.byte_fallback_ids):
                index[b] = i
        return index

    def token_index(self) -> dict[tuple[bytes, bool], int]:
        """(bytes, is byte-fallback) -> id: the SAME token in another vocabulary.

        `<0x61>` and `a` stand for the same byte but are different rows of a SentencePiece model
        (the first carries "a byte of a character I have no piece for", the second the letter);
        a token present in both vocabularies must keep its own row, so the lookup keeps them apart.
        """
        index: dict[tuple[bytes, bool], int] = {}
        for i, b in enumerate(self.token_bytes):
            if b is not None:
                index.setdefault((b, i in self.byte_fallback_ids), i)
        return index

    def spell(self, data: bytes) -> str | None:
        """`data` written the way this vocabulary writes its tokens (`Ġ`/`▁` for spaces), or None.

        Feeding this to the tokenizer's MODEL (BPE merges, byte fallback) gives the pieces the
        tokenizer produces for these bytes inside a word, without the normaliser or
        pre-tokeniser adding a dummy prefix: the base tokenizer's own pieces for a new token.
        """
        if self.kind == "byte_level":
            return "".join(_BYTE_TO_UNICODE[b] for b in data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None  # half a character: only a byte segmentation can place it
        return text.replace(" ", self.replacement) if self.kind == "sentencepiece" else text


def _pipeline(tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """The `tokenizer.json` description of a fast tokenizer ({} for slow ones)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return json.loads(backend.to_str()) if backend is not None else {}


def _walk(node: Any) -> list[dict]:
    """All nested component dicts of a pipeline section (Sequence pre-tokenizers, decoders, ...)."""
    if isinstance(node, dict):
        found = [node] if "type" in node else []
        for value in node.values():
            found += _walk(value)
        return found
    if isinstance(node, list):
        return [d for item in node for d in _walk(item)]
    return []


def detect_kind(tokenizer: PreTrainedTokenizerBase) -> tuple[Kind, str, bool]:
    """(kind, metaspace replacement character, byte fallback) of a tokenizer's spelling."""
    spec = _pipeline(tokenizer)
    parts = _walk([spec.get("normalizer"), spec.get("pre_tokenizer"), spec.get("decoder")])
    byte_fallback = bool((spec.get("model") or {}).get("byte_fallback"))
    if any(p["type"] == "ByteLevel" for p in parts):
        return "byte_level", "▁", byte_fallback
    for p in parts:
        if p["type"] == "Metaspace":
            return "sentencepiece", p.get("replacement", "▁"), byte_fallback
        if p["type"] == "Replace" and "▁" in (str(p.get("pattern")), str(p.get("content"))):
            return "sentencepiece", "▁", byte_fallback
    if not spec and hasattr(tokenizer, "sp_model"):  # a slow SentencePiece tokenizer
        return "sentencepiece", "▁", True
    return "plain", "▁", byte_fallback


def _regular_bytes(token: str, kind: Kind, replacement: str) -> tuple[bytes | None, bool]:
    """(bytes, is_byte_fallback) of a regular (non-added) token."""
    if kind == "byte_level":
        if all(ch in _UNICODE_TO_BYTE for ch in token):
            return bytes(_UNICODE_TO_BYTE[ch] for ch in token), False
        return token.encode("utf-8"), False  # not byte-encoded (rare hand-added piece)
    if kind == "sentencepiece":
        m = _BYTE_FALLBACK.match(token)
        if m:
            return bytes([int(m.group(1), 16)]), True
        return token.replace(replacement, " ").encode("utf-8"), False
    return token.encode("utf-8"), False


def vocab_view(tokenizer: PreTrainedTokenizerBase) -> VocabView:
    """Read every token of `tokenizer` as bytes (see the module docstring for why)."""
    kind, replacement, _ = detect_kind(tokenizer)
    size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    added = tokenizer.added_tokens_decoder
    special_ids = set(tokenizer.all_special_ids) | {i for i, t in added.items() if t.special}
    view = VocabView(kind=kind, tokens=list(tokens), token_bytes=[None] * size, replacement=replacement)
    for i, token in enumerate(tokens):
        if token is None:
            continue
        if i in special_ids:
            view.specials[i] = token
        elif i in added:  # a user-added plain token: its content is literal text
            view.token_bytes[i] = added[i].content.encode("utf-8")
        else:
            view.token_bytes[i], is_fallback = _regular_bytes(token, kind, replacement)
            if is_fallback:
                view.byte_fallback_ids.add(i)
    for role in ROLES:
        token_id = getattr(tokenizer, f"{role}_token_id", None)
        if token_id is not None and 0 <= token_id < size:
            view.roles[role] = token_id
    return view
