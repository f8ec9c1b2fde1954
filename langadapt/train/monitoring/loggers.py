"""The training stage's trackers (`stage.loggers`: TensorBoard, W&B, MLflow) as one callback.

The trackers themselves, their configuration through environment variables and the run's one
step axis are `langadapt.run.trackers`; this callback feeds them each row of metrics.jsonl
(`train/...` for training rows, `valid/...` for validations) at the run's global step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langadapt.run.trackers import Tracker, TrackerRecord, flatten, open_trackers
from langadapt.train.monitoring.callbacks import Callback, StageStart


class Trackers(Callback):
    """Rows to the trackers `names` lists, at `step_offset` + the stage's step.

    `step_offset`: the steps of the run's training stages before this one, so that the stages
    draw one curve; `config`: the resolved recipe, each tracker run's configuration. The stage
    folder `out_dir` keeps the tracker run ids (a resume continues them) and the last global step
    (the evaluate stage logs its numbers there)."""

    def __init__(self, names: list[str], out_dir: Path, run_name: str, *, step_offset: int = 0,
                 config: dict[str, Any] | None = None) -> None:
        self.names, self.out_dir, self.run_name = list(dict.fromkeys(names)), out_dir, run_name
        self.step_offset, self.config = step_offset, config
        self._trackers: list[Tracker] = []

    def on_stage_start(self, start: StageStart) -> None:
        if not self.names:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        record = TrackerRecord.load(self.out_dir)
        self._trackers, ids = open_trackers(self.names, self.out_dir, self.run_name, self.config, record.ids)
        self.record = TrackerRecord(self.names, ids, self.step_offset + start.total_steps)
        self.record.save(self.out_dir)

    def on_log(self, row: dict) -> None:
        scalars = flatten(row) if "valid" in row else flatten(row, "train")
        for tracker in self._trackers:
            tracker.log(scalars, self.step_offset + row["step"])

    def close(self) -> None:
        for tracker in self._trackers:
            tracker.close()
        self._trackers = []
