"""The callback protocol: a callback of one's own, added to the list `fit` runs without editing any
class, receives every hook in order, the same rows metrics.jsonl stores, and adds to the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.synthetic import SyntheticStream, tiny_llama

from langadapt.errors import LangadaptError
from langadapt.recipe.train import CheckpointConfig, EngineConfig, TrainStageConfig
from langadapt.run.layout import ModelStagePaths
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.monitoring.callbacks import Callback, Callbacks, StageStart, StepCost, StepRecord
from langadapt.train.monitoring.defaults import default_callbacks

VOCAB, SEQ = 64, 16


class Recorder(Callback):
    """Writes down every hook it receives."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.rows: list[dict] = []

    def on_stage_start(self, start: StageStart) -> None:
        self.calls.append(("stage_start", start.step, start.total_steps))
        self.start = start

    def on_step_start(self, step: int) -> None:
        self.calls.append(("step_start", step))

    def on_step(self, record: StepRecord) -> None:
        self.calls.append(("step", record.step))

    def on_log(self, row: dict) -> None:
        self.calls.append(("log", row["step"]))
        self.rows.append(row)

    def on_stage_end(self, summary: dict) -> None:
        self.calls.append(("stage_end",))
        summary["recorded_rows"] = len(self.rows)

    def close(self) -> None:
        self.calls.append(("close",))


def test_a_callback_of_ones_own_receives_every_hook_in_order(tmp_path: Path) -> None:
    config = TrainStageConfig(steps=4, micro_batch_size=2, seq_len=SEQ, log_every=2, loggers=[],
                              checkpoint=CheckpointConfig(every_steps=2))
    recorder = Recorder()
    result = fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
                 TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0),
                 callbacks=[*default_callbacks(config, tmp_path, "run/train"), recorder])
    # the step meter comes first in the list: a logged step's row reaches every callback before
    # the later callbacks' own on_step
    steps = [call for step in (1, 2, 3, 4)
             for call in (("step_start", step), *([("log", step)] if step % 2 == 0 else []), ("step", step))]
    assert recorder.calls == [("stage_start", 0, 4), *steps, ("stage_end",), ("close",)]
    assert recorder.start.cost.tokens_per_step == 2 * SEQ and recorder.start.engine is not None
    stored = [json.loads(line) for line in ModelStagePaths(tmp_path).metrics.read_text().splitlines()]
    assert recorder.rows == stored  # the rows metrics.jsonl holds, as they were logged
    assert result.monitoring["recorded_rows"] == 2  # a callback adds to the stage summary
    assert result.monitoring["tokens_per_second"] > 0

    # a second attempt after the run finished resumes at step 4: start, nothing to step, end
    resumed = Recorder()
    fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
        TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0), callbacks=[resumed])
    assert resumed.calls == [("stage_start", 4, 4), ("stage_end",), ("close",)]


def test_only_callbacks_marked_all_ranks_run_off_rank_zero() -> None:
    class Collective(Recorder):
        all_ranks = True

    logger, collective = Recorder(), Collective()
    start = StageStart(0, 1, StepCost(8, 1.0, None, 2, torch.device("cpu")), rank=1)
    with Callbacks([logger, collective], start) as monitor:
        monitor.step_start(1)
        monitor.step(StepRecord(1, 1.0, 1e-3, 0.5, 0))
    assert logger.calls == [] and collective.calls[0] == ("stage_start", 0, 1) and collective.calls[-1] == ("close",)


def test_a_callback_that_fails_to_start_closes_those_already_started() -> None:
    class Broken(Callback):
        def on_stage_start(self, start: StageStart) -> None:
            raise LangadaptError("loggers: wandb is not installed")

    opened, never = Recorder(), Recorder()
    start = StageStart(0, 1, StepCost(8, 1.0, None, 1, torch.device("cpu")))
    with pytest.raises(LangadaptError, match="wandb is not installed"):
        with Callbacks([opened, Broken(), never], start):
            pass
    assert opened.calls == [("stage_start", 0, 1), ("close",)] and never.calls == []
