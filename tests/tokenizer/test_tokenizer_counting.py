"""Word counting and sampling: exact counts, the same merges as direct training, bounded samples."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

from langadapt.tokenizer.counting import ChunkCounter, feed, separator_for, weighted_counts
from langadapt.tokenizer.sample import sample_documents

TEXTS = [
    "Dette kapittelet tar opp igjen noen aspekter, med et annet perspektiv: I stedet for å installere.",
    "Blåbærsyltetøy (og øl) er godt! «Sitat» – tankestrek; 3.14 og 2024-05-17 kl. 07:30.",
    "Mellomrom   i   rekke,\n\n\tfaner\tog linjeskift\r\nslutt  ",
    "  innrykket kode:\n    def f(x):\n        return x * 2  # kommentar\n",
    "Emoji 🙂🎉 og 漢字; it's we'll they've I'm 'sitert' \"dobbelt\" x.y.z a,b,c",
] * 3
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {
    "gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False),
    "gpt2_prefix": pre_tokenizers.ByteLevel(add_prefix_space=True),
    "llama3": pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
    "metaspace": pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True),
    "metaspace_digits": pre_tokenizers.Sequence([pre_tokenizers.Metaspace(prepend_scheme="always"),
                                                 pre_tokenizers.Digits(individual_digits=True)]),
}


@pytest.mark.parametrize("name", sorted(PRE_TOKENIZERS))
def test_chunked_counts_equal_whole_document_counts(name: str) -> None:
    pre = PRE_TOKENIZERS[name]
    counter = ChunkCounter(None, pre)
    for text in TEXTS:
        counter.add("nb", text)
    expected = Counter(w for text in TEXTS for w, _ in pre.pre_tokenize_str(text))
    assert counter.chunking, "chunking should be transparent for this pre-tokenizer"
    assert counter.word_counts() == expected


def test_a_pre_tokenizer_that_sees_across_spaces_switches_chunking_off() -> None:
    pre = pre_tokenizers.Split(Regex(r"\w+ \w+|\S+|\s+"), behavior="isolated")  # pairs of words
    counter = ChunkCounter(None, pre)
    for text in TEXTS:
        counter.add("nb", text)
    assert not counter.chunking
    assert counter.word_counts() == Counter(w for t in TEXTS for w, _ in pre.pre_tokenize_str(t))


def test_training_on_counts_gives_the_same_merges_as_training_on_text(shared_texts) -> None:
    texts = shared_texts("nb.debian-handbook.train", limit=40)
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False)

    def trained(iterator, pre_tokenizer) -> dict:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizer
        trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(iterator, trainer=trainer)
        return json.loads(tok.to_str())["model"]

    counter = ChunkCounter(None, pre)
    for text in texts:
        counter.add("nb", text)
    words = counter.word_counts()
    separator = separator_for(words)
    ours = trained(feed(words, separator, batch_chars=10_000), pre_tokenizers.Split(separator, "removed"))
    direct = trained(texts, pre)
    assert ours["merges"] == direct["merges"] and ours["vocab"] == direct["vocab"]


def test_weights_set_each_languages_share_of_characters() -> None:
    words = {"nb": Counter({"a": 100}), "nn": Counter({"b": 10})}
    chars = Counter({"nb": 100, "nn": 10})
    assert weighted_counts(words, chars, None) == Counter({"a": 100, "b": 10})
    even = weighted_counts(words, chars, {"nb": 1.0, "nn": 1.0})
    assert even == Counter({"a": 55, "b": 55})  # total kept, split evenly
    only_nn = weighted_counts(words, chars, {"nn": 1.0, "en": 5.0})  # en absent: ignored
    assert only_nn == Counter({"b": 10})


DOCS = [("nb", f"bokmål dokument nummer {i} " * (1 + i % 7)) for i in range(200)]
DOCS += [("nn", f"nynorsk dokument nummer {i} " * (1 + i % 5)) for i in range(100)]
DOCS += [("en", f"english document number {i} " * 3) for i in range(100)]


def _chars(sample) -> Counter:
    counts: Counter = Counter()
    for lang, text in sample:
        counts[lang] += len(text)
    return counts


def test_sample_is_bounded_split_by_weight_and_seeded() -> None:
    sample = list(sample_documents(DOCS, {"nb": 3.0, "nn": 1.0}, 8000, seed=1))
    chars = _chars(sample)
    assert sum(chars.values()) <= 8000 and "en" not in chars
    assert chars["nb"] <= 6000 and chars["nn"] <= 2000 and chars["nb"] > 5000 and chars["nn"] > 1500
    assert sample == list(sample_documents(DOCS, {"nb": 3.0, "nn": 1.0}, 8000, seed=1))
    assert sample != list(sample_documents(DOCS, {"nb": 3.0, "nn": 1.0}, 8000, seed=2))
    other = _chars(sample_documents(DOCS, {"nb": 1.0, "nn": 3.0}, 8000, seed=1))
    assert other["nn"] > other["nb"]


def test_unbounded_sample_streams_every_wanted_document() -> None:
    assert list(sample_documents(iter(DOCS), None, None, seed=0)) == DOCS
    only_nn = list(sample_documents(iter(DOCS), {"nn": 1.0}, None, seed=0))
    assert len(only_nn) == 100 and {lang for lang, _ in only_nn} == {"nn"}
    bounded = list(sample_documents(iter(DOCS), None, 3000, seed=0))
    assert sum(len(t) for _, t in bounded) <= 3000 and len({lang for lang, _ in bounded}) == 3
