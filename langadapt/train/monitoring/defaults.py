"""The callbacks a training stage runs unless its caller composes its own list."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from langadapt.run.layout import ModelStagePaths
from langadapt.train.monitoring.callbacks import Callback
from langadapt.train.monitoring.loggers import Trackers
from langadapt.train.monitoring.metrics import ConsoleProgress, MetricsFile, StepMeter
from langadapt.train.monitoring.profiler import StepProfiler

if TYPE_CHECKING:
    from langadapt.data.stream import TokenStream
    from langadapt.recipe.train import TrainStageConfig


def default_callbacks(config: TrainStageConfig, out_dir: Path, run_name: str, *, stream: TokenStream | None = None,
                      step_offset: int = 0, recipe: dict[str, Any] | None = None) -> list[Callback]:
    """The step meter (first: see `callbacks`), metrics.jsonl, the console, the profiler when
    `config.profile_steps` asks, and the trackers `config.loggers` names (validation is not one of
    them: `fit` calls it, on every rank).

    `step_offset` and `recipe` are for the trackers (`loggers.Trackers`): the run's steps before
    this stage and the resolved recipe. Extend the list to add a callback of one's own."""
    metrics = ModelStagePaths(out_dir).metrics
    callbacks: list[Callback] = [StepMeter(stream, metrics), MetricsFile(metrics), ConsoleProgress(run_name)]
    if config.profile_steps is not None:
        callbacks.append(StepProfiler(config.profile_steps, out_dir))
    callbacks.append(Trackers(config.loggers, out_dir, run_name, step_offset=step_offset, config=recipe))
    return callbacks
