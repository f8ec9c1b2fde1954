"""train_tokenizer: round trips, inherited conventions, determinism, saving, errors, must-show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from langadapt.errors import LangadaptError
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.metrics import tokenizer_metrics
from langadapt.tokenizer.train import train_tokenizer

NORWEGIAN = [
    "Dette kapittelet tar opp igjen noen aspekter vi allerede har beskrevet, med et annet perspektiv.",
    "Blåbærsyltetøy på brødskiva er godt for både små og store. Ærlig talt, øl er også godt.",
    "Eg har ikkje sett nokon i dag; dei var på fjellet i helga og kom heim seint i går kveld.",
    "Systemadministratoren installerer pakkene med apt-get install og sjekker loggfilene etterpå.",
    "Vi lærer å gjøre det for hånd, slik at vi senere kan endre våre første valg i 2024 og 1999.",
]
CORPUS = [("nb" if i % 3 else "nn", f"{text} Avsnitt {i}.") for i in range(60) for text in NORWEGIAN]
TRICKY = [
    "Blåbærsyltetøy, ærfugl og Øystein på Åndalsnes.",
    "Emoji: 🙂🎉 ✨ og kinesisk 漢字, samisk ŋ đ ž.",
    "Mellomrom   i   rekke,\n\n\tfaner\tog linjeskift\r\nslutt  ",
    "Tall: 3.14159, 1 000 000 kr, 2024-05-17 kl. 07:30, 42%.",
]


@pytest.fixture(scope="module")
def base(tiny_en_llama: Path):
    return AutoTokenizer.from_pretrained(tiny_en_llama)


@pytest.fixture(scope="module")
def inherited(base):
    return train_tokenizer(TokenizerConfig(vocab_size=600), CORPUS, base, seed=0)


@pytest.fixture(scope="module")
def sentencepiece_base():
    """A Llama-2-style base: <unk> <s> </s>, ▁ + byte fallback, digits split, BOS inserted."""
    config = TokenizerConfig(kind="sentencepiece_bpe", vocab_size=500, split_digits=True,
                             special_tokens=["<unk>", "<s>", "</s>"])
    return train_tokenizer(config, CORPUS, None, seed=0)


def test_scratch_default_is_byte_level_bpe_with_bos(tmp_path: Path) -> None:
    tok = train_tokenizer(TokenizerConfig(kind="inherit", vocab_size=500), CORPUS, None)
    assert tok.convert_ids_to_tokens([0, 1, 2]) == ["<s>", "</s>", "<pad>"]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2)
    assert tok("Hei på deg").input_ids[0] == tok.bos_token_id
    assert json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]["type"] == "ByteLevel"
    for text in TRICKY:
        assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text


def test_inherit_round_trips_norwegian_text(inherited) -> None:
    for text in TRICKY + NORWEGIAN:
        ids = inherited(text).input_ids
        assert inherited.decode(ids, skip_special_tokens=True) == text


def test_inherit_keeps_special_tokens_at_their_ids_with_their_roles(base, inherited) -> None:
    base_added = {i: t.content for i, t in base.added_tokens_decoder.items()}
    new_added = {i: t.content for i, t in inherited.added_tokens_decoder.items()}
    assert new_added == base_added == {0: "<s>", 1: "</s>", 2: "<pad>"}
    for role in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(inherited, role) == getattr(base, role)
        assert getattr(inherited, role + "_id") == getattr(base, role + "_id")
    assert 259 < len(inherited) <= 600


def test_inherit_inserts_bos_exactly_like_the_base(base, inherited, sentencepiece_base) -> None:
    text = "Hei på deg"
    assert (base(text).input_ids[0] == base.bos_token_id) == (inherited(text).input_ids[0] == inherited.bos_token_id)
    assert sentencepiece_base(text).input_ids[0] == sentencepiece_base.bos_token_id == 1
    child = train_tokenizer(TokenizerConfig(vocab_size=520), CORPUS, sentencepiece_base)
    assert child(text).input_ids[0] == child.bos_token_id == 1
    assert child("a", "b").input_ids.count(1) == sentencepiece_base("a", "b").input_ids.count(1) == 2


def test_inherit_copies_the_pipeline_of_the_base(base, inherited, sentencepiece_base) -> None:
    for key in ("normalizer", "pre_tokenizer", "decoder"):
        assert json.loads(inherited.backend_tokenizer.to_str())[key] == json.loads(base.backend_tokenizer.to_str())[key]
    child = train_tokenizer(TokenizerConfig(vocab_size=520), CORPUS, sentencepiece_base)
    parent_json, child_json = (json.loads(t.backend_tokenizer.to_str()) for t in (sentencepiece_base, child))
    assert child_json["pre_tokenizer"] == parent_json["pre_tokenizer"]  # Metaspace + Digits
    assert child_json["model"]["byte_fallback"] is True
    assert child.convert_ids_to_tokens([0, 1, 2, 3, 258]) == ["<unk>", "<s>", "</s>", "<0x00>", "<0xFF>"]
    assert child.tokenize("2024") == ["▁", "2", "0", "2", "4"]  # digits split like the base


def test_sentencepiece_kind_falls_back_to_bytes_for_unseen_characters(sentencepiece_base) -> None:
    unseen = "Kinesisk 漢字 og 🙂 og ŋ"
    tokens = sentencepiece_base.tokenize(unseen)
    assert "<0xE6>" in tokens and "<0xF0>" in tokens  # 漢 and 🙂 as UTF-8 bytes
    assert sentencepiece_base.unk_token_id not in sentencepiece_base(unseen).input_ids
    assert sentencepiece_base.decode(sentencepiece_base(unseen).input_ids, skip_special_tokens=True) == unseen
    for text in TRICKY[:2] + NORWEGIAN:
        assert sentencepiece_base.decode(sentencepiece_base(text).input_ids, skip_special_tokens=True) == text


def test_unigram_kind_round_trips_with_byte_fallback() -> None:
    tok = train_tokenizer(TokenizerConfig(kind="unigram", vocab_size=400), CORPUS[:60], None)
    assert tok.unk_token == "<unk>" and tok.convert_ids_to_tokens(0) == "<unk>"
    for text in TRICKY[:2]:
        assert tok.decode(tok(text).input_ids, skip_special_tokens=True) == text


def test_same_seed_same_tokenizer_and_weights_change_it(base) -> None:
    def vocab(**kw):
        config = TokenizerConfig(vocab_size=450, max_training_chars=20_000, **kw)
        return train_tokenizer(config, CORPUS, base, seed=3).get_vocab()

    assert vocab() == vocab()
    assert vocab(language_weights={"nb": 1.0}) != vocab(language_weights={"nn": 1.0})


def test_saved_folder_loads_with_autotokenizer(inherited, tmp_path: Path) -> None:
    inherited.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = TRICKY[0]
    assert loaded(text).input_ids == inherited(text).input_ids
    assert (loaded.bos_token, loaded.eos_token, loaded.pad_token) == ("<s>", "</s>", "<pad>")
    assert loaded.decode(loaded(text).input_ids) == text


def test_chat_template_and_added_tokens_are_kept(base) -> None:
    base = AutoTokenizer.from_pretrained(base.name_or_path)
    base.chat_template = "{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"
    tok = train_tokenizer(TokenizerConfig(vocab_size=500, added_tokens=["<|code|>"]), CORPUS, base)
    assert tok.chat_template == base.chat_template
    assert tok.convert_ids_to_tokens(3) == "<|code|>"
    assert tok.tokenize("a <|code|> b").count("<|code|>") == 1


def test_too_small_vocab_is_one_clear_error(base) -> None:
    with pytest.raises(LangadaptError, match=r"tokenizer.vocab_size=200 is too small for byte_bpe: 3 special"):
        train_tokenizer(TokenizerConfig(vocab_size=200), CORPUS, base)
    with pytest.raises(LangadaptError, match="no training text"):
        train_tokenizer(TokenizerConfig(vocab_size=500, language_weights={"sv": 1.0}), CORPUS, base)


def test_bokmal_fertility_at_most_075_of_the_base(base, shared_texts) -> None:
    """Must-show: trained on nb+nn train text, Bokmål fertility <= 0.75x tiny-en-llama's (NorMistral: 0.68)."""
    texts = [("nb", t) for t in shared_texts("nb.debian-handbook.train")]
    texts += [("nn", t) for t in shared_texts("nn.gimp-help.train")]
    tok = train_tokenizer(TokenizerConfig(vocab_size=8000), texts, base)
    valid = shared_texts("nb.debian-handbook.valid")
    new, old = tokenizer_metrics(tok, valid), tokenizer_metrics(base, valid)
    ratio = new["fertility"] / old["fertility"]
    print(f"nb fertility: base {old['fertility']:.3f} -> new {new['fertility']:.3f} (ratio {ratio:.3f})")
    assert ratio <= 0.75
    assert new["bytes_per_token"] > old["bytes_per_token"]


