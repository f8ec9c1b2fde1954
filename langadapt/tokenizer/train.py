"""Train a tokenizer for the target language with `tokenizers`, in the base tokenizer's mould.

    sample documents -> count pre-tokens per language -> weight languages -> train -> assemble

The trainer (BPE or Unigram from `tokenizers`) sees pre-counted words (see `counting`); the
learned vocabulary is then placed behind the inherited special tokens (and the 256 byte tokens
of the byte-fallback kinds) and wrapped with the inherited normaliser, pre-tokeniser,
post-processor and decoder into a `tokenizer.json` that `PreTrainedTokenizerFast` loads.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from langadapt.errors import LangadaptError
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.run.timing import PartTimer
from langadapt.tokenizer.counting import ChunkCounter, feed, separator_for
from langadapt.tokenizer.extend import extend_tokenizer, word_rules
from langadapt.tokenizer.families import Blueprint, blueprint, remap_post_processor, training_pre_tokenizer
from langadapt.tokenizer.sample import sample_bound, sample_documents

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger("langadapt.tokenizer")
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
"""SentencePiece's byte-fallback pieces, in byte order."""


def train_tokenizer(
    config: TokenizerConfig,
    texts: Iterable[tuple[str, str]],
    base_tokenizer: PreTrainedTokenizerFast | None,
    seed: int = 0,
    num_workers: int | None = None,
    parts: PartTimer | None = None,
) -> PreTrainedTokenizerFast:
    """Train on (lang, text) pairs; `base_tokenizer` None means a scratch run (byte-level BPE default).

    `texts` is checked as it is consumed (`lang_text_pairs`), not materialised: a corpus may be
    a generator over gigabytes. `num_workers` processes count it (None: every core; the result is
    the same for any number); `parts` receives the time of `sample_count` and `merges`."""
    texts = lang_text_pairs(texts)
    if config.kind == "keep_base":
        if base_tokenizer is None:
            raise LangadaptError("tokenizer.kind=keep_base needs a base model with a tokenizer (not init: scratch)")
        return base_tokenizer
    start, parts = time.perf_counter(), parts or PartTimer()
    if config.kind == "extend":
        if base_tokenizer is None:
            raise LangadaptError("tokenizer.kind=extend needs a base model with a tokenizer (not init: scratch)")
        rules = word_rules(json.loads(base_tokenizer.backend_tokenizer.to_str()))
        with parts.measure("sample_count"):
            words = count_words(config, rules, texts, seed, num_workers)
        with parts.measure("merges"):
            tokenizer = extend_tokenizer(config, words, base_tokenizer)
        what = f"extended the base's {len(base_tokenizer)} ids to"
    else:
        bp = blueprint(config, base_tokenizer)
        _check_size(config, bp)
        with parts.measure("sample_count"):
            words = count_words(config, bp, texts, seed, num_workers)
        with parts.measure("merges"):
            tokenizer = assemble(bp, train_model(config, bp, words))
        what = f"trained {bp.family},"
    log.info("tokenizer: %s %d tokens from %d distinct words in %.1f s", what, len(tokenizer), len(words),
             time.perf_counter() - start)
    check_reached_size(config, len(tokenizer), words, kept=len(base_tokenizer) if config.kind == "extend" else 0)
    return tokenizer


