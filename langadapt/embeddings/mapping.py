"""Map every token of the new tokenizer to old-tokenizer pieces, comparing BYTES, not spellings.

For each new token, in order of preference:
- special token: the old token with the same role (bos/eos/pad/unk), else the old special with
  the same content, else "fallback";
- "copied": an old token is the same token: the same bytes and, for SentencePiece byte-fallback
  pieces, the same kind (`<0x61>` keeps the row of `<0x61>`, not the row of `a`); the old token
  at the same id first (an extended vocabulary keeps every base token at its id, duplicates and
  the empty string included: a token the base has is copied, whatever it spells);
- "decomposed": the old tokenizer's own pieces for the token, from its model applied to the
  token's bytes spelled the old way (`_own_pieces`: what the base tokenizer gives the token
  inside a word), accepted only when they spell exactly the token's bytes; when they do not (a
  token that is not valid UTF-8 on its own, an unknown piece), the bytes are segmented into the
  fewest old pieces instead (every byte exists in byte-level and byte-fallback vocabularies, so
  this always succeeds there);
- "fallback": nothing fits (e.g. a byte missing from an old vocabulary without byte fallback);
  the methods give such rows the mean row. No token ever ends with an empty piece list and a
  NaN mean (the bare-space pitfall).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from transformers import PreTrainedTokenizerBase

from langadapt.embeddings.vocab import VocabView, vocab_view

Status = Literal["copied", "decomposed", "special", "fallback"]
STATUSES: tuple[Status, ...] = ("copied", "decomposed", "special", "fallback")


@dataclass
class VocabMapping:
    """For each new token id: its status and the old ids whose rows it is built from."""

    old_size: int
    new_tokens: list[str | None]
    status: list[Status]
    pieces: list[list[int]]
    notes: dict[int, str] = field(default_factory=dict)
    old_kind: str = "plain"
    new_kind: str = "plain"

    @property
    def new_size(self) -> int:
        return len(self.new_tokens)

    @property
    def extends_base(self) -> bool:
        """Whether every old token is the same token at the same id (tokenizer.kind extend, or the base itself)."""
        return self.new_size >= self.old_size and all(
            self.status[i] in ("copied", "special") and self.pieces[i] == [i] for i in range(self.old_size))

    def ids_with(self, status: Status) -> list[int]:
        """New ids with one status, in id order."""
        return [i for i, s in enumerate(self.status) if s == status]

    def summary(self) -> dict:
        """Counts per status (copied / decomposed / special / fallback) and a few sizes."""
        counts = Counter(self.status)
        decomposed = [len(self.pieces[i]) for i in self.ids_with("decomposed")]
        return {
            "old_vocab": self.old_size,
            "new_vocab": self.new_size,
            **{s: counts.get(s, 0) for s in STATUSES},
            "byte_segmented": sum(1 for n in self.notes.values() if n.startswith("byte segmentation")),
            "mean_pieces_decomposed": round(sum(decomposed) / len(decomposed), 3) if decomposed else 0.0,
            "old_kind": self.old_kind,
            "new_kind": self.new_kind,
        }

    def save(self, path: Path | str, old_tokens: list[str | None] | None = None) -> None:
        """Write the mapping as JSON (one entry per new token; old piece strings when given)."""
        entries = []
        for i, token in enumerate(self.new_tokens):
            entry = {"id": i, "token": token, "status": self.status[i], "pieces": self.pieces[i]}
            if old_tokens is not None:
                entry["piece_tokens"] = [old_tokens[p] for p in self.pieces[i]]
            if i in self.notes:
                entry["note"] = self.notes[i]
            entries.append(entry)
        # One token per line: valid JSON that is still easy to grep and diff.
        lines = ",\n".join(json.dumps(e, ensure_ascii=False) for e in entries)
        summary = json.dumps(self.summary(), ensure_ascii=False)
        Path(path).write_text(f'{{"summary": {summary},\n"tokens": [\n{lines}\n]}}\n', encoding="utf-8")

    @classmethod
    def load(cls, path: Path | str) -> VocabMapping:
        """Read a mapping written by `save`."""
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = doc["tokens"]
        return cls(
            old_size=doc["summary"]["old_vocab"],
            new_tokens=[e["token"] for e in entries],
            status=[e["status"] for e in entries],
            pieces=[list(e["pieces"]) for e in entries],
            notes={e["id"]: e["note"] for e in entries if "note" in e},
            old_kind=doc["summary"]["old_kind"],
            new_kind=doc["summary"]["new_kind"],
        )


def segment_bytes(target: bytes, index: dict[bytes, int], max_len: int) -> list[int] | None:
    """Fewest old pieces spelling `target` exactly (ties: longer first piece), or None.

    Hand-written because it works on raw bytes (a token may be half a UTF-8 character), which
    no tokenizer API accepts as input.
    """
    n = len(target)
    best: list[float] = [float("inf")] * n + [0]
    choice = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        for length in range(min(max_len, n - i), 0, -1):
            if best[i + length] + 1 < best[i] and target[i : i + length] in index:
                best[i], choice[i] = best[i + length] + 1, length
    if n == 0 or best[0] == float("inf"):
        return None
    pieces, i = [], 0
    while i < n:
        pieces.append(index[target[i : i + choice[i]]])
        i += choice[i]
    return pieces


def _map_special(new_id: int, new: VocabView, old: VocabView) -> tuple[Status, list[int], str]:
    """A special token keeps its role: same role first, then same content, else fallback."""
    for role, token_id in new.roles.items():
        if token_id == new_id and role in old.roles:
            return "special", [old.roles[role]], f"role {role}"
    content = new.specials[new_id]
    for old_id, old_content in old.specials.items():
        if old_content == content:
            return "special", [old_id], "same content"
    return "fallback", [], f"special {content!r} has no counterpart in the old tokenizer"


def _join(ids: list[int], old: VocabView) -> bytes | None:
    parts = [old.token_bytes[i] for i in ids]
    return None if any(p is None for p in parts) else b"".join(parts)  # type: ignore[arg-type]


def _own_pieces(nid: int, new: VocabView, old: VocabView, model: Any) -> list[int] | None:
    """The old tokenizer's pieces for a new token's bytes, from its own BPE/Unigram model.

    The token's bytes are spelled the old vocabulary's way and given to the old MODEL, not to
    the whole tokenizer: the normaliser and pre-tokeniser of a SentencePiece base would prepend
    a dummy `▁` (" pakke" becomes `▁▁`,`p`,`ak`,`ke` instead of `▁p`,`ak`,`ke`), and a new token is
    by construction one pre-token, which is exactly what the model sees inside a word.
    """
    spelled = old.spell(new.token_bytes[nid])  # type: ignore[arg-type]
    if model is None or not spelled:
        return None
    ids = [token.id for token in model.tokenize(spelled)]
    return ids if ids and _join(ids, old) == new.token_bytes[nid] else None


def _decompose(
    pending: list[int], new: VocabView, old: VocabView, old_tokenizer: PreTrainedTokenizerBase
) -> dict[int, tuple[Status, list[int], str]]:
    """Old pieces for tokens without an exact match (see the module docstring)."""
    backend = getattr(old_tokenizer, "backend_tokenizer", None)
    model = backend.model if backend is not None else None
    results: dict[int, tuple[Status, list[int], str]] = {}
    texts: dict[int, str] = {}
    for nid in pending:
        pieces = _own_pieces(nid, new, old, model)
        if pieces is not None:
            results[nid] = ("decomposed", pieces, "")
            continue
        try:  # a slow tokenizer, or a vocabulary spelled in a way `spell` does not know
            texts[nid] = new.token_bytes[nid].decode("utf-8")  # type: ignore[union-attr]
        except UnicodeDecodeError:
            pass  # half a character: only the byte segmentation below can place it
    if texts:
        encoded = old_tokenizer(list(texts.values()), add_special_tokens=False)["input_ids"]
        for nid, ids in zip(texts, encoded):
            if ids and _join(ids, old) == new.token_bytes[nid]:
                results[nid] = ("decomposed", list(ids), "encoded as text")
    index = old.byte_index()
    max_len = max((len(b) for b in index), default=1)
    for nid in pending:
        if nid in results:
            continue
        pieces = segment_bytes(new.token_bytes[nid], index, max_len)  # type: ignore[arg-type]
        if pieces:
            results[nid] = ("decomposed", pieces, "byte segmentation")
        else:
            results[nid] = ("fallback", [], "no old pieces spell these bytes")
    return results


def build_mapping(
    old_tokenizer: PreTrainedTokenizerBase, new_tokenizer: PreTrainedTokenizerBase
) -> VocabMapping:
    """Map every token of `new_tokenizer` to pieces of `old_tokenizer` (module docstring)."""
    old, new = vocab_view(old_tokenizer), vocab_view(new_tokenizer)
    same = old.token_index()
    n = len(new)
    mapping = VocabMapping(
        old_size=len(old),
        new_tokens=new.tokens,
        status=["fallback"] * n,
        pieces=[[] for _ in range(n)],
        old_kind=old.kind,
        new_kind=new.kind,
    )
    pending = []
    for i in range(n):
        b = new.token_bytes[i]
        key = (b, i in new.byte_fallback_ids)
        if i in new.specials:
            mapping.status[i], mapping.pieces[i], mapping.notes[i] = _map_special(i, new, old)
        elif b is None:
            mapping.notes[i] = "missing token"
        elif i < len(old) and old.token_bytes[i] == b and (i in old.byte_fallback_ids) == key[1]:
            # the base's own token at its own id (an extended vocabulary), whatever it spells, even
            # nothing: Whisper's "" at 50,256 is a row the base has, not a hole to fill with the mean
            mapping.status[i], mapping.pieces[i] = "copied", [i]
        elif key in same or (b, not key[1]) in same:
            # the same token keeps its row (`<0x61>` its own, not `a`'s); else the same bytes spelled
            # as the other kind (a byte-level base's byte token for a new `<0x61>`)
            mapping.status[i], mapping.pieces[i] = "copied", [same.get(key, same.get((b, not key[1])))]
        elif not b:
            mapping.notes[i] = "empty token the base does not have"
        else:
            pending.append(i)
    for i, (status, pieces, note) in _decompose(pending, new, old, old_tokenizer).items():
        mapping.status[i], mapping.pieces[i] = status, pieces
        if note:
            mapping.notes[i] = note
    return mapping
