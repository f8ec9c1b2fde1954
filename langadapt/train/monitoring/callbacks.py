"""The hooks through which a training stage is watched: console, metrics.jsonl, trackers, profiler,
energy and MFU are each one `Callback`; the loop calls a list of them. Held-out validation is not
one: it is collective work that every rank must do together, so `fit` calls it itself, visibly,
and hands its row to `Callbacks.log`.

The loop calls, in this order (on rank 0; callbacks with `all_ranks` on every rank):

    on_stage_start(start)        once, before the first step (also after a resume: start.step > 0)
    on_step_start(step)          before each optimizer step's data is read
    on_step(record) -> row       after it; a callback that returns a row (a logged step) has it
                                 sent at once to every callback's on_log
    on_log(row)                  each row, as metrics.jsonl stores it (also a validation's row)
    on_stage_end(summary)        once, after the last step; callbacks add to the stage summary
    close()                      always, also on an error or a stop signal

Callbacks run in list order, so a callback sees the rows of those before it in the same step.
The step meter comes first: whatever later callbacks spend (a log write), a validation and a
checkpoint between steps fall outside its step time. Adding a logger is a new subclass in the
list handed to `fit`: no existing class changes (OLMo-core's trainer callbacks, reduced to the
hooks this loop needs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch


@dataclass(frozen=True)
class StepCost:
    """What one optimizer step of a stage is worth, fixed for the stage: tokens/s and MFU come from it."""

    tokens_per_step: int
    """Tokens of one optimizer step over all ranks (global batch x sequence length)."""
    flops_per_token: float
    """Training FLOPs per token of this stage (`langadapt.train.flops.flops_per_token`)."""
    peak_flops: float | None
    """Peak FLOP/s of one device at the stage's precision; None where unknown (MFU is then null)."""
    world_size: int
    device: torch.device


@dataclass(frozen=True)
class StageStart:
    """What a callback learns when the stage starts."""

    step: int
    """Steps already done: 0, or the step of the checkpoint this attempt resumed from."""
    total_steps: int
    cost: StepCost
    engine: Any = None
    """The training engine (`langadapt.train.engines`), for a callback that needs the model (a custom
    probe on rank 0); no shipped callback reads it."""
    rank: int = 0


@dataclass(frozen=True)
class StepRecord:
    """One finished optimizer step (steps count from 1)."""

    step: int
    loss: float
    """Mean loss over all ranks; NaN/inf when the step was skipped."""
    lr: float
    grad_norm: float
    skipped: int
    """Skipped (non-finite) steps so far."""
    window_loss: float | None = None
    """On a logged step (every `log_every`-th, and the last): the mean of the finite losses since the
    previous logged step, the loss curve's point (NaN when every step of it was skipped); None on the
    other steps. The loop computes it once (`metrics.LossWindow`)."""


class Callback:
    """Every hook does nothing: a callback overrides the ones it needs (see the module docstring)."""

    all_ranks: ClassVar[bool] = False
    """Also called off rank 0 (no shipped callback is). Work every rank must do together (a
    collective, like held-out validation) does not belong here but in `fit`, in plain sight: a
    callback list that differs between ranks is where such a call would hang the job."""

    def on_stage_start(self, start: StageStart) -> None:
        pass

    def on_step_start(self, step: int) -> None:
        pass

    def on_step(self, record: StepRecord) -> dict | None:
        return None

    def on_log(self, row: dict) -> None:
        pass

    def on_stage_end(self, summary: dict) -> None:
        pass

    def close(self) -> None:
        pass


class Callbacks:
    """The list the loop calls, as one object; a context manager so that `close` always runs."""

    def __init__(self, callbacks: Sequence[Callback], start: StageStart) -> None:
        self.callbacks = [c for c in callbacks if start.rank == 0 or c.all_ranks]
        self.start = start
        self._opened: list[Callback] = []

    def __enter__(self) -> Callbacks:
        try:
            for callback in self.callbacks:
                callback.on_stage_start(self.start)
                self._opened.append(callback)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for callback in reversed(self._opened):
            callback.close()
        self._opened = []

    def step_start(self, step: int) -> None:
        for callback in self.callbacks:
            callback.on_step_start(step)

    def step(self, record: StepRecord) -> None:
        for callback in self.callbacks:
            row = callback.on_step(record)
            if row is not None:
                self.log(row)

    def log(self, row: dict) -> None:
        """`row` to every callback's on_log (a logged step's, or a validation's, which `fit` hands in)."""
        for sink in self.callbacks:
            sink.on_log(row)

    def stage_end(self) -> dict:
        summary: dict = {}
        for callback in self.callbacks:
            callback.on_stage_end(summary)
        return summary
