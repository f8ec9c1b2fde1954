"""tokenizer.kind=extend keeps a SentencePiece base's own trainer rules (issue 38).

Mistral-7B's tokenizer.model was trained with split_digits, split_by_unicode_script and
max_sentencepiece_length 16; its tokenizer.json does not say so. Without the rules, 8,192 Bokmål
tokens learned on nb.debian-handbook.train held 211 tokens of two or more digits (`00`, `▁10`,
`2.3.`), 2,194 that mix scripts (`en,`, `▁Debian-`) and 149 over 16 characters; with them none
(7,500 new tokens are then all the corpus yields). The rules are read from tokenizer.model
(`tokenizer.piece_rules`) and checked here against SentencePiece itself: the trainer's own pieces
always pass them, and the pieces it makes with a rule switched off are the ones they refuse.

Bases: Mistral-7B v0.1 in both Hub forms (legacy normaliser, Metaspace) and a v0.3-shaped
tokenizer.model. Mistral-7B v0.3's own file is not in ../shared: its tokenizer.model has the same
trainer flags and v0.1's pieces behind 768 control pieces (`[INST]`, ..., `[control_768]` at ids
3-770; 32,768 pieces), which is what the v0.3-shaped base is built as from v0.1's file, so v0.1's
pieces and rules stand for it with v0.3's ids.
"""

from __future__ import annotations

import io
import json
import logging
import re
import unicodedata
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.real_bases import BASES, build_tokenizer_folder

from langadapt.errors import LangadaptError
from langadapt.inputs.model_folder import tokenizer_id_count
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.extend import extension_problem, learn_merges, word_rules
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.piece_rules import (
    PieceRules,
    base_piece_rules,
    is_decimal_digit,
    read_sentencepiece_model,
)
from langadapt.tokenizer.train import count_words, train_tokenizer

MISTRAL_MODEL = "mistral-7b-v0.1.tokenizer.model"
NEW_TOKENS = 2000
V03_CONTROLS = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                "[/TOOL_RESULTS]"] + [f"[control_{n}]" for n in range(8, 769)]
DIGIT_TEXTS = ["2023", "2023,", "3.11.4", "Python 3.11.4 kom i 2023, Linux 2.6.32-5-amd64 før det."]


def letters_with_punctuation(token: str) -> bool:
    """A letter and a punctuation mark or symbol in one token (▁ aside): what split_by_unicode_script
    keeps apart on Bokmål text (letters are Latin, punctuation and symbols Common)."""
    kinds = {unicodedata.category(c)[0] for c in token if c != "\u2581"}
    return "L" in kinds and bool(kinds & {"P", "S"})


def fake_base(model_file: Path) -> SimpleNamespace:
    """What `base_piece_rules` reads of a loaded tokenizer: where its tokenizer.model is."""
    return SimpleNamespace(vocab_file=str(model_file), init_kwargs={}, name_or_path="")


# --- the rules, read and checked against SentencePiece --------------------------------------

def test_the_trainer_spec_is_read_as_sentencepiece_reads_it(shared_dir, tmp_path, caplog):
    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    path = shared_dir / "tokenizers" / MISTRAL_MODEL
    proto = pb.ModelProto()
    proto.ParseFromString(path.read_bytes())
    pieces, _ = read_sentencepiece_model(path.read_bytes())
    assert pieces == [p.piece for p in proto.pieces]

    vocab = {piece: i for i, piece in enumerate(pieces)}
    rules = base_piece_rules(fake_base(path), {"model": {"vocab": vocab}})
    spec = proto.trainer_spec
    assert (spec.split_digits, spec.split_by_unicode_script, spec.max_sentencepiece_length) == (True, True, 16)
    assert rules == PieceRules(
        max_length=spec.max_sentencepiece_length, split_digits=spec.split_digits,
        split_by_unicode_script=spec.split_by_unicode_script, split_by_number=spec.split_by_number,
        sentencepiece=True, split_by_whitespace=spec.split_by_whitespace,
        treat_whitespace_as_suffix=spec.treat_whitespace_as_suffix,
        allow_whitespace_only_pieces=spec.allow_whitespace_only_pieces, origin=str(path))
    # Every piece Mistral's trainer made passes (31,741 normal pieces; bytes and controls are not made by merging).
    normal = [p.piece for p in proto.pieces if p.type == pb.ModelProto.SentencePiece.NORMAL]
    assert len(normal) == 31741 and all(rules.allows(p) for p in normal)
    for refused in ("▁20", "00", "3.", "▁3", "en,", "(s", "'s", "▁Debian-", "er▁", "▁a▁b", "▁nettverksgrensesnitt"):
        assert not rules.allows(refused), refused
    for allowed in ("▁(", ".,", "),", "▁▁▁▁", "▁hei", "▁på", "e\u0301r", "▁бв"):
        assert rules.allows(allowed), allowed

    # A tokenizer.model of another vocabulary than the tokenizer.json's is not this base's: not applied.
    with caplog.at_level(logging.WARNING, logger="langadapt.tokenizer"):
        assert base_piece_rules(fake_base(path), {"model": {"vocab": {p: i + 1 for p, i in vocab.items()}}}) is None
    assert "is not the SentencePiece BPE of this tokenizer.json" in caplog.text
    broken = tmp_path / "tokenizer.model"
    broken.write_bytes(b"\xff\xff\xff")
    with pytest.raises(LangadaptError, match=r"^base_model\.path: .*tokenizer\.model is not a readable SentencePiece"):
        base_piece_rules(fake_base(broken), {"model": {"vocab": vocab}})


