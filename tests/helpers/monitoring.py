"""Drive training callbacks as the loop does, without a model: the hooks in the loop's order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from langadapt.train.monitoring.callbacks import Callback, Callbacks, StageStart, StepCost, StepRecord
from langadapt.train.monitoring.metrics import LossWindow
from langadapt.train.monitoring.validation import Validation

CPU_COST = StepCost(256, 1.0, None, 1, torch.device("cpu"))


def drive(callbacks: Sequence[Callback], steps: range, total: int, *, cost: StepCost = CPU_COST,
          engine: object = None, loss: Callable[[int], float] = lambda step: 1.0,
          lr: Callable[[int], float] = lambda step: 1e-3, work: Callable[[int], None] = lambda step: None,
          skipped: int = 0, log_every: int = 1, validation: Validation | None = None) -> dict:
    """Steps `steps` (a resumed attempt starts after step `steps.start - 1`) of a `total`-step
    stage logged every `log_every` steps, with `validation` run when due; `work(step)` stands for
    the step's compute. Returns the stage summary when the last step ran."""
    window = LossWindow(log_every, total)
    with Callbacks(callbacks, StageStart(steps.start - 1, total, cost, engine)) as monitor:
        for step in steps:
            monitor.step_start(step)
            work(step)
            monitor.step(StepRecord(step, loss(step), lr(step), 0.5, skipped, window.add(step, loss(step))))
            if validation is not None and (row := validation.maybe_run(step, total, engine)):
                monitor.log(row)
        if steps.stop <= total:
            return {}
        return monitor.stage_end() | ({} if validation is None else {"validation": validation.last})