def test_bpe_training_is_identical_across_processes() -> None:
    """Hash maps are seeded per process; the learned vocabulary and merges must not depend on that."""
    import subprocess
    import sys

    script = (
        "import json, sys; CORPUS = json.load(sys.stdin)\n"
        "from langadapt.recipe.tokenizer import TokenizerConfig\n"
        "from langadapt.tokenizer.families import blueprint\n"
        "from langadapt.tokenizer.train import count_words, train_model\n"
        "for kind in ('byte_bpe', 'sentencepiece_bpe'):\n"
        "    config = TokenizerConfig(kind=kind, vocab_size=700, max_training_chars=20000)\n"
        "    bp = blueprint(config, None)\n"
        "    print(json.dumps(train_model(config, bp, count_words(config, bp, CORPUS, 5))))\n"
    )
    repo = Path(__file__).resolve().parents[2]
    runs = [subprocess.run([sys.executable, "-c", script], cwd=repo, input=json.dumps(CORPUS), capture_output=True,
                           text=True, check=True) for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout) > 1000


def test_llama3_style_base_specials_move_to_low_ids_and_bos_follows() -> None:
    """A Llama-3-like base: regex Split + ByteLevel, specials after the vocabulary, BOS template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[], ignore_merges=True))
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+"), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])  # ids 256, 257
    backend.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 256)])
    base = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|begin_of_text|>",
                                   eos_token="<|end_of_text|>")
    tok = train_tokenizer(TokenizerConfig(vocab_size=700), CORPUS, base)
    assert tok.convert_ids_to_tokens([0, 1]) == ["<|begin_of_text|>", "<|end_of_text|>"]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, None)
    assert tok("Hei 12345").input_ids[0] == 0
    pieces = [p for p, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str("12345")]
    assert pieces == ["123", "45"]  # the base's regex (digits in threes) came along
    assert json.loads(tok.backend_tokenizer.to_str())["model"]["ignore_merges"] is True
    assert tok.decode(tok(TRICKY[1]).input_ids, skip_special_tokens=True) == TRICKY[1]


def test_a_vocabulary_the_corpus_cannot_fill_warns_then_fails_below_the_fraction(caplog) -> None:
    """A small sample runs out of merges: a shortfall is said with its reason, and a vocabulary below
    min_vocab_fraction of the size asked for stops the run instead of training a different model."""
    texts = [("nb", "hei på deg, dette er en liten tekst om pakker og kjerner " * 3)] * 20
    asked = 1000
    with caplog.at_level("WARNING", logger="langadapt.tokenizer"):
        small = train_tokenizer(TokenizerConfig(kind="byte_bpe", vocab_size=asked, min_vocab_fraction=0.0), texts, None)
    assert len(small) < asked
    assert f"stopped at {len(small):,} tokens" in caplog.text and "distinct words" in caplog.text
    with pytest.raises(LangadaptError, match=r"tokenizer.vocab_size=1,000 but the trainer stopped at .*min_vocab_fraction"):
        train_tokenizer(TokenizerConfig(kind="byte_bpe", vocab_size=asked), texts, None)
    exact = train_tokenizer(TokenizerConfig(kind="byte_bpe", vocab_size=len(small)), texts, None)
    assert len(exact) == len(small)  # asking for what the corpus gives: no warning, no error