def lang_text_pairs(texts: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """`texts` item by item, each checked to be a (lang, text) pair of strings.

    Languages weight the sample (`tokenizer.language_weights`), so every text needs one. Plain
    strings would otherwise fail deep in sampling with "too many values to unpack" (or, for
    two-character strings, be read as a language and a text); a single string is refused
    before anything is read.
    """
    hint = "pass (lang, text) pairs, e.g. (('nb', text) for text in texts)"
    if isinstance(texts, (str, bytes)):
        raise LangadaptError(f"train_tokenizer: texts is one {type(texts).__name__}; {hint}")
    return _checked_pairs(texts, hint)


def _checked_pairs(texts: Iterable[tuple[str, str]], hint: str) -> Iterator[tuple[str, str]]:
    for index, item in enumerate(texts):
        if not (isinstance(item, tuple | list) and len(item) == 2
                and isinstance(item[0], str) and isinstance(item[1], str)):
            shown = type(item).__name__ if isinstance(item, str | bytes) else repr(item)[:60]
            raise LangadaptError(f"train_tokenizer: texts item {index} is {shown}, not a (lang, text) pair "
                                 f"of strings; {hint}")
        yield item[0], item[1]


def check_reached_size(config: TokenizerConfig, reached: int, words: Counter[str], kept: int = 0) -> None:
    """Warn when the trainer stopped short of `vocab_size`; fail below `min_vocab_fraction` of it.

    BPE stops when no pair occurs `min_frequency` times any more: a sample with few distinct
    words cannot fill a large vocabulary (the demo's 0.7 MB of Bokmål gives ~13k tokens whatever
    is asked). Below half of the size asked for, the run would train and publish a model whose
    embedding rows, memory plan and card all assume a vocabulary that does not exist, so the
    user decides (a smaller vocab_size, more text, or min_vocab_fraction: 0). `kept` base tokens
    (tokenizer.kind extend) are not learned: the fraction is of the tokens to learn, or 28 new
    tokens of 8,192 asked would pass as 94% of a 139k vocabulary.
    """
    if reached >= config.vocab_size:
        return
    occurrences = sum(words.values())
    share = (reached - kept) / (config.vocab_size - kept)
    learned = f"{reached - kept:,} of the {config.vocab_size - kept:,} new tokens, " if kept else ""
    reason = (f"tokenizer.vocab_size={config.vocab_size:,} but the trainer stopped at {reached:,} tokens "
              f"({learned}{share:.0%}): the training sample has {len(words):,} distinct words "
              f"({occurrences:,} occurrences) and no pair left that occurs min_frequency={config.min_frequency} times")
    if share < config.min_vocab_fraction:
        raise LangadaptError(f"{reason}; lower tokenizer.vocab_size, add text, or set "
                             f"tokenizer.min_vocab_fraction below {config.min_vocab_fraction}")
    log.warning("%s; the run continues with %d tokens", reason, reached)


def count_words(
    config: TokenizerConfig, bp: Blueprint, texts: Iterable[tuple[str, str]], seed: int,
    num_workers: int | None = None,
) -> Counter[str]:
    """Language-weighted pre-token counts of the training sample."""
    helper = Tokenizer.from_str(json.dumps(_tokenizer_json(
        bp.normalizer, training_pre_tokenizer(bp), {"type": "BPE", "vocab": {}, "merges": []})))
    counter = ChunkCounter(helper.normalizer, helper.pre_tokenizer)
    bound = sample_bound(config.max_training_chars)
    counter.add_all(sample_documents(texts, config.language_weights, bound, seed), num_workers)
    if counter.documents == 0:
        which = (f"languages {sorted(config.language_weights)} (tokenizer.language_weights)"
                 if config.language_weights else "the target-role sources (data.sources[].role: target)")
        raise LangadaptError(f"tokenizer: no training text in {which}")
    return counter.word_counts(config.language_weights)


def _check_size(config: TokenizerConfig, bp: Blueprint) -> None:
    fixed = len(bp.specials)
    if config.vocab_size <= fixed:
        raise LangadaptError(f"tokenizer.vocab_size={config.vocab_size} is not larger than the {fixed} special tokens")
    if config.vocab_size <= fixed + 256:
        raise LangadaptError(
            f"tokenizer.vocab_size={config.vocab_size} is too small for {bp.family}: {fixed} special tokens "
            f"+ 256 byte tokens need at least {fixed + 257}")
    if bp.family == "unigram" and bp.roles["unk_token"] is None:
        raise LangadaptError("tokenizer.unk_token: kind unigram needs an unknown token among the special tokens")


def train_model(config: TokenizerConfig, bp: Blueprint, words: Counter[str]) -> dict:
    """Train the model on counted words; returns the trained model's JSON."""
    budget = config.vocab_size - len(bp.specials) - (256 if bp.byte_fallback else 0)
    if bp.family == "unigram":
        trainer: Any = trainers.UnigramTrainer(
            vocab_size=budget, show_progress=False, max_piece_length=config.max_token_length or 16,
            initial_alphabet=_alphabet(words, config.character_coverage))
        tokenizer = Tokenizer(models.Unigram())
    else:
        kwargs: dict[str, Any] = {"max_token_length": config.max_token_length}
        if bp.byte_fallback:  # rare characters become bytes, as SentencePiece's character_coverage
            kwargs["limit_alphabet"] = len(_alphabet(words, config.character_coverage))
        else:  # every byte is in the base alphabet, seen or not
            kwargs["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
        trainer = trainers.BpeTrainer(vocab_size=budget, min_frequency=config.min_frequency,
                                      show_progress=False, **kwargs)
        tokenizer = Tokenizer(models.BPE())
    separator = separator_for(words)
    tokenizer.pre_tokenizer = pre_tokenizers.CharDelimiterSplit(separator)  # faster than Split
    tokenizer.train_from_iterator(feed(words, separator), trainer=trainer)
    return json.loads(tokenizer.to_str())["model"]


def _alphabet(words: Counter[str], coverage: float) -> list[str]:
    """The most frequent characters that together cover `coverage` of all character occurrences."""
    chars: Counter[str] = Counter()
    for word, n in words.items():
        for char in word:
            chars[char] += n
    total, covered, kept = sum(chars.values()), 0, []
    for char, n in chars.most_common():
        if kept and covered >= coverage * total:
            break
        kept.append(char)
        covered += n
    return kept


def assemble(bp: Blueprint, trained: dict) -> PreTrainedTokenizerFast:
    """The trained model behind the inherited special tokens, in the inherited pipeline."""
    from transformers import PreTrainedTokenizerFast  # slow to import: only when a tokenizer is built

    specials = [entry["content"] for entry in bp.specials]
    fixed = specials + (BYTE_TOKENS if bp.byte_fallback else [])
    ids = {token: i for i, token in enumerate(fixed)}
    if bp.family == "unigram":
        pieces = [(p, s) for p, s in trained["vocab"] if p not in ids]
        floor = min((s for _, s in pieces), default=0.0) - 10.0  # bytes only where nothing else fits
        vocab = [[t, 0.0] for t in specials] + [[t, floor] for t in BYTE_TOKENS] + [list(p) for p in pieces]
        model = {"type": "Unigram", "unk_id": ids[bp.roles["unk_token"]], "vocab": vocab, "byte_fallback": True}
    else:
        learned = sorted(trained["vocab"].items(), key=lambda item: item[1])
        vocab = dict(ids)
        for token, _ in learned:
            vocab.setdefault(token, len(vocab))
        model = {**bp.model_flags, "type": "BPE", "vocab": vocab, "merges": trained["merges"],
                 "byte_fallback": bp.byte_fallback, "fuse_unk": bp.byte_fallback,
                 "unk_token": bp.roles["unk_token"] if bp.byte_fallback else bp.model_flags.get("unk_token")}
    added = [{**entry, "id": i} for i, entry in enumerate(bp.specials)]
    post = remap_post_processor(bp.post_processor, ids)
    data = _tokenizer_json(bp.normalizer, bp.pre_tokenizer, model, added, post, bp.decoder)
    roles = {role: token for role, token in bp.roles.items() if token is not None}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)),
                                   clean_up_tokenization_spaces=False, **roles, **bp.init_kwargs)


def _tokenizer_json(normalizer: dict | None, pre_tokenizer: dict | None, model: dict,
                    added: list[dict] | None = None, post: dict | None = None,
                    decoder: dict | None = None) -> dict:
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added or [],
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post,
            "decoder": decoder, "model": model}
