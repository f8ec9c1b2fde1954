"""Numeric drift in `fit` alone, in the fast tier: two steps on the synthetic stream, compared with
losses recorded here.

The golden files (tests/golden, checked by the slow end-to-end and two-rank tests) catch the same
drift, but only in the slow tier; this check runs in the inner loop. Two steps cover what a change
to the loss, its accumulation over micro-batches, the optimizer step or the loss window would move:
step 1's loss is the initial model's, step 2's the model after one AdamW step, and the window of
both is the stage's `final_loss`. The model, data and settings are fixed here (no recipe defaults),
so a new default elsewhere does not move them. Single-threaded: one reduction order, so the
tolerance can be tight (a real change moves these numbers by far more than 1e-5).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.synthetic import SyntheticStream, tiny_llama

from langadapt.recipe.train import (
    CheckpointConfig,
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.monitoring.callbacks import Callback, StepRecord

VOCAB, SEQ = 128, 16
GOLDEN_LOSSES = [4.876819610595703, 4.869053840637207]
"""The mean loss of steps 1 and 2 over the global batch, as `fit` computed them when recorded."""
GOLDEN_GRAD_NORMS = [1.1277706623077393, 1.1105666160583496]
"""The gradient norms of steps 1 and 2 (before clipping)."""
GOLDEN_FINAL_LOSS = 4.872936725616455
"""`TrainResult.final_loss`: the loss window of both steps (`log_every` 2), the curve's last point."""
TOLERANCE = 1e-5


class Steps(Callback):
    """Every step's record, as the loop hands it to the callbacks."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def on_step(self, record: StepRecord) -> None:
        self.records.append(record)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_two_steps_of_fit_give_the_recorded_losses(tmp_path: Path, one_thread: None) -> None:
    config = TrainStageConfig(
        steps=2, micro_batch_size=2, grad_accum_steps=2, seq_len=SEQ, log_every=2,
        optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.1), schedule=ScheduleConfig(kind="constant", warmup_steps=0),
        checkpoint=CheckpointConfig(every_steps=2, keep_last=1), loggers=[])
    steps = Steps()
    result = fit(tiny_llama(VOCAB, seed=0), SyntheticStream(VOCAB, SEQ, seed=0),
                 TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0, stage_name="stage2"), callbacks=[steps])
    losses = [record.loss for record in steps.records]
    grad_norms = [record.grad_norm for record in steps.records]
    assert losses == pytest.approx(GOLDEN_LOSSES, abs=TOLERANCE)
    assert grad_norms == pytest.approx(GOLDEN_GRAD_NORMS, abs=TOLERANCE)
    assert result.final_loss == pytest.approx(GOLDEN_FINAL_LOSS, abs=TOLERANCE)
    assert result.last_step_loss == pytest.approx(GOLDEN_LOSSES[1], abs=TOLERANCE)
