"""focus, wechsel and align plans, sparsemax, and the embeddings config."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from test_embeddings_support import EN_TEXT, NB_TEXT, byte_level_tokenizer, tiny_model
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.embeddings.align import overlap_pairs
from langadapt.embeddings.focus import sparsemax
from langadapt.embeddings.methods import PlanInputs, build_plan
from langadapt.errors import LangadaptError


@pytest.fixture(scope="module")
def toks():
    return byte_level_tokenizer(EN_TEXT), byte_level_tokenizer(NB_TEXT)


def _plan(old, new, config, corpus=None):
    mapping = build_mapping(old, new)
    inputs = PlanInputs(mapping, len(new), len(old), old, new, config, corpus, seed=0)
    plan, info = build_plan(inputs)
    return mapping, plan.weights.to_dense(), plan, info


def test_sparsemax_closed_form():
    out = sparsemax(torch.tensor([[1.0, 0.5, -1.0], [0.0, 0.0, 0.0], [5.0, 0.0, 0.0]]))
    assert torch.allclose(out, torch.tensor([[0.75, 0.25, 0.0], [1 / 3, 1 / 3, 1 / 3], [1.0, 0.0, 0.0]]))


FOCUS = {
    "method": "focus",
    "fasttext_dim": 16,
    "fasttext_epochs": 2,
    "fasttext_min_count": 3,
    "fasttext_workers": 1,
}


def test_focus_copies_overlap_and_combines_overlap_rows_for_the_rest(toks):
    old, new = toks
    config = EmbeddingConfig(**FOCUS)
    mapping, weights, _, info = _plan(old, new, config, corpus=NB_TEXT)
    copied, decomposed = mapping.ids_with("copied"), mapping.ids_with("decomposed")
    overlap_old = {mapping.pieces[i][0] for i in copied}
    focus_rows = [
        i for i in decomposed if set(weights[i].nonzero().flatten().tolist()) - set(mapping.pieces[i])
    ]
    assert info["focus"]["focus_rows"] > 10 and info["focus"]["rare_rows"] > 0
    for i in focus_rows:  # convex combinations of overlapping tokens' old rows only
        cols = weights[i].nonzero().flatten().tolist()
        assert set(cols) <= overlap_old
        assert weights[i].sum().item() == pytest.approx(1.0, abs=1e-5) and (weights[i] >= 0).all()

    model = tiny_model("llama", len(old), tied=False)
    old_in = model.get_input_embeddings().weight.detach().clone()
    old_head = model.get_output_embeddings().weight.detach().clone()
    model, report = transfer_embeddings(model, old, new, config, corpus=NB_TEXT)
    new_in, new_head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    for i in copied:  # overlapping tokens copied exactly, in the input matrix and the head
        assert torch.equal(new_in[i], old_in[mapping.pieces[i][0]])
        assert torch.equal(new_head[i], old_head[mapping.pieces[i][0]])
    assert torch.allclose(new_head[focus_rows], weights[focus_rows] @ old_head, atol=1e-5)
    rare = [i for i in decomposed if i not in focus_rows]  # FVT mean for tokens without a vector
    assert torch.allclose(new_in[rare[0]], old_in[mapping.pieces[rare[0]]].mean(0), atol=1e-6)
    assert report["focus"]["fasttext_epochs_run"] == 2


def test_focus_is_deterministic_and_bounded_in_time(toks):
    old, new = toks
    _, w1, _, _ = _plan(old, new, EmbeddingConfig(**FOCUS), corpus=NB_TEXT)
    _, w2, _, _ = _plan(old, new, EmbeddingConfig(**FOCUS), corpus=NB_TEXT)
    assert torch.equal(w1, w2)
    quick = EmbeddingConfig(**{**FOCUS, "fasttext_epochs": 50, "fasttext_time_budget_s": 1e-3})
    mapping, weights, _, info = _plan(old, new, quick, corpus=NB_TEXT)
    assert info["focus"]["fasttext_epochs_run"] == 0 and info["focus"]["focus_rows"] == 0
    i = mapping.ids_with("decomposed")[0]  # no time for fastText: FVT means, not noise
    assert torch.allclose(weights[i][mapping.pieces[i]].sum(), torch.tensor(1.0))


def test_corpus_methods_need_a_corpus(toks):
    old, new = toks
    for method in ("focus", "align"):
        with pytest.raises(LangadaptError, match="needs target-language text"):
            _plan(old, new, EmbeddingConfig(method=method), corpus=None)
        with pytest.raises(LangadaptError, match="corpus is empty"):
            _plan(old, new, EmbeddingConfig(method=method), corpus=iter(["", ""]))


def test_align_weights_pieces_by_overlapping_characters(toks):
    old, new = toks
    mapping, weights, _, info = _plan(old, new, EmbeddingConfig(method="align"), corpus=NB_TEXT)
    assert info["align"]["aligned_rows"] > 10
    pa = new.convert_tokens_to_ids("ĠpÃ¥")  # " på": old pieces "Ġp" (2 chars) + "Ã" + "¥" (both on "å")
    expected = dict(zip(old.convert_tokens_to_ids(["Ġp", "Ã", "¥"]), (0.5, 0.25, 0.25)))
    got = {c: weights[pa, c].item() for c in weights[pa].nonzero().flatten().tolist()}
    assert got == pytest.approx(expected)
    for i in mapping.ids_with("copied"):
        assert weights[i, mapping.pieces[i][0]] == 1.0


def test_overlap_pairs_counts_shared_characters():
    new_ids, new_spans = np.array([10, 11]), np.array([[0, 4], [4, 6]])
    old_ids, old_spans = np.array([1, 2, 3]), np.array([[0, 2], [2, 5], [5, 6]])
    n, o, c = overlap_pairs(new_ids, new_spans, old_ids, old_spans)
    assert list(zip(n.tolist(), o.tolist(), c.tolist())) == [(10, 1, 2), (10, 2, 2), (11, 2, 1), (11, 3, 1)]


def _word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def _write_vectors(path, vectors: dict[str, np.ndarray]) -> None:
    dim = len(next(iter(vectors.values())))
    lines = [f"{len(vectors)} {dim}"] + [
        w + " " + " ".join(f"{x:.6f}" for x in v) for w, v in vectors.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_wechsel_builds_rows_from_the_translation_in_an_aligned_space(tmp_path):
    rng = np.random.default_rng(0)
    en = ["dog", "cat", "house", "car", "tree", "water", "book", "sun", "moon", "road", "door", "king"]
    nb = ["hund", "katt", "hus", "bil", "tre", "vann", "bok", "sol", "måne", "vei", "dør", "konge"]
    source = {w: rng.normal(size=8) for w in en}
    rotation, _ = np.linalg.qr(rng.normal(size=(8, 8)))  # the target space is a rotated copy
    target = {t: source[s] @ rotation + rng.normal(scale=0.01, size=8) for s, t in zip(en, nb)}
    _write_vectors(tmp_path / "en.vec", source)
    _write_vectors(tmp_path / "nb.vec", target)
    (tmp_path / "dict.txt").write_text("".join(f"{s}\t{t}\n" for s, t in zip(en, nb)), encoding="utf-8")
    old, new = _word_tokenizer(en), _word_tokenizer(nb)
    config = EmbeddingConfig(
        method="wechsel",
        source_vectors=tmp_path / "en.vec",
        target_vectors=tmp_path / "nb.vec",
        dictionary=tmp_path / "dict.txt",
    )
    model = tiny_model("gpt2", len(old), tied=True)
    old_in = model.get_input_embeddings().weight.detach().clone()
    model, report = transfer_embeddings(model, old, new, config)
    assert report["wechsel"]["matched_rows"] == len(nb)
    new_in = model.get_input_embeddings().weight
    for s, t in zip(en, nb):
        cos = torch.cosine_similarity(
            new_in[new.convert_tokens_to_ids(t)], old_in[old.convert_tokens_to_ids(s)], dim=0
        )
        assert cos > 0.98, (s, t)
    assert torch.equal(new_in[new.bos_token_id], old_in[old.bos_token_id])


def test_wechsel_inputs_are_checked(tmp_path):
    with pytest.raises(ValidationError, match="source_vectors, target_vectors, dictionary"):
        EmbeddingConfig(method="wechsel")
    old = new = _word_tokenizer(["a", "b"])
    config = EmbeddingConfig(
        method="wechsel",
        source_vectors=tmp_path / "x.vec",
        target_vectors=tmp_path / "y.vec",
        dictionary=tmp_path / "d",
    )
    with pytest.raises(LangadaptError, match="source_vectors: file not found"):
        _plan(old, new, config)


def test_config_is_strict_and_documented():
    for name, field in EmbeddingConfig.model_fields.items():
        assert field.description, f"EmbeddingConfig.{name} has no docstring"
    with pytest.raises(ValidationError):
        EmbeddingConfig(methd="mean")
    with pytest.raises(ValidationError):
        EmbeddingConfig(method="fvt")
