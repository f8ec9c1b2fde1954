"""`fit` without a stage name is one stage named "train" (it used to log and track as "stage2"), and a
name other than stage1/stage2 is refused before anything trains (a typo trained the whole body)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers.synthetic import SyntheticStream, tiny_llama

from langadapt.errors import LangadaptError
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit

VOCAB, SEQ = 64, 8


def config() -> TrainStageConfig:
    return TrainStageConfig(steps=1, micro_batch_size=2, seq_len=SEQ, log_every=1, schedule={"warmup_steps": 0})


def test_a_stage_name_other_than_stage1_or_stage2_is_refused_before_training(tmp_path: Path) -> None:
    with pytest.raises(LangadaptError, match="stage_name='stage_1'; pass 'stage1' .*, 'stage2' "):
        fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
            TrainingJob.resolve(config(), EngineConfig(), tmp_path, seed=0, stage_name="stage_1"))
    assert not (tmp_path / "model").exists()


def test_fit_without_a_stage_name_says_the_whole_model_trains(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tiny_llama(VOCAB)
    with caplog.at_level(logging.INFO, logger="langadapt.train"):
        result = fit(model, SyntheticStream(VOCAB, SEQ),
                     TrainingJob.resolve(config(), EngineConfig(), tmp_path, seed=0))
    said = caplog.text
    assert "train: no stage_name and no config.trainable: the whole model trains" in said
    assert "stage_name='stage1' trains the embeddings and head only" in said and "stage2" not in said
    assert result.trainable_params == sum(p.numel() for p in model.parameters())
