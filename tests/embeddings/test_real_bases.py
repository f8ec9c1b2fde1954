"""The method's contract on REAL vocabularies: Mistral SentencePiece (legacy and Metaspace),
Mistral-Nemo Tekken (plain and with tekken.json beside tokenizer.json), GPT-2 byte-level tied.

"A token in both vocabularies keeps its base row; every new token starts from the base
tokenizer's own pieces." The demo's base (a byte-level BPE this project trained) cannot show what
these break: byte-fallback pieces that spell the same byte as an ordinary piece, the dummy-prefix
`▁` of SentencePiece, 1,000 reserved specials, tied matrices, a Hub folder that AutoTokenizer
loads as `MistralCommonBackend`. Bases come from tests/helpers/real_bases.py (tiny random bodies;
the tokenizers are checked here against their reference implementations first).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from helpers.real_bases import BASES, build_base, reference_ids, reference_module

from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.embeddings.vocab import vocab_view
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.train import train_tokenizer

REPO = Path(__file__).resolve().parents[2]
NAMES = list(BASES)


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path):
    """name -> base model folder, built once per module on first use."""
    root, built = tmp_path_factory.mktemp("real_bases"), {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build_base(name, shared_dir, root / name)
        return built[name]

    return get


@pytest.fixture(scope="module")
def adapted_tokenizers(bases, shared_texts):
    """name -> (base tokenizer, new 4k tokenizer trained on Bokmål in the base's mould)."""
    texts = [("nb", t) for t in shared_texts("nb.debian-handbook.train")]
    made = {}

    def get(name: str):
        if name not in made:
            old = load_tokenizer(bases(name))
            config = TokenizerConfig(kind="inherit", vocab_size=4096, keep_specials="all")  # Tekken's 1,000 too
            made[name] = old, train_tokenizer(config, texts, old)
        return made[name]

    return get


@pytest.fixture(scope="module")
def sample_texts(shared_texts) -> list[str]:
    """Held-out nb and en documents, cut to 1,500 characters (all of their odd characters stay)."""
    return [t[:1500] for t in shared_texts("nb.debian-handbook.valid", 30) + shared_texts("en.debian-handbook.valid", 30)]


@pytest.mark.parametrize("name", NAMES)
def test_test_bases_encode_like_their_reference_tokenizer(name, bases, sample_texts, shared_dir):
    """The fixtures are what they claim: transformers' conversion gives the reference ids."""
    pytest.importorskip(reference_module(BASES[name]))
    tokenizer = load_tokenizer(bases(name))
    ours = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in sample_texts]
    assert ours == reference_ids(BASES[name], shared_dir, sample_texts)


