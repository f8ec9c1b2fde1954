"""THE training loop, for both stages. Stage 1 and stage 2 differ only in their config: which
parameters train (the policy) and which LR schedule runs; the loop is the same.

Per optimizer step: take this rank's share of the next global batch, forward/backward it in
micro-batches, agree across ranks on the mean loss and on whether to stop or save (one small
all-reduce), step (or skip a non-finite step), log, checkpoint. A stop signal checkpoints and
exits with the requeue code; a rerun resumes from the latest complete checkpoint by itself.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from langadapt.data.stream import StreamMismatch, TokenStream
from langadapt.errors import LangadaptError
from langadapt.planning.training import world_change_line
from langadapt.recipe.replay import REPLAY_ROLE
from langadapt.recipe.train import TrainStageConfig
from langadapt.run.layout import ModelStagePaths
from langadapt.runtime.signals import Preempted, StopOnSignal, clear_stop
from langadapt.tokenizer.saving import save_tokenizer
from langadapt.train.checkpoint import Checkpointer, TrainState
from langadapt.train.engines import build_engine
from langadapt.train.flops import flops_per_token, peak_flops
from langadapt.train.job import TrainingJob
from langadapt.train.lr import lr_at
from langadapt.train.monitoring.callbacks import Callback, Callbacks, StageStart, StepCost, StepRecord
from langadapt.train.monitoring.defaults import default_callbacks
from langadapt.train.monitoring.metrics import LossWindow
from langadapt.train.monitoring.validation import Validation
from langadapt.train.policy import numel, select_trainable

log = logging.getLogger("langadapt.train")


@dataclass(frozen=True)
class TrainResult:
    """What a finished `fit` reports (the stage summary in manifest.json)."""

    steps: int
    tokens: int
    final_loss: float | None
    """The training loss curve's last point: the mean loss of the last logged window (the steps since
    the previous `log_every` multiple, `monitoring.metrics.LossWindow`), the number metrics.jsonl's
    last row, the report's curve and the model card show. None when every step of that window had a
    non-finite loss (the row's null); when this call ran no step (resumed at the end), the last
    step's loss the checkpoint kept."""
    skipped_steps: int
    trainable_params: int
    resumed_from: int | None
    model_dir: Path
    monitoring: dict = field(default_factory=dict)
    """What the callbacks add to the stage summary: wall time, tokens/s, measured energy, the last validation."""
    last_step_loss: float | None = None
    """The last finite step's loss alone (one batch): noisier than `final_loss`, named apart from it
    so that no reader takes one for the other."""


def fit(model: torch.nn.Module, stream: TokenStream, job: TrainingJob,
        callbacks: Sequence[Callback] | None = None, validation: Validation | None = None) -> TrainResult:
    """Train `model` on `stream` for `job.config.steps` steps; write checkpoints, metrics and
    `job.out_dir/model` (with `job.tokenizer` saved beside the weights when the job has one).
    What trains, on which engine, with which batch shape and sequence length was decided when the
    job was resolved (`TrainingJob.resolve`); `fit` reads those numbers from `job.settings` and
    decides nothing again (steps, optimizer, schedule and checkpoints come from `job.config`).
    `callbacks` watch the run (`langadapt.train.monitoring.callbacks`); None runs
    `default_callbacks` (metrics.jsonl, console, trackers, ...); to add one, extend that list.
    `validation` scores held-out windows when due (`monitoring.validation`), its rows logged as theirs."""
    config, settings, dist, stage_name = job.config, job.settings, job.dist, job.stage
    out_dir, seed, tokens_per_step = job.out_dir, job.seed, settings.global_batch * settings.seq_len
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed + dist.rank)  # e.g. dropout masks differ per rank, as data does
    paths = ModelStagePaths(out_dir)
    selection = select_trainable(model, config.trainable_patterns(stage_name), f"{stage_name}.trainable")
    # The engine frees its optimizer state on the way out of this block, also on an error.
    with build_engine(model, selection, job) as engine:
        ckpt = Checkpointer(paths.checkpoints, config.checkpoint, dist.rank)
        state, resumed, resumed_step = TrainState(), ckpt.latest(), None
        if resumed is not None:  # weights, optimizer, RNG and data position; the data is not re-read
            try:
                state = ckpt.load(resumed, engine, stream)
            except StreamMismatch as exc:  # another world size: say so, not the stream's lengths
                raise LangadaptError(world_change_line(stage_name, config, resumed, exc.saved_samples, exc.samples,
                                                       dist.world_size)) from None
            resumed_step = state.step
            log.info("%s: resumed from %s (step %d)", stage_name, resumed, state.step)
        cost = StepCost(tokens_per_step, flops_per_token(model, selection, settings.seq_len),
                        peak_flops(engine.device, settings.engine.precision, settings.engine.peak_tflops),
                        dist.world_size, engine.device)
        if callbacks is None:
            callbacks = default_callbacks(config, out_dir, job.run_label, stream=stream)
        start = StageStart(state.step, config.steps, cost, engine, dist.rank)
        window = LossWindow(config.log_every, config.steps)  # the curve's points; the last is final_loss
        with StopOnSignal() as stop, Callbacks(callbacks, start) as monitor:
            while state.step < config.steps:
                monitor.step_start(state.step + 1)
                batch = torch.from_numpy(stream.next_batch(settings.global_batch, dist.rank, dist.world_size))
                micro = batch.split(settings.micro_batch)
                # With replay distillation, which rows of each micro-batch are replay (langadapt.train.distill).
                replay = (torch.from_numpy(stream.rows_of_role(REPLAY_ROLE)).split(settings.micro_batch)
                          if job.distillation else [None] * len(micro))
                loss = sum(engine.micro_step(mb[:, :-1], mb[:, 1:], stream.position_ids(mb[:, :-1]), rows)
                           for mb, rows in zip(micro, replay))
                # Ranks must agree: on the loss (a NaN anywhere skips the step everywhere), on a stop
                # signal and on a time-based save. One all-reduce per step carries all three.
                loss, stop_votes, save_votes = engine.all_reduce_sum([float(loss), stop.requested, ckpt.time_due()])
                loss /= settings.grad_accum * dist.world_size
                lr = lr_at(state.step, config.schedule, config.optimizer.lr, config.steps)
                grad_norm = engine.step(lr, skip=not math.isfinite(loss))
                _account(state, loss, grad_norm, config, stage_name, ckpt)
                record = StepRecord(state.step, loss, lr, grad_norm, state.skipped, window.add(state.step, loss))
                monitor.step(record)  # every log_every steps: a metrics row to metrics.jsonl, console, trackers
                if validation is not None and (row := validation.maybe_run(state.step, config.steps, engine)):
                    monitor.log(row)  # scored on every rank (a collective), logged by rank 0's callbacks
                if ckpt.due(state.step, config.steps) or save_votes or stop_votes:
                    saved = ckpt.save(state, engine, stream)
                if stop_votes:
                    clear_stop()  # honoured: a library caller that catches this may train again
                    raise Preempted(f"in {stage_name} at step {state.step}; checkpoint {saved}")
            monitoring = monitor.stage_end() | ({} if validation is None else {"validation": validation.last})
        engine.export(paths.model, dist.rank)
    if job.tokenizer is not None and dist.rank == 0:
        save_tokenizer(job.tokenizer, paths.model)
    final_loss = window.last
    if final_loss is None:  # resumed at the end: no window ran in this call
        final_loss = state.last_loss
    elif not math.isfinite(final_loss):  # the last window's every step skipped: metrics.jsonl's null
        final_loss = None
    return TrainResult(config.steps, config.steps * tokens_per_step, final_loss,
                       state.skipped, sum(numel(p) for p in selection.params), resumed_step,
                       paths.model, monitoring, last_step_loss=state.last_loss)


def _account(state: TrainState, loss: float, grad_norm: float, config: TrainStageConfig,
             stage_name: str, ckpt: Checkpointer) -> None:
    """Advance the counters; too many non-finite steps in a row stop the run (checkpoint kept)."""
    state.step += 1
    if math.isfinite(loss) and math.isfinite(grad_norm):
        state.nonfinite_in_row, state.last_loss = 0, loss
        return
    state.skipped += 1
    state.nonfinite_in_row += 1
    log.warning("%s step %d: non-finite loss %s / grad norm %s: step skipped", stage_name, state.step, loss, grad_norm)
    if state.nonfinite_in_row >= config.max_nonfinite_steps:
        kept = ckpt.latest()
        raise LangadaptError(
            f"{stage_name}: loss or gradient not finite for {state.nonfinite_in_row} steps in a row "
            f"(up to step {state.step}, {stage_name}.max_nonfinite_steps = {config.max_nonfinite_steps}); "
            f"last good checkpoint: {kept or 'none'}; lower {stage_name}.optimizer.lr or check the data"
        )