@pytest.mark.slow  # six SentencePiece trainings: ~4 s
def test_the_rules_are_sentencepiece_s_own(shared_texts, tmp_path):
    """SentencePiece's BPE trainer on Bokmål with Mistral's flags and with each rule switched off: the
    rules read from each model accept all of its pieces, and Mistral's refuse exactly the kind of
    piece the switched-off rule would have kept out."""
    spm = pytest.importorskip("sentencepiece")
    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    lines = [line for text in shared_texts("nb.debian-handbook.train") for line in text.split("\n") if line.strip()]
    mistral = {"split_digits": True, "split_by_unicode_script": True, "max_sentencepiece_length": 16,
               "allow_whitespace_only_pieces": True}
    variants = {"mistral": {}, "split_by_unicode_script": {"split_by_unicode_script": False},
                "split_digits": {"split_digits": False}, "split_by_number": {"split_digits": False,
                                                                             "split_by_number": False},
                "treat_whitespace_as_suffix": {"treat_whitespace_as_suffix": True},
                "max_sentencepiece_length": {"max_sentencepiece_length": 8}}
    refused_by_mistral: dict[str, list[str]] = {}
    for name, change in variants.items():
        out = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, model_type="bpe",
                                       vocab_size=4000, character_coverage=1.0, byte_fallback=True,
                                       minloglevel=2, num_threads=1, **{**mistral, **change})
        proto = pb.ModelProto()
        proto.ParseFromString(out.getvalue())
        pieces = [p.piece for p in proto.pieces if p.type == pb.ModelProto.SentencePiece.NORMAL]
        own = _rules_of(out.getvalue(), tmp_path / name)
        assert all(own.allows(p) for p in pieces), name
        if name == "mistral":
            mistral_rules = own
        refused_by_mistral[name] = [p for p in pieces if not mistral_rules.allows(p)]
    assert refused_by_mistral["mistral"] == [] and refused_by_mistral["max_sentencepiece_length"] == []
    assert any(letters_with_punctuation(p) for p in refused_by_mistral["split_by_unicode_script"])
    for name in ("split_digits", "split_by_number"):
        assert refused_by_mistral[name] and all(any(map(is_decimal_digit, p)) for p in refused_by_mistral[name])
    assert all(p.endswith("\u2581") for p in refused_by_mistral["treat_whitespace_as_suffix"][:50])


def _rules_of(data: bytes, folder: Path) -> PieceRules:
    """The rules `base_piece_rules` reads from a tokenizer.model with these bytes."""
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(data)
    pieces, _ = read_sentencepiece_model(data)
    vocab = {piece: i for i, piece in enumerate(pieces)}
    rules = base_piece_rules(fake_base(folder / "tokenizer.model"), {"model": {"vocab": vocab}})
    assert rules is not None
    return rules


# --- the extension on Mistral-7B ------------------------------------------------------------