def test_hub_layout_loads_as_a_fast_tokenizer(bases, tmp_path):
    """tekken.json beside tokenizer.json: AutoTokenizer's choice is not a `tokenizers` pipeline."""
    folder = bases("nemo-tekken-hub")
    if importlib.util.find_spec("mistral_common") is not None:
        from transformers import AutoTokenizer

        assert not hasattr(AutoTokenizer.from_pretrained(folder), "backend_tokenizer")  # the trap
    tokenizer = load_tokenizer(folder)
    assert len(tokenizer) == 131072 and tokenizer.bos_token_id == 1 and tokenizer.eos_token_id == 2
    assert tokenizer("Hei")["input_ids"][0] == 1  # the BOS of tokenizer.json's post-processor
    only_tekken = tmp_path / "tekken_only"
    only_tekken.mkdir()
    (only_tekken / "tekken.json").write_bytes((folder / "tekken.json").read_bytes())
    converted = load_tokenizer(only_tekken)
    text = "Hei, pakkebehandleren åpner /etc/apt 😀"
    assert converted(text, add_special_tokens=False)["input_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("name", NAMES)
def test_shared_tokens_keep_their_own_base_row(name, adapted_tokenizers):
    """Same token -> same old id: byte-fallback `<0x61>` keeps its own row, not `a`'s; specials by role."""
    old, new = adapted_tokenizers(name)
    mapping = build_mapping(old, new)
    old_view, new_view = vocab_view(old), vocab_view(new)
    old_ids = {(b, i in old_view.byte_fallback_ids): i for i, b in enumerate(old_view.token_bytes) if b is not None}
    checked = 0
    for i, b in enumerate(new_view.token_bytes):
        key = (b, i in new_view.byte_fallback_ids)
        if b is not None and key in old_ids:
            assert (mapping.status[i], mapping.pieces[i]) == ("copied", [old_ids[key]]), new_view.tokens[i]
            checked += 1
    assert checked > 1000
    if old_view.byte_fallback_ids:  # all 256 byte pieces, including the 95 printable ASCII ones
        fallback = sorted(new_view.byte_fallback_ids)
        assert len(fallback) == 256
        assert [old_view.tokens[mapping.pieces[i][0]] for i in fallback] == [new_view.tokens[i] for i in fallback]
    for role in ("bos", "eos", "unk", "pad"):
        new_id, old_id = getattr(new, f"{role}_token_id"), getattr(old, f"{role}_token_id")
        if new_id is not None and old_id is not None:
            assert mapping.pieces[new_id] == [old_id], role
    for i, content in new_view.specials.items():  # Tekken's reserved specials keep theirs by content
        assert old_view.specials.get(mapping.pieces[i][0]) == content or mapping.notes[i].startswith("role")
    assert mapping.summary()["fallback"] == 0


@pytest.mark.parametrize("name", NAMES)
def test_new_tokens_start_from_the_base_tokenizers_own_pieces(name, adapted_tokenizers):
    """A word-initial new token gets exactly the pieces the base tokenizer gives that word.

    SentencePiece bases encode a word with their dummy prefix (encode("pakke") -> `▁p`,`ak`,`ke`);
    byte-level bases encode " pakke". Every other decomposition spells the token's bytes exactly.
    """
    old, new = adapted_tokenizers(name)
    mapping = build_mapping(old, new)
    old_view, new_view = vocab_view(old), vocab_view(new)
    words = 0
    for i in mapping.ids_with("decomposed"):
        target = new_view.token_bytes[i]
        assert b"".join(old_view.token_bytes[p] for p in mapping.pieces[i]) == target
        text = target.decode("utf-8", errors="replace")
        if text[:1] == " " and text[1:].isalpha():
            surface = text[1:] if old_view.kind == "sentencepiece" else text
            assert mapping.pieces[i] == old(surface, add_special_tokens=False)["input_ids"], new_view.tokens[i]
            words += 1
    assert words > 500  # Tekken's new 4k vocabulary spends 1,000 ids on its reserved specials
    assert mapping.summary()["byte_segmented"] == 0


@pytest.mark.parametrize("name", ["mistral-sp-legacy", "mistral-sp-metaspace"])
def test_word_pieces_agree_with_sentencepiece(name, adapted_tokenizers, bases):
    """Checked against `sentencepiece` itself, not only against transformers' conversion of it."""
    spm = pytest.importorskip("sentencepiece")
    processor = spm.SentencePieceProcessor(model_file=str(bases(name) / "tokenizer.model"))
    old, new = adapted_tokenizers(name)
    mapping = build_mapping(old, new)
    new_view = vocab_view(new)
    words = [(i, new_view.token_bytes[i].decode()[1:]) for i in mapping.ids_with("decomposed")
             if new_view.token_bytes[i][:1] == b" " and new_view.token_bytes[i][1:].decode("utf-8", "replace").isalpha()]
    agree = sum(mapping.pieces[i] == processor.encode(word) for i, word in words)
    assert agree / len(words) > 0.995, f"{agree} of {len(words)}"


@pytest.mark.parametrize("name", NAMES)
def test_rows_copied_and_means_on_input_and_head_tied_stays_tied(name, adapted_tokenizers, bases):
    from transformers import AutoModelForCausalLM

    old, new = adapted_tokenizers(name)
    model = AutoModelForCausalLM.from_pretrained(bases(name), dtype=torch.float32)
    tied = model.config.tie_word_embeddings
    before_in = model.get_input_embeddings().weight.detach().clone()
    before_out = model.get_output_embeddings().weight.detach().clone()
    mapping = build_mapping(old, new)
    model, _ = transfer_embeddings(model, old, new, EmbeddingConfig(method="mean"), mapping=mapping)
    after_in, after_out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert (after_in.data_ptr() == after_out.data_ptr()) == tied and model.config.tie_word_embeddings == tied
    assert after_in.shape[0] >= len(new) and not torch.isnan(after_in).any() and not torch.isnan(after_out).any()
    for i in mapping.ids_with("copied") + mapping.ids_with("special"):
        (p,) = mapping.pieces[i]
        assert torch.equal(after_in[i], before_in[p]) and torch.equal(after_out[i], before_out[p])
    for i in mapping.ids_with("decomposed")[:500]:
        expected = before_in[mapping.pieces[i]].mean(0)
        assert torch.allclose(after_in[i], expected, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_new_tokenizer_round_trips_where_the_base_does(name, adapted_tokenizers, sample_texts):
    old, new = adapted_tokenizers(name)
    for text in sample_texts:
        if old.decode(old(text, add_special_tokens=False)["input_ids"]) == text:
            assert new.decode(new(text, add_special_tokens=False)["input_ids"]) == text
    assert [t.content for t in new.added_tokens_decoder.values()][:3] == [
        t.content for t in old.added_tokens_decoder.values()][:3]


def test_a_qwen2_config_does_not_replace_the_folders_pipeline(bases, tmp_path):
    """transformers 5 builds Qwen2Tokenizer's byte-level pipeline for any folder whose config.json
    says qwen2; a SentencePiece-style tokenizer.json beside it must still encode as written."""
    from tokenizers import Tokenizer

    folder = tmp_path / "qwen2_body_sp_tokenizer"
    folder.mkdir()
    source = bases("mistral-sp-metaspace")
    (folder / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}')
    (folder / "config.json").write_text('{"model_type": "qwen2", "vocab_size": 32000}')
    text = "Hei, pakken åpner æøå"
    expected = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    assert load_tokenizer(folder)(text, add_special_tokens=False)["input_ids"] == expected
