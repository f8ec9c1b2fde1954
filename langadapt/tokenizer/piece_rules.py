"""What a new token of an extended tokenizer may be: the base's own trainer rules.

A SentencePiece base (Mistral-7B, Llama-2) was trained under rules that its `tokenizer.json`
does not carry: the converted file has only the vocabulary, the merges and a dummy-prefix `▁`.
The rules are in the trainer spec inside `tokenizer.model` (Mistral-7B v0.1 and v0.3:
split_digits, split_by_unicode_script, split_by_number, split_by_whitespace,
max_sentencepiece_length 16). Continued BPE that ignores them learns tokens the base never has
(`▁20`, `3.`, `den,`: 29% of 8,192 Bokmål tokens on Mistral-7B, issue 38), and the base's rows
were never trained on such pieces.

SentencePiece applies these rules to the pieces it creates, not to the words it counts: its BPE
trainer refuses a merge whose result fails `TrainerInterface::IsValidSentencePiece`
(sentencepiece/src/trainer_interface.cc, bpe_model_trainer.cc `GetPairSymbol`). `PieceRules.allows`
is that function, and the extension asks it before every merge, so every new token is one the
base's own trainer could have made:

- at most `max_sentencepiece_length` characters (code points, `▁` included);
- split_digits: a piece of two or more characters holds no decimal digit (0-9, fullwidth ０-９),
  so `2023` stays `2 0 2 3` and `▁3`, `3.` are never made;
- split_by_unicode_script: each character's Unicode script must equal the previous one's, where
  `▁` has none (it is skipped), Inherited marks take the previous one's, Hiragana and Katakana
  count as Han, and with split_by_number off digits have none (and reset the comparison).
  Punctuation, symbols and digits are script Common, so `den,`, `(s` and `'s` are refused while
  `▁(`, `.,` and `),` (all Common) are allowed, as in the base's vocabulary;
- `▁` only at the start of a piece (split_by_whitespace; at the end with
  treat_whitespace_as_suffix), except in pieces of only `▁` when allow_whitespace_only_pieces;
- never a space, tab, NUL or U+2585 (SentencePiece's unknown-character marker).

The scripts come from `tokenizers`' UnicodeScripts pre-tokeniser, whose table follows
SentencePiece's own (Hiragana/Katakana/U+30FC fused into Han); it splits Inherited marks from
their letter where SentencePiece does not, so those are recognised first and skipped.

Without a tokenizer.model (Tekken, GPT-2's byte-level BPE, a SentencePiece-style file saved alone)
nothing is read and only the recipe's own `split_digits` can add a rule. A tokenizer.json's own
pre-tokeniser (a Digits step, a regex) already cuts the words the extension counts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, pre_tokenizers

from langadapt.errors import LangadaptError
from langadapt.inputs.files import read_input_bytes

log = logging.getLogger("langadapt.tokenizer")
SPACE = "\u2581"
NEVER_IN_A_PIECE = frozenset(" \t\x00\u2585")
"""Characters SentencePiece refuses in any piece it creates (space, its UPP boundary, NUL, its UNK marker)."""
_SPEC_FIELDS = {20: "max_length", 21: "split_by_unicode_script", 22: "split_by_whitespace", 23: "split_by_number",
                24: "treat_whitespace_as_suffix", 25: "split_digits", 26: "allow_whitespace_only_pieces"}
"""TrainerSpec field numbers (sentencepiece_model.proto) of the rules that constrain pieces."""
_BPE = 2  # TrainerSpec.model_type


@dataclass(frozen=True)
class PieceRules:
    """The rules a new token must obey; the defaults constrain nothing (a base without a trainer spec)."""

    max_length: int | None = None
    """Longest piece in characters (SentencePiece's max_sentencepiece_length); None: no limit."""
    split_digits: bool = False
    split_by_unicode_script: bool = False
    split_by_number: bool = True
    sentencepiece: bool = False
    """SentencePiece's `▁` placement and forbidden characters apply (a trainer spec was read)."""
    split_by_whitespace: bool = True
    treat_whitespace_as_suffix: bool = False
    allow_whitespace_only_pieces: bool = False
    origin: str = ""
    """Where the rules were read (for the log and messages)."""

    def allows(self, piece: str) -> bool:
        """Whether SentencePiece's trainer could create `piece` (IsValidSentencePiece)."""
        if not piece or (self.max_length is not None and len(piece) > self.max_length):
            return False
        only_spaces = all(c == SPACE for c in piece)
        previous: str | None = None  # a character of the previous script; None: any script follows
        for pos, char in enumerate(piece):
            if self.sentencepiece and char in NEVER_IN_A_PIECE:
                return False
            if char == SPACE:
                if self.sentencepiece and not self._space_allowed(pos, len(piece), only_spaces):
                    return False
                continue
            digit = is_decimal_digit(char)
            if self.split_digits and digit and len(piece) > 1:
                return False
            if not self.split_by_unicode_script or _inherited(char):
                continue
            if digit and not self.split_by_number:
                previous = None
                continue
            if previous is not None and not _same_script(previous, char):
                return False
            previous = char
        return True

    def _space_allowed(self, pos: int, size: int, only_spaces: bool) -> bool:
        if self.allow_whitespace_only_pieces and only_spaces:
            return True
        if self.treat_whitespace_as_suffix:
            last = pos == size - 1
            return last or (not self.split_by_whitespace and pos > 0)
        return pos == 0 or (not self.split_by_whitespace and pos < size - 1)

    def describe(self) -> str:
        """The rules in force, e.g. 'split_digits, split_by_unicode_script, at most 16 characters'."""
        names = [name for name in ("split_digits", "split_by_unicode_script") if getattr(self, name)]
        if self.max_length is not None:
            names.append(f"at most {self.max_length} characters")
        return ", ".join(names) or "none"


def is_decimal_digit(char: str) -> bool:
    """SentencePiece's decimal number: ASCII 0-9 and fullwidth ０-９ (not every Unicode Nd)."""
    return "0" <= char <= "9" or "\uff10" <= char <= "\uff19"


_SCRIPTS = pre_tokenizers.UnicodeScripts()


@cache
def _same_script(left: str, right: str) -> bool:
    return len(_SCRIPTS.pre_tokenize_str(left + right)) == 1


@cache
def _inherited(char: str) -> bool:
    """Script Inherited (combining marks, ZWJ/ZWNJ, variation selectors), which SentencePiece gives
    the previous character's script: the same class as U+0301 in `tokenizers`' table."""
    return _same_script("\u0301", char)


def base_piece_rules(base: Any, base_json: dict) -> PieceRules | None:
    """The trainer rules in the base's `tokenizer.model`, when it has one that is this tokenizer's
    (its pieces are the vocabulary's tokens at the same ids) and is a SentencePiece BPE; else None."""
    path = sentencepiece_model_file(base)
    if path is None:
        return None
    try:
        pieces, spec = read_sentencepiece_model(read_input_bytes(path, "base_model.path"))
    except (ValueError, IndexError) as exc:
        raise LangadaptError(f"base_model.path: {path} is not a readable SentencePiece model ({exc}); "
                             "remove it or replace it with the base's own tokenizer.model") from None
    vocab = base_json.get("model", {}).get("vocab", {})
    if spec.get(3, 1) != _BPE or any(vocab.get(piece) != i for i, piece in enumerate(pieces)):
        log.warning("tokenizer: %s is not the SentencePiece BPE of this tokenizer.json (other pieces or ids); "
                    "its trainer rules are not applied to the extension", path)
        return None
    values = {name: spec[number] for number, name in _SPEC_FIELDS.items() if number in spec}
    flags = {name: bool(value) for name, value in values.items() if name != "max_length"}
    return PieceRules(max_length=int(values.get("max_length", 16)), sentencepiece=True, origin=str(path),
                      **{"split_by_unicode_script": True, **flags})


def sentencepiece_model_file(base: Any) -> Path | None:
    """The base's SentencePiece `tokenizer.model`: the file transformers loaded it with, or the one
    in the folder it was loaded from."""
    for candidate in (getattr(base, "vocab_file", None), getattr(base, "init_kwargs", {}).get("vocab_file")):
        if isinstance(candidate, str | Path) and str(candidate).endswith(".model") and Path(candidate).is_file():
            return Path(candidate)
    folder = getattr(base, "name_or_path", "") or ""
    if folder and Path(folder).is_dir() and (Path(folder) / "tokenizer.model").is_file():
        return Path(folder) / "tokenizer.model"
    return None


def read_sentencepiece_model(data: bytes) -> tuple[list[str], dict[int, Any]]:
    """The pieces (in id order) and the trainer spec's fields by number of a serialised ModelProto.

    Read from the protobuf wire format directly: `sentencepiece` and `protobuf` are no dependency
    of langadapt, and only a few numbered fields are needed."""
    pieces: list[str] = []
    spec: dict[int, Any] = {}
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            pieces.append(_piece(value))
        elif number == 2 and isinstance(value, bytes):
            spec = dict(_fields(value))
    if not pieces:
        raise ValueError("no pieces")
    return pieces, spec


def _piece(message: bytes) -> str:
    """The `piece` string (field 1) of a ModelProto.SentencePiece message; SentencePiece writes it first."""
    if message[:1] == b"\n":  # field 1, length-delimited
        size, start = _varint(message, 1)
        return message[start:start + size].decode("utf-8")
    return next((v.decode("utf-8") for n, v in _fields(message) if n == 1 and isinstance(v, bytes)), "")


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one protobuf message: varints as ints, everything else as bytes."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            yield number, value
            continue
        if wire == 2:
            size, i = _varint(data, i)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if i + size > len(data):
            raise ValueError("truncated message")
        yield number, data[i:i + size]
        i += size


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7


def digit_rule(base_json: dict, rules: PieceRules | None) -> bool | None:
    """Whether the base keeps every digit a token of its own: True when its trainer spec says
    split_digits or its pre-tokeniser cuts between digits; False when a token of its vocabulary
    joins a digit with another character (GPT-2's `2023`, `Ġ1`); None when neither is known."""
    if rules is not None and rules.split_digits:
        return True
    if _pre_tokenizer_splits_digits(base_json):
        return True
    specials = {t["content"] for t in base_json.get("added_tokens", [])}
    for token in base_json.get("model", {}).get("vocab", {}):
        if len(token) > 1 and token not in specials and not is_byte_piece(token) \
                and any(is_decimal_digit(c) for c in token):
            return False
    return None


def with_recipe_digits(rules: PieceRules | None, split_digits: bool | None) -> PieceRules | None:
    """`rules` with the recipe's `tokenizer.split_digits: true` added (already checked against the base)."""
    if not split_digits or (rules is not None and rules.split_digits):
        return rules
    return replace(rules or PieceRules(origin="tokenizer.split_digits"), split_digits=True)


def _pre_tokenizer_splits_digits(base_json: dict) -> bool:
    if base_json.get("pre_tokenizer") is None:
        return False
    helper = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": base_json["pre_tokenizer"], "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "vocab": {}, "merges": []}}))
    words = helper.pre_tokenizer.pre_tokenize_str("2023 0123456789 3.14")
    return all(sum(is_decimal_digit(c) for c in word) <= 1 for word, _ in words)


def is_byte_piece(token: str) -> bool:
    """SentencePiece's byte-fallback pieces `<0x00>`..`<0xFF>`."""
    return len(token) == 6 and token.startswith("<0x") and token.endswith(">")
