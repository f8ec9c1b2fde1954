"""Shard encoding's fast paths give exactly the ids of `tokenizers` (what the run's tokenizer is).

The GPT-2 path cuts texts where the regex's `\\s+(?!\\S)` lookahead decides and encodes the parts
without it (encoders.lookahead_cuts): checked here against the full regex on random
whitespace-heavy strings, against `tokenizers` on odd text for a tokenizer trained here, the demo's
and the real ones in ../shared/tokenizers (GPT-2, Mistral-7B's SentencePiece byte fallback,
Mistral-Nemo's Tekken), and through the shard writer's batches.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
import regex
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from langadapt.data.encoders import (
    GPT2_PATTERN,
    WHITE_SPACE,
    EncoderSpec,
    TextEncoder,
    choose_encoder,
    lookahead_cuts,
)
from langadapt.data.shards import Encoder

ODD = [
    "",
    " ",
    "a",
    "Emoji 🙂👍🏽 🇳🇴  🙂\n\n🙂",
    "NUL\x00in\x00 the\x00\x00 middle \x00",
    "CRLF\r\nlines\r\n\r\nand\r\n",
    "run" + " " * 5000 + "of spaces" + " " * 3000,
    "\n" * 2000 + "newlines first",
    "digits 1234567890 3.14159 1,000,000 ²³ ½ ٣٤٥ 四五",
    "mixed: Blåbær Ørret 漢字 русский текст עברית العربية हिन्दी ελληνικά",
    "odd spaces\u2000\u2000a\u3000\u3000b\x85\x85c\xa0\xa0d\u1680\u1680e\u2028\u2029f\u202f\u205f g",
    "not spaces\x1c\x1d\x1e\x1f a\u200b\u200bb\ufeffc",
    "tabs\t\tword \t word\t 'll  's\n 've \n\n're x'd",
    "  'sx and z\n 'll and   !!! punct?!  ...  «sitat»",
    "trailing   ",
    "\t",
    "special <s> in  the </s>\n\ntext<pad>  ",
]
"""Odd text: emoji, NUL, CRLF, long whitespace runs, digits, mixed scripts, every kind of White_Space
and characters Python's `\\s` takes but the tokenizers' `\\s` does not, contractions after runs,
special tokens' strings (these take tiktoken's own path)."""
SHARED_TOKENIZERS = ["gpt2-tied", "nemo-tekken", "mistral-sp-legacy", "mistral-sp-metaspace"]


def _hf_ids(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    """The reference: ids as the run's tokenizer gives them, one text at a time, no specials added."""
    return [tokenizer.encode(text, add_special_tokens=False).ids for text in texts]


def _assert_same(spec: EncoderSpec, tokenizer: Tokenizer, texts: list[str]) -> None:
    got = TextEncoder(spec).arrays(texts)
    for text, ids, want in zip(texts, got, _hf_ids(tokenizer, texts)):
        assert ids.dtype == np.uint32
        assert ids.tolist() == want, f"differs on {text[:60]!r}"


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    """A small GPT-2-style byte-level BPE trained here (needs no ../shared)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(ODD * 20 + _random_texts(200, seed=1), trainer)
    return tokenizer


def _random_texts(n: int, seed: int) -> list[str]:
    """Short strings over an alphabet dense in whitespace of every kind, letters, digits, quotes."""
    alphabet = list("aéZ1٣'s!.- \n\t\r") + [" ", " ", "\u3000", "\x85", "\xa0", "\x1c", "\u2028", "🙂", "漢"]
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def test_cuts_make_the_lookahead_free_split_equal_gpt2s() -> None:
    """Split at the cuts, each part split without `\\s+(?!\\S)` == the whole text split with it."""
    white, non_white = f"[{WHITE_SPACE}]", f"[^{WHITE_SPACE}]"
    full = regex.compile(GPT2_PATTERN.replace(r"\S", non_white).replace(r"\s", white))
    plain = regex.compile(GPT2_PATTERN.replace(r"|\s+(?!\S)", "").replace(r"\s", white))
    for text in _random_texts(3000, seed=0) + ODD:
        bounds = [0, *lookahead_cuts(text), len(text)]
        pieces = [p for a, b in zip(bounds, bounds[1:]) for p in plain.findall(text[a:b])]
        assert pieces == full.findall(text), repr(text)
    assert lookahead_cuts("a  b\n\nc \n d   ") == [2, 5, 9]  # before each run's last character, not at the end


def test_white_space_is_what_tokenizers_calls_whitespace() -> None:
    """Every code point: `WHITE_SPACE` matches exactly what the `\\s` of tokenizers' regex removes."""
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    split = pre_tokenizers.Split(Regex(r"\s"), behavior="removed")
    kept = set("".join(piece for piece, _ in split.pre_tokenize_str(text)))
    assert set(text) - kept == set(re.findall(f"[{WHITE_SPACE}]", text))


def test_gpt2_path_equals_tokenizers_on_odd_text(bpe: Tokenizer) -> None:
    spec, why = choose_encoder(bpe.to_str(), ODD[:3])
    assert spec.backend == "tiktoken", why
    _assert_same(spec, bpe, ODD + _random_texts(500, seed=2))


def test_batches_carry_every_document_then_eos(bpe: Tokenizer) -> None:
    """The shard writer's batch: each document's ids then EOS, in order, in the shard's dtype."""
    spec, _ = choose_encoder(bpe.to_str(), ODD[:3])
    texts = ODD + _random_texts(50, seed=3)
    want = _hf_ids(bpe, texts)
    for dtype in ("uint16", "uint32"):
        with Encoder(spec, 1, np.dtype(dtype), eos_id=1) as encoder:
            [(flat, lengths, _, _)] = list(encoder.encode(iter([(texts, {})])))
        assert flat.dtype == np.dtype(dtype)
        assert lengths.tolist() == [len(ids) + 1 for ids in want]
        assert flat.tolist() == [i for ids in want for i in (*ids, 1)]


def test_demo_tokenizer(tiny_en_llama: Path, shared_texts) -> None:
    tokenizer = Tokenizer.from_file(str(tiny_en_llama / "tokenizer.json"))
    texts = ODD + shared_texts("nb.debian-handbook.valid", limit=200)
    spec, why = choose_encoder(tokenizer.to_str(), texts[-20:])
    assert spec.backend == "tiktoken", why
    _assert_same(spec, tokenizer, texts)


@pytest.mark.parametrize("name", SHARED_TOKENIZERS)
def test_real_tokenizers(name: str, shared_dir: Path, shared_texts, tmp_path: Path) -> None:
    """Whichever encoder `choose_encoder` picks for a real vocabulary gives the ids tokenizers gives."""
    pytest.importorskip("transformers")
    from helpers.real_bases import BASES, build_tokenizer_folder

    if not (shared_dir / "tokenizers" / BASES[name].tokenizer_file).is_file():
        pytest.skip(f"../shared/tokenizers/{BASES[name].tokenizer_file} missing")
    folder = build_tokenizer_folder(BASES[name], shared_dir, tmp_path / name)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    texts = ODD + shared_texts("nb.debian-handbook.valid", limit=100)
    spec, why = choose_encoder(tokenizer.to_str(), texts[-20:])
    if name == "gpt2-tied":
        assert spec.backend == "tiktoken", why  # tiktoken's spelling of GPT-2's regex takes the cut path
    _assert_same(spec, tokenizer, texts)
