"""tokenizer.kind=extend (continued BPE): the merge loop, the base's ids and merges kept, English
only coarsened, round trips, and the refusals. The real vocabularies are in
test_tokenizer_extend_real_bases.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers.extension import expander
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from langadapt.errors import LangadaptError
from langadapt.inputs.model_folder import tokenizer_id_count
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.extend import extended_json, extension_problem, learn_merges
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.saving import save_tokenizer
from langadapt.tokenizer.train import train_tokenizer


def bpe_model(vocab: list[str], merges: list[tuple[str, str]], **flags) -> dict:
    return {"type": "BPE", "vocab": {t: i for i, t in enumerate(vocab)}, "merges": [list(m) for m in merges],
            "unk_token": None, "byte_fallback": False, "ignore_merges": False, **flags}


def test_the_merge_loop_continues_from_the_bases_own_tokens():
    model = bpe_model(["a", "b", "c", "ab"], [("a", "b")])
    words = Counter({"abc": 5, "abcab": 2, "cc": 1})  # base: [ab c], [ab c ab], [c c]
    learned = learn_merges(model, words, budget=5, min_frequency=2)
    # (ab, c) 7 times first; then (abc, ab) twice; (c, c) once is below min_frequency.
    assert learned == [("ab", "c"), ("abc", "ab")]
    assert learn_merges(model, words, budget=1) == [("ab", "c")]
    assert learn_merges(model, words, budget=5, min_frequency=1) == [("ab", "c"), ("abc", "ab"), ("c", "c")]
    assert learn_merges(model, words, budget=5, min_frequency=1, max_length=3) == [("ab", "c"), ("c", "c")]


def test_byte_fallback_pieces_and_unknown_are_never_merged():
    pieces = [f"<0x{b:02X}>" for b in range(256)]
    model = bpe_model(["<unk>", *pieces, "▁", "h", "i"], [], byte_fallback=True, unk_token="<unk>")
    # "ä" is not in the vocabulary: it becomes <0xC3><0xA4>; those pairs are the most frequent,
    # never tokens. (▁, h) and (h, i) tie at 3: the pair that sorts first wins.
    learned = learn_merges(model, Counter({"▁ä": 50, "▁hi": 3}), budget=10)
    assert learned == [("h", "i"), ("▁", "hi")]


def test_extended_json_appends_after_every_base_id_and_merge():
    base = {"added_tokens": [{"id": 5, "content": "<|end|>"}],
            "model": bpe_model(["a", "b", "ab"], [("a", "b")])}
    assert tokenizer_id_count(base) == 6  # the added token beyond the model vocabulary counts
    data = extended_json(base, [("ab", "b"), ("abb", "a")])
    # The added token joins the model's vocabulary at its id, so no hole is left below the new ids.
    assert data["model"]["vocab"] == {"a": 0, "b": 1, "ab": 2, "<|end|>": 5, "abb": 6, "abba": 7}
    assert data["model"]["merges"] == [["a", "b"], ["ab", "b"], ["abb", "a"]]
    assert base["model"]["merges"] == [["a", "b"]]  # the base is not modified
    legacy = {**base, "model": {**base["model"], "merges": ["a b"]}}  # tokenizers < 0.20 spelling
    assert extended_json(legacy, [("ab", "b")])["model"]["merges"] == ["a b", "ab b"]


@pytest.fixture(scope="module")
def base(tiny_en_llama: Path):
    return load_tokenizer(tiny_en_llama)


@pytest.fixture(scope="module")
def extended(base, shared_texts):
    texts = [("nb", t) for t in shared_texts("nb.debian-handbook.train")]
    return train_tokenizer(TokenizerConfig(kind="extend", vocab_size=len(base) + 2048), texts, base)


def test_every_base_token_keeps_its_id_and_every_merge_its_rank(base, extended):
    old, new = (json.loads(t.backend_tokenizer.to_str()) for t in (base, extended))
    assert len(extended) == len(base) + 2048
    assert all(new["model"]["vocab"][token] == i for token, i in old["model"]["vocab"].items())
    assert new["model"]["merges"][: len(old["model"]["merges"])] == old["model"]["merges"]
    assert len(new["model"]["merges"]) == len(old["model"]["merges"]) + 2048
    assert new["added_tokens"] == old["added_tokens"]
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        assert new[part] == old[part], part
    assert (extended.bos_token_id, extended.eos_token_id) == (base.bos_token_id, base.eos_token_id)


def test_text_is_only_coarsened_and_round_trips(base, extended, shared_texts):
    expand = expander(json.loads(extended.backend_tokenizer.to_str()), len(base))
    texts = {lang: shared_texts(f"{lang}.debian-handbook.valid", limit=60) for lang in ("en", "nb")}
    counts = {}
    for lang, docs in texts.items():
        counts[lang] = [0, 0]
        for text in docs:
            old, new = base.encode(text), extended.encode(text)  # with BOS, as training sees it
            assert expand(new) == old
            assert extended.decode(new, skip_special_tokens=True) == text
            counts[lang][0] += len(old)
            counts[lang][1] += len(new)
    assert counts["en"][1] <= counts["en"][0]
    assert counts["nb"][1] < 0.7 * counts["nb"][0], counts  # measured 0.61 with +2,048 tokens


def test_an_extended_tokenizer_saves_and_loads_as_itself(extended, tmp_path):
    save_tokenizer(extended, tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    text = "Systemadministratoren installerer pakkene med apt-get og sjekker loggfilene."
    assert loaded(text)["input_ids"] == extended(text)["input_ids"]


def test_what_extension_refuses(base, tmp_path):
    texts = [("nb", "Dette er en setning på norsk.")] * 20
    with pytest.raises(LangadaptError, match=rf"vocab_size: {len(base):,} is not above the base's {len(base):,} ids"):
        train_tokenizer(TokenizerConfig(kind="extend", vocab_size=len(base)), texts, base)
    with pytest.raises(LangadaptError, match="needs a base model"):
        train_tokenizer(TokenizerConfig(kind="extend", vocab_size=len(base) + 900), texts, None)

    unigram = train_tokenizer(TokenizerConfig(kind="unigram", vocab_size=400), texts * 5, base)
    problem = extension_problem(json.loads(unigram.backend_tokenizer.to_str()), 9000)
    assert problem is not None and "model is Unigram" in problem
    with pytest.raises(LangadaptError, match="model is Unigram"):
        train_tokenizer(TokenizerConfig(kind="extend", vocab_size=len(base) + 900), texts, unigram)

    # A BPE without byte fallback and without an unknown token drops characters it lacks.
    ascii_only = Tokenizer(models.BPE())
    ascii_only.pre_tokenizer = pre_tokenizers.Whitespace()
    ascii_only.train_from_iterator(["plain ascii text only"] * 10, trainers.BpeTrainer(vocab_size=60,
                                                                                     show_progress=False))
    lacking = PreTrainedTokenizerFast(tokenizer_object=ascii_only)
    with pytest.raises(LangadaptError, match=r"cannot encode 'å' \(U\+00E5"):
        train_tokenizer(TokenizerConfig(kind="extend", vocab_size=200), [("nb", "på på på")] * 5, lacking)


# split_digits may restate the base's digit rule: checked against the base (test_tokenizer_extend_sp_rules.py)
@pytest.mark.parametrize("key, value", [("special_tokens", ["<s>"]), ("added_tokens", ["<tool>"])])
def test_settings_that_would_change_the_base_are_refused_with_extend(key, value):
    with pytest.raises(ValueError, match=f"{key} cannot be set with kind extend"):
        TokenizerConfig(kind="extend", vocab_size=9000, **{key: value})


def test_the_stage_names_where_an_unreachable_character_comes_from(tmp_path):
    """The one-line refusal points at the source and document, not at the tokenizer's internals."""
    from langadapt.data.documents import write_documents
    from langadapt.recipe.tokenizer import TokenizerSlice
    from langadapt.run.context import StageContext
    from langadapt.tokenizer.stage import run

    ascii_only = Tokenizer(models.BPE())
    ascii_only.pre_tokenizer = pre_tokenizers.Whitespace()
    ascii_only.train_from_iterator(["plain ascii text only, no more"] * 10,
                                   trainers.BpeTrainer(vocab_size=60, show_progress=False))
    save_tokenizer(PreTrainedTokenizerFast(tokenizer_object=ascii_only, eos_token="only"), tmp_path / "base")
    texts = {"train": ["plain text", "text only", "no more plain text å"], "valid": ["plain"]}
    for split, docs in texts.items():
        write_documents(tmp_path / "run" / "data" / split / "nb.src.jsonl.gz", (
            {"id": f"{split}-{i}", "text": t, "lang": "nb", "source": "nb.src", "role": "target"}
            for i, t in enumerate(docs)))
    ctx = StageContext(run_dir=tmp_path / "run", stage="tokenizer", seed=0, base_model=str(tmp_path / "base"))
    with pytest.raises(LangadaptError, match=r"cannot encode 'å'.*\(first seen in source nb\.src, document train-2 of "):
        run(TokenizerSlice(TokenizerConfig(kind="extend", vocab_size=90)), ctx)


def test_a_shortfall_is_measured_on_the_new_tokens(base):
    """28 new tokens of 900 asked is 3%, not 99% of the final size: refused below min_vocab_fraction."""
    texts = [("nb", "Dette er en setning på norsk, og enda en.")] * 20
    with pytest.raises(LangadaptError, match=r"stopped at [\d,]+ tokens \(\d+ of the 900 new tokens, \d+%\)"):
        train_tokenizer(TokenizerConfig(kind="extend", vocab_size=len(base) + 900), texts, base)
    few = train_tokenizer(TokenizerConfig(kind="extend", vocab_size=len(base) + 900, min_vocab_fraction=0.0), texts, base)
    assert len(base) < len(few) < len(base) + 450
