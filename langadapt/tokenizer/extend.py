"""Extend a base BPE tokenizer with the target language's own tokens: continued BPE training.

    count words (the base's normaliser and pre-tokeniser) -> segment each word with the base's
    own BPE model -> keep merging the most frequent adjacent pair of tokens -> append the new
    tokens and merges behind the base's

Every base token keeps its id, every base merge its rank, every added/special token its id; the
new merges rank after all base merges, so encoding first runs the base's merges to completion
(the base's own segmentation) and only then glues whole base tokens together. Any text is
therefore tokenised into a coarsening of what the base produced, never a different split, and
the base's rows keep meaning what they meant (Purason et al. 2025, "Teaching Old Tokenizers New
Words"; code: taidopurason/tokenizer-extension).

A SentencePiece base's own trainer rules (split_digits, split_by_unicode_script,
max_sentencepiece_length, ...: read from its tokenizer.model, which tokenizer.json does not carry)
bound the new tokens as they bounded the base's (`tokenizer.piece_rules`): every new token is one
the base's trainer could have made, so Mistral-7B's `2023` stays `2 0 2 3` and no new token joins
letters with punctuation.

Why by hand: `tokenizers`' BpeTrainer always starts from single characters and cannot continue
from a trained vocabulary (tokenizers #879). The PyPI package `bpe-continue` does continue, but
it takes documents, not the language-weighted word counts every kind of this toolkit trains on
(`tokenizer.language_weights`), and it would be one more compiled dependency;
benchmarks/tokenizer_extension.py compares the two side by side (time, tokens per byte, the
guarantees above) and benchmarks/README.md has the numbers that chose this one.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from langadapt.errors import LangadaptError
from langadapt.inputs.model_folder import tokenizer_id_count
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.families import ROLES, Blueprint, family_of, usage_kwargs
from langadapt.tokenizer.piece_rules import (
    PieceRules,
    base_piece_rules,
    digit_rule,
    is_byte_piece,
    with_recipe_digits,
)
from langadapt.tokenizer.saving import convention_flags

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger("langadapt.tokenizer")


class UnreachableCharacter(LangadaptError):
    """A character of the training sample that the base tokenizer cannot encode at all."""

    def __init__(self, char: str, count: int) -> None:
        self.char = char
        super().__init__(
            f"tokenizer.kind=extend: the base tokenizer cannot encode {char!r} (U+{ord(char):04X}, {count:,} "
            "times in the training sample): it has no byte fallback and no unknown token, so the character would "
            "vanish from the text; remove it in cleaning, or use tokenizer.kind=inherit for a new vocabulary")


def extension_problem(tokenizer_json: dict, vocab_size: int, split_digits: bool | None = None,
                      rules: PieceRules | None = None) -> str | None:
    """Why `tokenizer_json` cannot be extended to `vocab_size` ids (None: it can), as one line that
    starts with the recipe key to blame. One function for the library call and preflight, so both
    refuse the same bases with the same line. `split_digits` is the recipe's, `rules` the base's
    trainer rules (`base_piece_rules`): the recipe may restate the base's digit rule, not reverse it."""
    model = tokenizer_json.get("model", {})
    if model.get("type") != "BPE":
        return (f"tokenizer.kind: extend continues BPE merges, but the base tokenizer's model is {model.get('type')} "
                "(continued training works on byte-level BPE, SentencePiece-style BPE and Tekken); use inherit "
                "for a new vocabulary, or keep_base")
    if affix := model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return (f"tokenizer.kind: extend cannot continue a BPE that marks word pieces with {affix!r} (byte-level, "
                "SentencePiece-style BPE and Tekken do not); use inherit for a new vocabulary")
    size = tokenizer_id_count(tokenizer_json)
    if vocab_size <= size:
        return (f"tokenizer.vocab_size: {vocab_size:,} is not above the base's {size:,} ids: with kind extend it is "
                f"the FINAL size (base + new tokens), e.g. {size + 8192:,} for 8,192 new tokens")
    if split_digits is not None and (base := digit_rule(tokenizer_json, rules)) is not None and base != split_digits:
        why = (f"its SentencePiece trainer split digits ({rules.origin})" if rules is not None and rules.split_digits
               else "its pre-tokeniser puts every digit in a word of its own" if base
               else "its vocabulary has tokens that join a digit with another character")
        return (f"tokenizer.split_digits: {str(split_digits).lower()} reverses the base tokenizer's rule ({why}); "
                "kind extend keeps every base token and rule: leave split_digits unset, or use kind inherit")
    return None