def _v03_shaped(shared_dir: Path, root: Path) -> Path:
    """A base folder whose tokenizer.model is laid out as Mistral-7B v0.3's (see the module docstring)."""
    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    proto = pb.ModelProto()
    proto.ParseFromString((shared_dir / "tokenizers" / MISTRAL_MODEL).read_bytes())
    pieces = list(proto.pieces)
    del proto.pieces[:]
    proto.pieces.extend(pieces[:3])
    for name in V03_CONTROLS:
        proto.pieces.add(piece=name, score=0.0, type=pb.ModelProto.SentencePiece.CONTROL)
    proto.pieces.extend(pieces[3:])
    proto.trainer_spec.vocab_size = len(proto.pieces)
    (root / "tokenizers").mkdir(parents=True)
    (root / "tokenizers" / "v0.3.model").write_bytes(proto.SerializeToString())
    base = replace(BASES["mistral-sp-metaspace"], name="mistral-v0.3-shaped", tokenizer_file="v0.3.model")
    return build_tokenizer_folder(base, root, root / "mistral-v0.3-shaped")


@pytest.fixture(scope="module")
def mistral_folders(shared_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mistral")
    folders = {name: build_tokenizer_folder(BASES[name], shared_dir, root / name)
               for name in ("mistral-sp-legacy", "mistral-sp-metaspace")}
    folders["mistral-v0.3-shaped"] = _v03_shaped(shared_dir, root / "v0.3")
    return folders


@pytest.fixture(scope="module")
def corpus(shared_texts) -> dict[str, list[str]]:
    valid = [line for text in shared_texts("nb.debian-handbook.valid")
             for line in re.split(r"(?<=[.!?])\s+|\n+", text) if line.strip()]
    return {"train": shared_texts("nb.debian-handbook.train"), "valid": valid[:300]}


@pytest.mark.slow  # per base: one conversion + one extension, ~15 s
@pytest.mark.parametrize("name", ["mistral-sp-legacy", "mistral-sp-metaspace", "mistral-v0.3-shaped"])
def test_new_tokens_follow_the_base_trainer_rules(name, mistral_folders, corpus):
    base = load_tokenizer(mistral_folders[name])
    old = json.loads(base.backend_tokenizer.to_str())
    size = tokenizer_id_count(old)
    assert size == (32768 if name == "mistral-v0.3-shaped" else 32000)
    rules = base_piece_rules(base, old)
    assert rules is not None and rules.split_digits and rules.split_by_unicode_script and rules.max_length == 16

    extended = train_tokenizer(TokenizerConfig(kind="extend", vocab_size=size + NEW_TOKENS),
                               [("nb", t) for t in corpus["train"]], base)
    new = json.loads(extended.backend_tokenizer.to_str())
    added = [token for token, i in new["model"]["vocab"].items() if i >= size]
    assert len(added) == NEW_TOKENS
    assert all(rules.allows(token) for token in added)
    assert not [t for t in added if any(map(is_decimal_digit, t))]  # split_digits: no digit in a token of 2+
    assert not [t for t in added if letters_with_punctuation(t)]  # split_by_unicode_script
    assert max(map(len, added)) <= 16  # max_sentencepiece_length

    # The base stays exactly, and digits are split as the base splits them.
    assert all(new["model"]["vocab"][token] == i for token, i in old["model"]["vocab"].items())
    assert new["model"]["merges"][: len(old["model"]["merges"])] == old["model"]["merges"]
    assert new["added_tokens"] == old["added_tokens"]
    for text in DIGIT_TEXTS[:3]:
        assert extended.encode(text) == base.encode(text), text
    assert extended.convert_ids_to_tokens(extended.encode("2023", add_special_tokens=False)) == \
        ["\u2581", "2", "0", "2", "3"]
    digits = [t for t in extended.convert_ids_to_tokens(extended.encode(DIGIT_TEXTS[3], add_special_tokens=False))
              if any(map(is_decimal_digit, t))]
    assert digits and all(len(t) == 1 for t in digits), digits
    before = sum(len(base.encode(t)) for t in corpus["valid"])
    after = sum(len(extended.encode(t)) for t in corpus["valid"])
    assert after < 0.9 * before, (before, after)  # Bokmål still compresses (0.7-0.8x with +2,000)


@pytest.mark.slow  # one word count, two merge loops: ~10 s
def test_without_the_rules_the_same_words_give_tokens_the_base_never_has(mistral_folders, corpus):
    """Before issue 38: the same counted words, merged without the base's rules."""
    base = load_tokenizer(mistral_folders["mistral-sp-legacy"])
    old = json.loads(base.backend_tokenizer.to_str())
    config = TokenizerConfig(kind="extend", vocab_size=tokenizer_id_count(old) + NEW_TOKENS)
    words = count_words(config, word_rules(old), [("nb", t) for t in corpus["train"]], 0, 1)
    rules = base_piece_rules(base, old)
    learned = {}
    for label, allowed in (("without", None), ("with", rules.allows)):
        merges = learn_merges(old["model"], words, NEW_TOKENS, config.min_frequency, config.max_token_length, allowed)
        learned[label] = [a + b for a, b in merges]
    without = learned["without"]
    assert sum(sum(map(is_decimal_digit, t)) >= 2 for t in without) >= 10  # `00`, `▁10`, `2.3.`: 16 measured
    assert sum(letters_with_punctuation(t) for t in without) >= 100  # `en,`, `er.`, `▁Debian-`: 226 measured
    assert not [t for t in learned["with"] if not rules.allows(t)]


# --- tokenizer.split_digits beside kind extend ---------------------------------------------

SMALL = [("nb", "Versjon 2023 kom i 2023, og 2024 kom etter 2023. Systemet starter på nytt i 2023.")] * 40


def test_split_digits_is_accepted_beside_extend():
    assert TokenizerConfig(kind="extend", vocab_size=33000, split_digits=True).split_digits is True
    assert TokenizerConfig(kind="extend", vocab_size=33000, split_digits=False).split_digits is False


@pytest.mark.slow  # three small extensions, a GPT-2 conversion: ~25 s
def test_split_digits_restates_the_base_rule_and_never_reverses_it(mistral_folders, shared_dir, tmp_path):
    base = load_tokenizer(mistral_folders["mistral-sp-metaspace"])
    size = len(base)
    config = TokenizerConfig(kind="extend", vocab_size=size + 30, split_digits=True, min_vocab_fraction=0)
    assert not any(any(map(is_decimal_digit, t)) for t in _new_tokens(train_tokenizer(config, SMALL, base), size))
    with pytest.raises(LangadaptError) as refused:
        train_tokenizer(TokenizerConfig(kind="extend", vocab_size=size + 30, split_digits=False), SMALL, base)
    assert re.fullmatch(r"tokenizer\.split_digits: false reverses the base tokenizer's rule \(its SentencePiece "
                        r"trainer split digits \(.*tokenizer\.model\)\); kind extend keeps .*", str(refused.value))

    # GPT-2 joins digits (`2023`, `Ġ1`): true would reverse that; false restates it.
    gpt2 = load_tokenizer(build_tokenizer_folder(BASES["gpt2-tied"], shared_dir, tmp_path / "gpt2"))
    gpt2_json = json.loads(gpt2.backend_tokenizer.to_str())
    assert base_piece_rules(gpt2, gpt2_json) is None
    with pytest.raises(LangadaptError, match=r"^tokenizer\.split_digits: true reverses the base tokenizer's rule "
                                             r"\(its vocabulary has tokens that join a digit"):
        train_tokenizer(TokenizerConfig(kind="extend", vocab_size=len(gpt2) + 30, split_digits=True), SMALL, gpt2)
    assert extension_problem(gpt2_json, len(gpt2) + 30, split_digits=False) is None

    # Mistral's tokenizer.json alone: no trainer spec, so digits may merge unless the recipe says true.
    alone = tmp_path / "mistral-json-only"
    alone.mkdir()
    for file in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (alone / file).write_bytes((mistral_folders["mistral-sp-metaspace"] / file).read_bytes())
    plain = load_tokenizer(alone)
    assert base_piece_rules(plain, json.loads(plain.backend_tokenizer.to_str())) is None
    for split_digits, joined in ((None, True), (True, False)):
        config = TokenizerConfig(kind="extend", vocab_size=size + 30, split_digits=split_digits, min_vocab_fraction=0)
        tokens = _new_tokens(train_tokenizer(config, SMALL, plain), size)
        assert any(len(t) > 1 and any(map(is_decimal_digit, t)) for t in tokens) is joined, (split_digits, tokens)


def _new_tokens(tokenizer, size: int) -> list[str]:
    vocab = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["vocab"]
    return [token for token, i in vocab.items() if i >= size]
