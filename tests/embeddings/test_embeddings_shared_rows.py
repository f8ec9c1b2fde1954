"""The embeddings stage records which rows it copied from the base bit for bit (`shared_rows`),
which `stage1.train_rows: new` keeps frozen (tests/train/test_train_new_rows.py trains with them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_embeddings_stage import ctx  # noqa: F401  (the fixture: a run folder ready for the embeddings stage)
from test_embeddings_support import (
    EN_TEXT,
    NB_TEXT,
    byte_level_tokenizer,
    sentencepiece_tokenizer,
    tiny_model,
)
from transformers import AutoModelForCausalLM

from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.embeddings.row_plan import SharedRows
from langadapt.embeddings.stage import run as run_embeddings
from langadapt.errors import LangadaptError
from langadapt.recipe.embeddings import EmbeddingsSlice
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.train.job import TrainingJob
from langadapt.train.stage import shared_rows


def test_the_plan_records_the_rows_it_copies_bit_for_bit(tmp_path: Path) -> None:
    old_tok, new_tok = byte_level_tokenizer(EN_TEXT), sentencepiece_tokenizer(NB_TEXT)
    mapping = build_mapping(old_tok, new_tok)
    copied = [i for i, s in enumerate(mapping.status) if s in ("copied", "special") and len(mapping.pieces[i]) == 1]
    for method in ("mean", "random_full_cov"):
        model = tiny_model("llama", len(old_tok), tied=False)
        old_in = model.get_input_embeddings().weight.detach().clone()
        old_head = model.get_output_embeddings().weight.detach().clone()
        model, report = transfer_embeddings(model, old_tok, new_tok, EmbeddingConfig(method=method))
        ids = report["shared_rows"]
        if method == "mean":  # every copied token, and the specials mapped by role
            assert ids == copied and len(ids) > 300  # measured 341 (and `pp` = mean(`p`, `p`) is not one)
        else:  # random_full_cov draws the copied tokens afresh: only the specials are still the base's
            assert 0 < len(ids) < len(copied) and set(ids) <= set(mapping.ids_with("special"))
        source = [mapping.pieces[i][0] for i in ids]
        assert torch.equal(model.get_input_embeddings().weight[ids], old_in[source])
        assert torch.equal(model.get_output_embeddings().weight[ids], old_head[source])
    path = tmp_path / "shared.json"
    SharedRows(len(new_tok), tuple(ids)).save(path)
    assert SharedRows.load(path) == SharedRows(len(new_tok), tuple(ids))


def _job(config: TrainStageConfig, stage_name: str, ctx) -> TrainingJob:  # noqa: F811
    """The training job `shared_rows` reads the stage's name and `train_rows` from."""
    return TrainingJob.resolve(config, EngineConfig(), ctx.run_dir / stage_name, seed=0, stage_name=stage_name)


def test_the_embeddings_stage_records_the_shared_rows_for_training(ctx) -> None:  # noqa: F811
    summary = run_embeddings(EmbeddingsSlice(EmbeddingConfig()), ctx)
    recorded = SharedRows.load(ctx.layout.embeddings.shared_rows)
    assert recorded.rows == 420 and len(recorded.ids) == summary["rows_copied"] > 200  # measured 303 of 420
    assert shared_rows(_job(TrainStageConfig(train_rows="new"), "stage1", ctx), ctx) == recorded
    assert shared_rows(_job(TrainStageConfig(), "stage1", ctx), ctx) is None
    base = AutoModelForCausalLM.from_pretrained(ctx.base_model).get_input_embeddings().weight
    initialised = AutoModelForCausalLM.from_pretrained(ctx.layout.embeddings.model).get_input_embeddings().weight
    rows = initialised[list(recorded.ids)]
    assert all(bool((base == row).all(dim=1).any()) for row in rows)  # each one a base row, bit for bit
    ctx.layout.embeddings.shared_rows.unlink()
    with pytest.raises(LangadaptError, match=r"stage2\.train_rows: new, but the embeddings stage recorded no "):
        shared_rows(_job(TrainStageConfig(train_rows="new"), "stage2", ctx), ctx)
