"""tokenizer.keep_specials: a replacement vocabulary keeps the base's USED special tokens, not its placeholders.

The base is Llama-3-shaped (tests/helpers/special_bases.py): a small byte-level BPE whose vocabulary
ends with Llama-3's 256 specials, a BOS-prepending post-processor and Llama-3's chat template.
`used` keeps the five it names (BOS, EOS, two header markers, <|eot_id|>), `all` the 256; both at
ids 0.. in base order, and embedding transfer gives each kept special its base row.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from helpers.special_bases import BOS, EOS, EOT, HEADER, LLAMA3_SPECIALS, USED, write_llama3_style_base
from pydantic import ValidationError
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from langadapt.data.documents import write_documents
from langadapt.embeddings import EmbeddingConfig, transfer_embeddings
from langadapt.recipe.tokenizer import TokenizerConfig, TokenizerSlice
from langadapt.run.context import StageContext
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.specials import specials_report
from langadapt.tokenizer.stage import run
from langadapt.tokenizer.summary import specials_note
from langadapt.tokenizer.train import train_tokenizer

TEXTS = [
    "Systemadministratoren installerer pakkene med apt-get install og sjekker loggfilene etterpå.",
    "Blåbærsyltetøy på brødskiva er godt for både små og store. Ærlig talt, øl er også godt.",
    "Eg har ikkje sett nokon i dag; dei var på fjellet i helga og kom heim seint i går kveld.",
    "The administrator installs the packages and checks the log files afterwards, as usual.",
]
SYLLABLES = ("ka", "rø", "sel", "ti", "mø", "bla", "ven", "dur", "ås", "kje")
WORDS = [a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES]
"""1,000 made-up words: enough distinct pairs to fill the vocabulary with either setting."""
CORPUS = [("nb", f"{text} {' '.join(WORDS[i::20])}.") for i in range(20) for text in TEXTS * 3]
MESSAGES = [{"role": "user", "content": "Hei, hvordan går det?"}, {"role": "assistant", "content": "Bra, takk."}]


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Llama-3-style base: 300 byte-level BPE tokens, then the 256 specials (ids 300..555)."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([t for _, t in CORPUS], trainers.BpeTrainer(
        vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return write_llama3_style_base(json.loads(bpe.to_str()), tmp_path_factory.mktemp("llama3") / "base")


@pytest.fixture(scope="module")
def base(base_folder: Path):
    return load_tokenizer(base_folder)


@pytest.fixture(scope="module")
def new(base):
    """The replacement tokenizer with each setting."""
    return {keep: train_tokenizer(TokenizerConfig(vocab_size=700, keep_specials=keep), CORPUS, base)
            for keep in ("used", "all")}


def specials_of(tokenizer) -> list[str]:
    return [t.content for _, t in sorted(tokenizer.added_tokens_decoder.items())]


def test_base_is_llama3_shaped(base) -> None:
    assert len(base) == 300 + 256
    assert base.convert_tokens_to_ids([BOS, EOS, EOT]) == [300, 301, 309]
    assert base("Hei").input_ids[0] == base.bos_token_id


def test_used_keeps_roles_and_chat_markers_and_drops_the_reserved(new) -> None:
    tok = new["used"]
    assert specials_of(tok) == list(USED)  # base order: BOS, EOS, header markers, <|eot_id|>
    assert tok.convert_tokens_to_ids(list(USED)) == [0, 1, 2, 3, 4]
    assert (tok.bos_token_id, tok.eos_token_id) == (0, 1)
    assert not any("reserved" in t for t in tok.get_vocab())
    assert len(tok) == 700  # the 251 freed ids went to the language's own tokens


def test_all_keeps_every_special_at_ids_0_in_base_order(new) -> None:
    tok = new["all"]
    assert specials_of(tok) == LLAMA3_SPECIALS
    assert tok.convert_tokens_to_ids(LLAMA3_SPECIALS) == list(range(256))
    assert len(tok) == 700


def test_used_gives_the_language_more_tokens(new) -> None:
    text = " ".join(TEXTS)
    used, every = (len(new[k](text, add_special_tokens=False).input_ids) for k in ("used", "all"))
    assert used <= every
    learned = {k: len(new[k]) - len(specials_of(new[k])) for k in new}
    assert learned["used"] - learned["all"] == 251


@pytest.mark.parametrize("keep", ["used", "all"])
def test_round_trip_and_bos_from_the_post_processor(new, keep: str) -> None:
    tok = new[keep]
    for text in TEXTS + ["Tall: 3.14, emoji 🙂 og  to  mellomrom\n"]:
        ids = tok(text).input_ids
        assert ids[0] == tok.convert_tokens_to_ids(BOS) == 0
        assert tok.decode(ids[1:]) == text
        assert tok.decode(ids, skip_special_tokens=True) == text


@pytest.mark.parametrize("keep", ["used", "all"])
def test_chat_template_tokens_stay_single_ids(new, keep: str) -> None:
    tok = new[keep]
    ids = tok.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True, return_dict=False)
    markers = tok.convert_tokens_to_ids([*HEADER, EOT])
    assert ids.count(markers[0]) == 3 and ids.count(markers[1]) == 3 and ids.count(markers[2]) == 2
    assert ids[0] == 0  # bos_token in the template
    assert "Hei, hvordan går det?" in tok.decode(ids)


def test_a_reserved_token_the_recipe_names_is_kept_in_base_order(base) -> None:
    reserved = "<|reserved_special_token_7|>"
    tok = train_tokenizer(TokenizerConfig(vocab_size=700, added_tokens=[reserved]), CORPUS, base)
    assert specials_of(tok) == [BOS, EOS, *HEADER, EOT, reserved]
    assert tok.convert_tokens_to_ids(reserved) == 5 and tok.added_tokens_decoder[5].special  # as the base has it


def test_a_declared_extra_special_is_kept(base, tmp_path: Path) -> None:
    folder = tmp_path / "declared"
    base.save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["extra_special_tokens"] = ["<|reserved_special_token_100|>"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tok = train_tokenizer(TokenizerConfig(vocab_size=700), CORPUS, load_tokenizer(folder))
    assert "<|reserved_special_token_100|>" in specials_of(tok)
    assert len(specials_of(tok)) == 6


def test_the_report_counts_kept_and_dropped(base, new) -> None:
    report = specials_report(TokenizerConfig(vocab_size=700), base, new["used"])
    assert (report["base"], report["kept"], report["dropped"]) == (256, 5, 251)
    assert report["dropped_examples"][0] == "<|reserved_special_token_0|>"
    assert report["decided_by"] == "keep_specials used"
    note = specials_note({"specials": report})
    assert "keeps 5 of the base's 256" in note and "dropped 251" in note and "keep_specials=all" in note
    every = specials_report(TokenizerConfig(vocab_size=700, keep_specials="all"), base, new["all"])
    assert every["dropped"] == 0 and specials_note({"specials": every}) is None
    listed = TokenizerConfig(vocab_size=700, special_tokens=[BOS, EOS])
    report = specials_report(listed, base, train_tokenizer(listed, CORPUS, base))
    assert report["dropped"] == 254 and "special_tokens does not list" in specials_note({"specials": report})


def test_stage_summary_metrics_and_console_say_what_was_dropped(base_folder: Path, tmp_path: Path, caplog) -> None:
    data = tmp_path / "run" / "data"
    for split, texts in (("train", [t for _, t in CORPUS]), ("valid", TEXTS)):
        write_documents(data / split / "nb.src.jsonl.gz", (
            {"id": f"{split}-{i}", "text": t, "lang": "nb", "source": "nb.src", "role": "target"}
            for i, t in enumerate(texts)))
    (tmp_path / "run" / "tokenizer").mkdir()
    ctx = StageContext(run_dir=tmp_path / "run", stage="tokenizer", seed=0, base_model=str(base_folder))
    with caplog.at_level(logging.INFO, logger="langadapt"):
        summary = run(TokenizerSlice(TokenizerConfig(vocab_size=700)), ctx)
    assert (summary["specials"]["kept"], summary["specials"]["dropped"]) == (5, 251)
    assert json.loads(ctx.layout.tokenizer.metrics.read_text())["specials"] == summary["specials"]
    assert "keeps 5 of the base's 256 special tokens and dropped 251" in caplog.text


def test_setting_contradicting_kept_base_ids_is_refused() -> None:
    for kind in ("extend", "keep_base"):
        with pytest.raises(ValidationError, match=f"keep_specials=used cannot be set with kind {kind}"):
            TokenizerConfig(kind=kind, keep_specials="used")
        assert TokenizerConfig(kind=kind, keep_specials="all").kind == kind  # what they do anyway
        assert TokenizerConfig(kind=kind).keep_specials == "used"  # the default is not a contradiction


def test_default_is_left_out_of_the_dumped_recipe() -> None:
    """Earlier recipes dump (and fingerprint) as before; `all` written out is part of the fingerprint."""
    assert "keep_specials" not in TokenizerConfig().model_dump()
    assert TokenizerConfig(keep_specials="all").model_dump()["keep_specials"] == "all"


def test_embedding_transfer_gives_a_kept_special_its_base_row(base, new) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(base), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         tie_word_embeddings=False))
    old_in = model.get_input_embeddings().weight.detach().clone()
    old_out = model.get_output_embeddings().weight.detach().clone()
    tok = new["used"]
    model, report = transfer_embeddings(model, base, tok, EmbeddingConfig(), seed=0)
    new_in, new_out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    for token in USED:
        old_id, new_id = base.convert_tokens_to_ids(token), tok.convert_tokens_to_ids(token)
        assert torch.equal(new_in[new_id], old_in[old_id]), token
        assert torch.equal(new_out[new_id], old_out[old_id]), token
    assert report["mapping"]["special"] == 5