def extend_tokenizer(
    config: TokenizerConfig, words: Counter[str], base: PreTrainedTokenizerFast
) -> PreTrainedTokenizerFast:
    """The base tokenizer with `config.vocab_size - len(base)` tokens learned on counted `words`
    (`counting`, cut by `word_rules`) appended, each allowed by the base's piece rules (a
    SentencePiece base's trainer spec, plus the recipe's `split_digits`)."""
    from transformers import PreTrainedTokenizerFast

    base_json = json.loads(base.backend_tokenizer.to_str())
    rules = base_piece_rules(base, base_json) if family_of(base_json, strict=False) == "sentencepiece_bpe" else None
    if problem := extension_problem(base_json, config.vocab_size, config.split_digits, rules):
        raise LangadaptError(problem)
    rules = with_recipe_digits(rules, config.split_digits)
    if rules is not None:
        log.info("tokenizer: new tokens follow the base's piece rules (%s; from %s)", rules.describe(), rules.origin)
    merges = learn_merges(base_json["model"], words, config.vocab_size - tokenizer_id_count(base_json),
                          config.min_frequency, config.max_token_length, rules.allows if rules else None)
    data = extended_json(base_json, merges)
    roles = {role: getattr(base, role) for role in ROLES if getattr(base, role, None) is not None}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(data)), clean_up_tokenization_spaces=False,
        **roles, **convention_flags(base), **usage_kwargs(base))


def word_rules(base_json: dict) -> Blueprint:
    """The base's normaliser and pre-tokeniser, which cut the training sample into the words the
    base's model sees (everything else of the base is kept as it is, not rebuilt)."""
    family = family_of(base_json, strict=False) or "byte_bpe"  # a plain BPE's own pre-tokeniser cuts words
    return Blueprint(family, base_json.get("normalizer"), base_json.get("pre_tokenizer"), None, None, [], {})


def extended_json(base_json: dict, merges: list[tuple[str, str]]) -> dict:
    """`base_json` with one new token per merge appended: ids after the base's, ranks after its merges."""
    data = json.loads(json.dumps(base_json))  # a deep copy that stays plain JSON
    model = data["model"]
    next_id = tokenizer_id_count(base_json)
    # Added tokens beyond the model's vocabulary (GPT-2's <|endoftext|>, Llama-3's 256 specials)
    # would leave a hole in the model's ids below the new ones; `tokenizers` gives a token added
    # later (transformers re-adds special roles) the id `model size`, which is then a new token's.
    # Listed in the model's vocabulary as well, they keep their ids and the ids stay dense; the
    # added-token matching still runs before the model, so encoding is unchanged.
    taken = set(model["vocab"].values())
    for entry in base_json.get("added_tokens", []):
        if entry["id"] not in taken and entry["content"] not in model["vocab"]:
            model["vocab"][entry["content"]] = entry["id"]
    as_strings = bool(model["merges"]) and isinstance(model["merges"][0], str)  # tokenizers < 0.20 wrote "a b"
    for offset, (left, right) in enumerate(merges):
        model["vocab"][left + right] = next_id + offset
        model["merges"].append(f"{left} {right}" if as_strings else [left, right])
    return data


