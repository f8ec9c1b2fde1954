"""Embeddings for an EXTENDED vocabulary (tokenizer.kind=extend): every base row of the input
matrix and the head stays bit for bit, whatever the method; a new token's mean row is the mean of
the base tokens it was merged from (the FVT decomposition through the base tokenizer is exactly
its merge tree's leaves); the matrices are padded to a multiple of 64 with rows the tokenizer
never produces; all base rows are the shared rows that `train_rows: new` keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.extension import expander
from transformers import AutoModelForCausalLM

from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.train import train_tokenizer

NEW = 500
FOCUS = {"fasttext_dim": 16, "fasttext_epochs": 2, "fasttext_min_count": 3, "fasttext_workers": 1}


@pytest.fixture(scope="module")
def tokenizers(tiny_en_llama: Path, shared_texts):
    base = load_tokenizer(tiny_en_llama)
    texts = [("nb", t) for t in shared_texts("nb.debian-handbook.train", limit=60)]
    return base, train_tokenizer(TokenizerConfig(kind="extend", vocab_size=len(base) + NEW), texts, base)


def test_new_tokens_decompose_into_their_merge_parents(tokenizers):
    base, extended = tokenizers
    mapping = build_mapping(base, extended)
    leaves = expander(json.loads(extended.backend_tokenizer.to_str()), len(base))
    assert mapping.summary()["copied"] + mapping.summary()["special"] == len(base)
    assert all(mapping.pieces[i] == [i] for i in range(len(base)) if mapping.status[i] == "copied")
    assert [mapping.pieces[i] for i in range(len(base), len(extended))] == \
        [leaves([i]) for i in range(len(base), len(extended))]


@pytest.mark.parametrize("method", ["mean", "random_full_cov", "transformers_resize", "model_init", "focus"])
def test_base_rows_stay_bit_for_bit_and_new_rows_are_initialised(method, tokenizers, tiny_en_llama, shared_texts):
    base, extended = tokenizers
    model = AutoModelForCausalLM.from_pretrained(tiny_en_llama, dtype=torch.float32)
    old_in = model.get_input_embeddings().weight.detach().clone()
    old_head = model.get_output_embeddings().weight.detach().clone()
    corpus = shared_texts("nb.debian-handbook.train", limit=60)
    config = EmbeddingConfig(method=method, head_init="same", pad_vocab_to_multiple_of=64,  # the method's own head rows
                             **(FOCUS if method == "focus" else {}))
    model, report = transfer_embeddings(model, base, extended, config, corpus=corpus, seed=0)
    new_in, new_head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    n = len(base)

    rows = -(-(n + NEW) // 64) * 64
    assert new_in.shape[0] == new_head.shape[0] == report["new_rows"] == rows and rows % 64 == 0
    assert torch.equal(new_in[:n], old_in) and torch.equal(new_head[:n], old_head)
    assert report["shared_rows"] == list(range(n))  # what stage 1 keeps with train_rows: new
    fresh = slice(n, n + NEW)
    assert torch.isfinite(new_in[fresh]).all() and torch.isfinite(new_head[fresh]).all()
    assert not torch.equal(new_in[n], new_in[n + 1])  # each new token its own row
    if method == "mean":
        leaves = expander(json.loads(extended.backend_tokenizer.to_str()), n)
        for i in range(n, n + NEW):
            assert torch.allclose(new_in[i], old_in[leaves([i])].mean(0), atol=1e-6)
            assert torch.allclose(new_head[i], old_head[leaves([i])].mean(0), atol=1e-6)
    # Padding rows exist only in the matrices: no text encodes to them.
    assert len(extended) == n + NEW < rows
    ids = {i for text in shared_texts("nb.debian-handbook.valid", limit=20) for i in extended.encode(text)}
    assert max(ids) < n + NEW

