"""transfer_embeddings on every supported family: exact means, untied heads, tying, specials."""

from __future__ import annotations

import pytest
import torch
from test_embeddings_support import (
    EN_TEXT,
    FAMILIES,
    NB_TEXT,
    byte_level_tokenizer,
    sentencepiece_tokenizer,
    tiny_model,
)
from transformers import AutoModelForCausalLM

from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.embeddings.draws import sample_like
from langadapt.errors import LangadaptError


@pytest.fixture(scope="module")
def toks():
    return byte_level_tokenizer(EN_TEXT), sentencepiece_tokenizer(NB_TEXT)


def _expected_means(matrix: torch.Tensor, mapping) -> torch.Tensor:
    """The FVT rows computed the slow, obvious way."""
    rows = []
    for pieces in mapping.pieces:
        rows.append(matrix[pieces].mean(0) if pieces else matrix.mean(0))
    return torch.stack(rows)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("family", FAMILIES)
def test_mean_init_fills_input_and_head_with_exact_means(family, tied, toks):
    old_tok, new_tok = toks
    model = tiny_model(family, len(old_tok), tied)
    old_in = model.get_input_embeddings().weight.detach().clone()
    old_head = model.get_output_embeddings().weight.detach().clone()
    mapping = build_mapping(old_tok, new_tok)

    model, report = transfer_embeddings(model, old_tok, new_tok, EmbeddingConfig(method="mean"))

    new_in = model.get_input_embeddings().weight
    new_head = model.get_output_embeddings().weight
    assert new_in.shape == (len(new_tok), old_in.shape[1])
    assert model.config.get_text_config().vocab_size == len(new_tok)
    assert torch.isfinite(new_in).all() and torch.isfinite(new_head).all()
    assert torch.allclose(new_in, _expected_means(old_in, mapping), atol=1e-6)
    if tied:
        assert report["tied"] and new_head.data_ptr() == new_in.data_ptr()
    else:
        assert not report["tied"] and new_head.data_ptr() != new_in.data_ptr()
        # the head's rows are means of the HEAD's old rows (mean ~3), not of the input rows (mean ~0)
        assert torch.allclose(new_head, _expected_means(old_head, mapping), atol=1e-6)
        assert new_head.mean().item() == pytest.approx(3.0, abs=0.2)
    # special tokens keep their role's row; the config points at the new ids
    assert torch.equal(new_in[new_tok.bos_token_id], old_in[old_tok.bos_token_id])
    assert torch.equal(new_head[new_tok.eos_token_id], old_head[old_tok.eos_token_id])
    assert (model.config.bos_token_id, model.config.eos_token_id) == (
        new_tok.bos_token_id,
        new_tok.eos_token_id,
    )
    ids = torch.tensor([new_tok("på systemet", add_special_tokens=True)["input_ids"]])
    assert model(input_ids=ids).logits.shape[-1] == len(new_tok)


def test_bare_space_token_gets_a_finite_mean_row(toks):
    old_tok, new_tok = toks
    model = tiny_model("llama", len(old_tok), tied=False)
    old_in = model.get_input_embeddings().weight.detach().clone()
    model, _ = transfer_embeddings(model, old_tok, new_tok, EmbeddingConfig())
    space = new_tok.convert_tokens_to_ids("▁")
    row = model.get_input_embeddings().weight[space]
    assert torch.isfinite(row).all()
    assert torch.allclose(row, old_in[old_tok.convert_tokens_to_ids("Ġ")])


def test_random_rows_follow_each_matrix_mean_and_covariance(toks):
    old_tok, new_tok = toks
    model = tiny_model("llama", len(old_tok), tied=False)
    old_in = model.get_input_embeddings().weight.detach().clone()
    old_head = model.get_output_embeddings().weight.detach().clone()
    model, report = transfer_embeddings(model, old_tok, new_tok, EmbeddingConfig(method="random_full_cov"), seed=3)
    assert report["rows_drawn"] == len(new_tok) - 2  # all but bos/eos (unk has no old counterpart)
    head = model.get_output_embeddings().weight.detach()
    rows = [i for i in range(len(new_tok)) if i not in (new_tok.bos_token_id, new_tok.eos_token_id)]
    assert head[rows].mean().item() == pytest.approx(old_head.mean().item(), abs=0.1)  # head stats, not input
    assert model.get_input_embeddings().weight[rows].mean().item() == pytest.approx(
        old_in.mean().item(), abs=0.1
    )
    assert torch.equal(head[new_tok.bos_token_id], old_head[old_tok.bos_token_id])


def test_sample_like_matches_source_mean_and_covariance():
    torch.manual_seed(0)
    mixing = torch.randn(6, 6)
    source = torch.randn(400, 6) @ mixing + torch.arange(6.0)
    draws = sample_like(source, 40_000, torch.Generator().manual_seed(1))
    assert torch.allclose(draws.mean(0), source.mean(0), atol=0.08)
    assert torch.allclose(
        torch.cov(draws.T), torch.cov(source.T), atol=0.08 * torch.cov(source.T).abs().max()
    )
    few = sample_like(source[:3], 10, torch.Generator().manual_seed(1))  # singular covariance still samples
    assert torch.isfinite(few).all()


def test_padding_rows_and_dtype_are_handled(toks):
    old_tok, new_tok = toks
    model = tiny_model("qwen2", len(old_tok), tied=False).to(torch.bfloat16)
    model, report = transfer_embeddings(model, old_tok, new_tok, EmbeddingConfig(pad_vocab_to_multiple_of=64))
    rows = model.get_input_embeddings().weight.shape[0]
    assert rows % 64 == 0 and rows >= len(new_tok) and report["new_rows"] == rows
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    assert model.config.vocab_size == rows


def test_reload_from_disk_keeps_values_and_tying(toks, tmp_path):
    old_tok, new_tok = toks
    for tied in (True, False):
        model, _ = transfer_embeddings(
            tiny_model("gpt2", len(old_tok), tied), old_tok, new_tok, EmbeddingConfig()
        )
        model.save_pretrained(tmp_path / str(tied))
        again = AutoModelForCausalLM.from_pretrained(tmp_path / str(tied))
        assert torch.equal(again.get_output_embeddings().weight, model.get_output_embeddings().weight)
        tied_again = (
            again.get_output_embeddings().weight.data_ptr() == again.get_input_embeddings().weight.data_ptr()
        )
        assert tied_again == tied


def test_partitioned_or_foreign_models_are_refused(toks):
    old_tok, new_tok = toks
    model = tiny_model("llama", len(old_tok), tied=False)
    model.get_input_embeddings().weight = torch.nn.Parameter(torch.empty(0))  # what ZeRO-3 shows ungathered
    with pytest.raises(LangadaptError, match="ZeRO-3"):
        transfer_embeddings(model, old_tok, new_tok, EmbeddingConfig())
    small = tiny_model("llama", 100, tied=False)  # fewer rows than the old tokenizer has ids
    with pytest.raises(LangadaptError, match="old tokenizer"):
        transfer_embeddings(small, old_tok, new_tok, EmbeddingConfig())
