"""Scalar loggers beside metrics.jsonl: TensorBoard (default), Weights & Biases, MLflow.

Every logger receives the same flat `{name: value}` dict per logged step (`train/loss`,
`valid/nb/bits_per_byte`, ...), so the three never disagree; metrics.jsonl stays the record of
truth. W&B and MLflow are optional installs (`pip install 'langadapt[wandb]'` / `[mlflow]`) and
are configured the way their users already do it, through their environment variables:
WANDB_PROJECT (default "langadapt"), WANDB_MODE=offline for clusters without internet (then
`wandb sync` later); MLFLOW_TRACKING_URI (default: a file store `mlruns/` in the run directory).

A resumed stage continues the same tracker run: its id is kept in the stage folder
(`tracker_runs.json`) and handed back to W&B (`resume="allow"`) or MLflow.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Protocol

from langadapt.errors import LangadaptError

RUN_IDS = "tracker_runs.json"


class ScalarLogger(Protocol):
    def log(self, scalars: dict[str, float], step: int) -> None: ...
    def close(self) -> None: ...


class TensorBoardLogger:
    def __init__(self, out_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out_dir / "tensorboard"))

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, out_dir: Path, run_name: str, run_id: str | None) -> None:
        wandb = _require("wandb", "wandb")
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "langadapt"), name=run_name,
                              group=run_name.split("/")[0], dir=str(out_dir), id=run_id, resume="allow")
        self.id = self.run.id

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowLogger:
    def __init__(self, out_dir: Path, run_name: str, run_id: str | None) -> None:
        _require("mlflow", "mlflow")
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:  # MLflow 3 keeps its file store only on request; it needs no server
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (out_dir.resolve().parent / "mlruns").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        experiment = run_name.split("/")[0]
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.id = run_id or self.client.create_run(experiment_id, run_name=run_name).info.run_id

    def log(self, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.id, metrics=[Metric(k, v, now, step) for k, v in scalars.items()])

    def close(self) -> None:
        self.client.set_terminated(self.id)


def _require(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError as error:
        raise LangadaptError(f"loggers: {module} is not installed (pip install 'langadapt[{extra}]')") from error


def open_loggers(names: list[str], out_dir: Path, run_name: str) -> list[ScalarLogger]:
    """The loggers `names` lists, opened in `out_dir` (tracker run ids remembered for a resume)."""
    ids_file = out_dir / RUN_IDS
    ids = json.loads(ids_file.read_text()) if ids_file.is_file() else {}
    loggers: list[ScalarLogger] = []
    for name in dict.fromkeys(names):
        if name == "tensorboard":
            loggers.append(TensorBoardLogger(out_dir))
            continue
        tracker = {"wandb": WandbLogger, "mlflow": MlflowLogger}[name](out_dir, run_name, ids.get(name))
        ids[name] = tracker.id
        loggers.append(tracker)
    if set(ids) & set(names):
        ids_file.write_text(json.dumps(ids, indent=1) + "\n")
    return loggers


def flatten(row: dict, prefix: str = "") -> dict[str, float]:
    """Finite numbers of a metrics row as `prefix/key` (nested dicts joined with "/"); step left out."""
    flat: dict[str, float] = {}
    for key, value in row.items():
        name = f"{prefix}/{key}" if prefix else key
        if isinstance(value, dict):
            flat.update(flatten(value, name))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step" \
                and math.isfinite(value):
            flat[name] = float(value)
    return flat