def learn_merges(
    model: dict[str, Any], words: Counter[str], budget: int, min_frequency: int = 2, max_length: int | None = None,
    allowed: Callable[[str], bool] | None = None,
) -> list[tuple[str, str]]:
    """Continue the BPE merge loop of a base `model` (tokenizer.json's model) on counted `words`;
    returns the new merges in rank order (merge i creates the token `tokenizer_id_count(base) + i`).

    Words are in the model's own alphabet (normalised and pre-tokenised by the base) and are
    first split by the base model itself. A merge joins two adjacent tokens into a token the
    vocabulary does not have yet; pairs with a byte-fallback piece (`<0xE5>`) or the unknown
    token are never merged (their concatenation is not a token spelling), nor pairs longer than
    `max_length` characters, nor pairs whose token `allowed` refuses (the base trainer's rules,
    asked of each merge's result as SentencePiece's BPE trainer does, not of the words). Ties in
    count go to the pair that sorts first, so the result is the same on every machine.
    """
    vocab: dict[str, int] = dict(model["vocab"])
    strings = {i: token for token, i in vocab.items()}
    splits, counts = _segment(model, words)
    barred = {i for token, i in vocab.items() if is_byte_piece(token)}
    if model.get("unk_token") in vocab:
        barred.add(vocab[model["unk_token"]])

    pair_counts: Counter[tuple[int, int]] = Counter()
    where: dict[tuple[int, int], set[int]] = {}
    for w, (split, n) in enumerate(zip(splits, counts)):
        for pair in pairwise(split):
            pair_counts[pair] += n
            where.setdefault(pair, set()).add(w)
    heap = [(-n, strings[a], strings[b], (a, b)) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[str, str]] = []
    next_id = max(strings, default=-1) + 1
    while heap and len(merges) < budget:
        negative, left, right, pair = heapq.heappop(heap)
        current = pair_counts.get(pair, 0)
        if current != -negative:  # stale entry: the pair's count changed since it was pushed
            if current > 0:
                heapq.heappush(heap, (-current, left, right, pair))
            continue
        if current < min_frequency:
            break
        token = left + right
        if pair[0] in barred or pair[1] in barred or token in vocab or (max_length and len(token) > max_length) \
                or (allowed is not None and not allowed(token)):
            del pair_counts[pair]  # never mergeable: drop it for good
            continue
        new = next_id + len(merges)
        vocab[token], strings[new] = new, token
        merges.append((left, right))
        for w in where.pop(pair):
            changed = _merge_word(splits, counts, w, pair, new, pair_counts, where)
            for other in changed:
                if other in pair_counts:
                    heapq.heappush(heap, (-pair_counts[other], strings[other[0]], strings[other[1]], other))
        pair_counts.pop(pair, None)
    return merges


def _merge_word(splits: list[list[int]], counts: list[int], w: int, pair: tuple[int, int], new: int,
                pair_counts: Counter[tuple[int, int]], where: dict[tuple[int, int], set[int]]) -> set[tuple[int, int]]:
    """Replace `pair` by `new` in word `w` (left to right), updating the pair counts; returns pairs that grew."""
    old = splits[w]
    merged: list[int] = []
    i = 0
    while i < len(old):
        if i + 1 < len(old) and (old[i], old[i + 1]) == pair:
            merged.append(new)
            i += 2
        else:
            merged.append(old[i])
            i += 1
    if len(merged) == len(old):
        return set()
    n = counts[w]
    before, after = Counter(pairwise(old)), Counter(pairwise(merged))
    for p, k in before.items():
        pair_counts[p] -= k * n
        if pair_counts[p] <= 0:
            del pair_counts[p]
    grown = set()
    for p, k in after.items():
        pair_counts[p] += k * n
        where.setdefault(p, set()).add(w)
        if k > before.get(p, 0):
            grown.add(p)
    splits[w] = merged
    return grown


def _segment(model: dict, words: Counter[str]) -> tuple[list[list[int]], list[int]]:
    """Each counted word split by the base's own model, as token ids; words of one token are left out.

    Raises `UnreachableCharacter` when the base drops part of a word (no byte fallback and no
    unknown token): such text cannot be represented by the base, extended or not."""
    segmenter = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": model}))
    if model.get("unk_token") is None and not model.get("byte_fallback"):
        chars: Counter[str] = Counter()
        for word, n in words.items():
            for char in word:
                chars[char] += n
        for char, n in chars.most_common():
            if char not in model["vocab"]:  # BPE starts from single characters: this one has no id
                raise UnreachableCharacter(char, n)
    items = [(word, n) for word, n in words.items()]
    encodings = segmenter.encode_batch([word for word, _ in items], add_special_tokens=False)
    splits, counts = [], []
    for (_, n), encoding in zip(items, encodings):
        if len(encoding.ids) > 1:
            splits.append(list(encoding.ids))
            counts.append(n)
    return splits, counts
