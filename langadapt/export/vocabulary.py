"""The base's own vocabulary files (SentencePiece's tokenizer.model, mistral-common's tekken.json)
in an exported folder: copied, regenerated, or left out.

sentencepiece, llama.cpp, vLLM and AutoTokenizer (with mistral-common installed, it prefers
tekken.json) read these files before tokenizer.json. Every file a loader may pick must encode
exactly as the model was trained, so:

- the base's vocabulary (tokenizer.kind keep_base): the files are copied as they are;
- an EXTENDED vocabulary (the base's tokens at their ids and its merges at their ranks, new tokens
  appended, tokenizer.kind extend): tekken.json is regenerated with the new tokens at the ranks
  after the base's, when the conditions for tiktoken to merge as the BPE model does hold (checked
  by `extended_tekken`; else it is left out as well); tokenizer.model is left out, because a
  SentencePiece BPE model merges by piece score, not by the pair a merge joins, and cannot say
  that a new piece is only made from its recorded parents;
- any other vocabulary: nothing of the base's ships.
"""

from __future__ import annotations

import base64
import json
import logging
import shutil
from functools import cache
from pathlib import Path
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.inputs.model_folder import tokenizer_id_count
from langadapt.inputs.text import read_input_json

VOCABULARY_FILES = ("tokenizer.model", "tekken.json")
"""A base's vocabulary in its own library's format, which some readers prefer to tokenizer.json."""
TOKENIZER_PARTS = ("model", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder")
"""The parts of tokenizer.json that decide which ids a text gets and how ids decode."""
DROPPED_BECAUSE = {
    "tokenizer.model": "SentencePiece merges pieces by score, not by the pair a merge joins, so it cannot "
                       "express the extended vocabulary",
}
"""Why a base file cannot describe an extended vocabulary (a sentence for the log and the model card)."""

log = logging.getLogger("langadapt")


def same_vocabulary(ours: dict, base: dict) -> bool:
    """Whether two tokenizer.json documents are the same vocabulary and pipeline (tokenizer.kind keep_base)."""
    return all(ours.get(key) == base.get(key) for key in TOKENIZER_PARTS)


def _merge_pairs(merges: list) -> list[tuple[str, str]]:
    """Merges as pairs, whichever way the file spells them ("a b" before tokenizers 0.20, [a, b] since)."""
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def extends_vocabulary(ours: dict, base: dict) -> bool:
    """Whether tokenizer.json `ours` is `base` with tokens appended (tokenizer.kind extend).

    Decided from the two tokenizers, not from the recipe, because what a loader reads is the file:
    both models are BPE with the same settings, every base token has its base id in `ours`, the
    base's merges are the first merges of `ours`, `ours` has more tokens, and the pipeline around
    the model (normaliser, pre-tokeniser, post-processor, decoder, added tokens) is unchanged.
    """
    model, base_model = ours.get("model") or {}, base.get("model") or {}
    if model.get("type") != "BPE" or base_model.get("type") != "BPE":
        return False
    settings = {key for key in model.keys() | base_model.keys() if key not in ("vocab", "merges")}
    if any(model.get(key) != base_model.get(key) for key in settings):
        return False
    if any(ours.get(key) != base.get(key) for key in TOKENIZER_PARTS if key != "model"):
        return False
    vocab, base_vocab = model.get("vocab", {}), base_model.get("vocab", {})
    if len(vocab) <= len(base_vocab) or any(vocab.get(token) != i for token, i in base_vocab.items()):
        return False
    merges, base_merges = _merge_pairs(model.get("merges", [])), _merge_pairs(base_model.get("merges", []))
    return merges[: len(base_merges)] == base_merges


@cache
def _byte_of_char() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's bytes_to_unicode) read backwards: character -> byte."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


def token_bytes(token: str) -> bytes:
    """The bytes a byte-level BPE token string stands for (KeyError: not a byte-level token)."""
    byte_of = _byte_of_char()
    return bytes(byte_of[char] for char in token)


def _tekken_entry(rank: int, raw: bytes) -> dict[str, Any]:
    """One Tekken vocabulary entry as mistral-common writes them (token_str None when not UTF-8)."""
    try:
        text: str | None = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"rank": rank, "token_bytes": base64.b64encode(raw).decode("ascii"), "token_str": text}


def extended_tekken(tekken: dict, ours: dict, base: dict) -> dict:
    """The base's tekken.json with the tokens that `ours` (an extension of `base`, both
    tokenizer.json documents) appends.

    A Tekken id is `rank + default_num_special_tokens`; the base's ranks beyond its
    `default_vocab_size` (the file may hold more than the model uses) are cut, and each new token
    gets rank `id - default_num_special_tokens`, its bytes read from the byte-level token string.
    tiktoken merges the adjacent pair whose JOIN has the lowest rank, a BPE model the pair whose
    MERGE ranks first. They cannot agree unless each new token ranks after both of its parts, the
    new ranks follow the new merges' order, and the BPE reaches each new token from the token's
    own bytes: these are checked here, not assumed. They are necessary, not proven sufficient;
    tests/export/test_export_extended_vocab.py compares the two encoders on real extensions.
    Raises ValueError, saying why, when `ours` cannot be written this way (a tekken.json that does
    not describe the base's tokenizer.json, ids not following the base's, a token that is not
    byte-level, merges Tekken cannot express).
    """
    config = tekken["config"]
    specials = int(config["default_num_special_tokens"])
    kept = tekken["vocab"][: int(config["default_vocab_size"]) - specials]
    model = ours["model"]
    by_id = {i: token for token, i in model["vocab"].items() if i >= specials}
    try:
        for entry in kept:
            if token_bytes(by_id.get(entry["rank"] + specials, "")) != base64.b64decode(entry["token_bytes"]):
                raise ValueError(f"its rank {entry['rank']} is not tokenizer.json's id {entry['rank'] + specials}")
        first = specials + len(kept)
        if first != tokenizer_id_count(base):
            raise ValueError(f"it describes {first:,} ids, the base's tokenizer.json {tokenizer_id_count(base):,}")
        new = sorted(i for i in by_id if i >= first)
        if new != list(range(first, first + len(new))):
            raise ValueError(f"the new ids do not follow its {first:,} ids one after another")
        vocab = kept + [_tekken_entry(i - specials, token_bytes(by_id[i])) for i in new]
    except KeyError as exc:
        raise ValueError(f"tokenizer.json is not byte-level BPE (token character {exc})") from None
    _check_merge_order(_merge_pairs(model["merges"])[len(base["model"]["merges"]):], model["vocab"], first)
    _check_reached(model, {by_id[i]: i for i in new})
    return {**tekken, "vocab": vocab,
            "config": {**config, "default_vocab_size": specials + len(vocab), "num_vocab_tokens": len(vocab)}}


def _check_merge_order(merges: list[tuple[str, str]], vocab: dict[str, int], first: int) -> None:
    """The appended `merges` must each make a new token (id `first` or above), in id order, from
    parts with lower ids: then each new token's Tekken rank is its merge's priority (ValueError
    otherwise, e.g. an appended merge that makes a base token, which tiktoken would rank first)."""
    last = first - 1
    for left, right in merges:
        made = vocab.get(left + right, -1)
        if made <= last or vocab[left] >= made or vocab[right] >= made:
            raise ValueError(f"merge {left!r} + {right!r} makes id {made}, which does not rank after its "
                             "parts and the merges before it; Tekken ranks cannot express that order")
        last = made


def _check_reached(model: dict, new: dict[str, int]) -> None:
    """Each new token must be what the BPE model makes of the token's own bytes (ValueError otherwise).

    tiktoken joins ANY two adjacent tokens whose concatenation is in the vocabulary; a BPE model
    only the pairs it recorded. A new token `abcd` recorded as `abc`+`d` where the model splits
    those bytes `ab`,`cd` is one the model never makes, but tiktoken would make it inside any
    longer word. Continued training records the pairs it saw, so its tokens pass; this is a
    necessary condition for the two encoders to agree, which the real-base test backs with text."""
    from tokenizers import Tokenizer

    segmenter = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {**model, "ignore_merges": False}}))  # no whole-word shortcut: the merges alone
    tokens = list(new)
    for token, encoding in zip(tokens, segmenter.encode_batch(tokens, add_special_tokens=False)):
        if encoding.ids != [new[token]]:
            raise ValueError(f"the BPE model splits the new token {token!r} into {encoding.tokens}, which "
                             "tiktoken would join; Tekken ranks cannot express that")


def _write_extended_tekken(source: Path, ours: dict, base: dict, target: Path) -> str | None:
    """Write the regenerated tekken.json; returns why it could not be (None: written)."""
    try:
        tekken = read_input_json(source, "the base's tekken.json")
        target.write_text(json.dumps(extended_tekken(tekken, ours, base), ensure_ascii=False) + "\n",
                          encoding="utf-8")
    except (OSError, ValueError, KeyError, TypeError, LangadaptError) as exc:
        return f"it cannot be regenerated for the extended vocabulary ({exc})"
    return None


def carry_vocabulary_files(ours: dict, base: dict | None, base_folder: str | None,
                           folder: Path) -> dict[str, Any]:
    """Put the base's own vocabulary files into the export as far as they agree with `ours`.

    Returns {"base_vocabulary_files": copied unchanged, "extended_vocabulary_files": regenerated
    with the appended tokens, "dropped_vocabulary_files": {file: why}} (the last only for an
    extended vocabulary, where a user might expect them; a new vocabulary obviously has none).
    """
    result: dict[str, Any] = {"base_vocabulary_files": [], "extended_vocabulary_files": [],
                              "dropped_vocabulary_files": {}}
    if base is None or not base_folder:
        return result
    present = [Path(base_folder) / name for name in VOCABULARY_FILES if (Path(base_folder) / name).is_file()]
    if not present:
        return result
    if same_vocabulary(ours, base):
        for path in present:
            shutil.copy2(path, folder / path.name)
        result["base_vocabulary_files"] = [path.name for path in present]
    elif extends_vocabulary(ours, base):
        for path in present:
            why = (_write_extended_tekken(path, ours, base, folder / path.name) if path.name == "tekken.json"
                   else DROPPED_BECAUSE[path.name])
            if why is None:
                result["extended_vocabulary_files"].append(path.name)
                continue
            log.warning("export: the base's %s is left out: %s; tokenizer.json is the tokenizer", path.name, why)
            result["dropped_vocabulary_files"][path.name] = why
    return result
