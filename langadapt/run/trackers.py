"""A run's experiment trackers: TensorBoard (default), Weights & Biases, MLflow.

Every tracker receives the same flat `{name: value}` dict per logged step (`train/loss`,
`valid/nb/bits_per_byte`, ...), so the three never disagree; metrics.jsonl stays the record of
truth. All three share one step axis over the whole run: a training stage logs at the steps of the
run's earlier training stages plus its own (stage 2 of an 8 + 8-step run logs steps 9..16), so
stage 1 and stage 2 draw one continuous curve. Each tracker run gets the resolved recipe as its
configuration (W&B `config`, TensorBoard hparams plus the YAML as text, MLflow params, flattened
to dotted keys), and the evaluate stage adds its numbers to the last training stage's tracker runs
(`log_evaluation`).

W&B and MLflow are optional installs (`pip install 'langadapt[wandb]'` / `[mlflow]`) configured
the way their users already do it, through their environment variables: WANDB_PROJECT (default
"langadapt"), WANDB_MODE=offline for clusters without internet (then `wandb sync` later);
MLFLOW_TRACKING_URI (default: a file store `mlruns/` in the run directory).

This module lives in `run`, not `train`, because the evaluate stage writes to the trackers too:
each stage keeps which trackers it opened, their run ids and its last step in `tracker_runs.json`
in its folder, which also lets a resumed stage continue the same tracker runs (W&B
`resume="allow"`, MLflow by run id).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from langadapt.errors import LangadaptError
from langadapt.recipe.hints import pip_install
from langadapt.run.layout import MARKER, STAGES, TRAINING_STAGES, RunLayout

log = logging.getLogger("langadapt")

RUN_IDS = "tracker_runs.json"
TRACKERS = ("tensorboard", "wandb", "mlflow")


class Tracker(Protocol):
    def log(self, scalars: dict[str, float], step: int) -> None: ...
    def close(self) -> None: ...


@dataclass
class TrackerRecord:
    """What a stage's `tracker_runs.json` keeps: the trackers it opened, their run ids, its last global step."""

    names: list[str] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)
    last_step: int | None = None

    @classmethod
    def load(cls, stage_dir: Path) -> TrackerRecord:
        path = stage_dir / RUN_IDS
        saved = json.loads(path.read_text()) if path.is_file() else {}
        return cls(**{key: saved[key] for key in ("names", "ids", "last_step") if key in saved})

    def save(self, stage_dir: Path) -> None:
        (stage_dir / RUN_IDS).write_text(json.dumps(asdict(self), indent=1) + "\n")


class TensorBoardTracker:
    def __init__(self, out_dir: Path, config: dict[str, Any] | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out_dir / "tensorboard"))
        if config:
            self._write_config(config)

    def _write_config(self, config: dict[str, Any]) -> None:
        """The recipe as hparams of THIS event file (`SummaryWriter.add_hparams` would open a new
        run folder beside it) and as YAML text, which keeps the lists hparams cannot hold."""
        import yaml
        from torch.utils.tensorboard.summary import hparams

        flat = {key: value if isinstance(value, (int, float, str, bool)) else json.dumps(value)
                for key, value in flatten_config(config).items()}
        for summary in hparams(flat, {}):
            self.writer.file_writer.add_summary(summary)
        self.writer.add_text("recipe", "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```")

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run writing its files under `out_dir`.

    `lands_in`: where `out_dir` will be once its stage completes (the pipeline builds evaluate in
    `.evaluate.partial/` and renames it). W&B's own lines name the folder it writes to, so an
    offline run used to end with `wandb sync .../.evaluate.partial/wandb/offline-run-...`, a path
    gone a moment later; such a run is silenced and `close` logs the sync command for the folder
    where the files land."""

    def __init__(self, out_dir: Path, run_name: str, run_id: str | None, config: dict[str, Any] | None,
                 lands_in: Path | None = None) -> None:
        wandb = _require("wandb", "wandb")
        self.out_dir, self.lands_in = out_dir, lands_in
        settings = wandb.Settings(silent=True) if lands_in is not None else None
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "langadapt"), name=run_name,
                              group=run_name.split("/")[0], dir=str(out_dir), id=run_id, resume="allow",
                              config=config, settings=settings)
        self.id = self.run.id

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def summarize(self, scalars: dict[str, float]) -> None:
        """Final numbers (the evaluation) in the run's summary: W&B's runs table shows them."""
        self.run.summary.update(scalars)

    def close(self) -> None:
        offline, sync_dir = self.run.settings.mode == "offline", Path(self.run.settings.sync_dir)
        self.run.finish()
        if self.lands_in is not None and offline:
            log.info("W&B is offline: upload these numbers with: %s", wandb_sync_command(
                landed(sync_dir, self.out_dir, self.lands_in)))


def wandb_sync_command(sync_dir: Path) -> str:
    """`wandb sync DIR` for an offline run's folder (`.../wandb/offline-run-<time>-<id>`)."""
    return shlex.join(["wandb", "sync", str(sync_dir)])


def landed(path: Path, work: Path, final: Path) -> Path:
    """`path` inside `work` as it will be named once `work` is renamed to `final`."""
    try:
        return final / path.relative_to(work)
    except ValueError:
        return path


class MlflowTracker:
    def __init__(self, out_dir: Path, run_name: str, run_id: str | None, config: dict[str, Any] | None) -> None:
        _require("mlflow", "mlflow")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:  # MLflow 3 keeps its file store only on request; it needs no server
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (out_dir.resolve().parent / "mlruns").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        if run_id is not None:  # params are write-once in MLflow: a resumed run keeps those it began with
            self.id = run_id
            return
        experiment = run_name.split("/")[0]
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        # a long list (data.sources) is cut to MLflow's limit: the full recipe is in the run directory
        params = [Param(key, str(value)[:MAX_PARAM_VAL_LENGTH]) for key, value in flatten_config(config or {}).items()]
        for first in range(0, len(params), 100):  # MLflow's batch limit is 100 params
            self.client.log_batch(self.id, params=params[first : first + 100])

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
        raise LangadaptError(f"loggers: {module} is not installed ({pip_install(f'langadapt[{extra}]')})") from error


def open_trackers(names: list[str], out_dir: Path, run_name: str, config: dict[str, Any] | None = None,
                  ids: dict[str, str] | None = None, lands_in: Path | None = None) -> tuple[list[Tracker], dict[str, str]]:
    """The trackers `names` lists, writing under `out_dir`, each continuing the run `ids` names
    (W&B, MLflow) or starting one with `config`; returns them and the ids of their runs.
    `lands_in`: where `out_dir` is renamed to when its stage completes (`WandbTracker`)."""
    ids = dict(ids or {})
    trackers: list[Tracker] = []
    try:
        for name in dict.fromkeys(names):
            if name == "tensorboard":
                trackers.append(TensorBoardTracker(out_dir, config))
                continue
            tracker = (WandbTracker(out_dir, run_name, ids.get(name), config, lands_in) if name == "wandb"
                       else MlflowTracker(out_dir, run_name, ids.get(name), config))
            ids[name] = tracker.id
            trackers.append(tracker)
    except BaseException:
        for tracker in trackers:
            tracker.close()
        raise
    return trackers, ids


def log_evaluation(layout: RunLayout, results: dict, out_dir: Path) -> list[str]:
    """The evaluate stage's numbers (`evaluation_scalars`) into the tracker runs of the
    run's last trained stage, at its last step; TensorBoard's go to `out_dir/tensorboard` (a stage
    writes in its own folder), on the same axis. Returns the trackers written to ([]: none)."""
    stage = next((s for s in reversed(TRAINING_STAGES) if (layout.stage_dir(s) / MARKER).is_file()
                  and (layout.stage_dir(s) / RUN_IDS).is_file()), None)
    if stage is None:
        return []
    record = TrackerRecord.load(layout.stage_dir(stage))
    scalars = evaluation_scalars(results)
    if not record.names or not scalars:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    trackers, _ = open_trackers(record.names, out_dir, f"{layout.root.name}/{stage}", ids=record.ids,
                                lands_in=final_folder(layout, out_dir))
    try:
        for tracker in trackers:
            if isinstance(tracker, WandbTracker):  # W&B keeps final numbers in the run's summary
                tracker.summarize(scalars)
            else:
                tracker.log(scalars, record.last_step or 0)
    finally:
        for tracker in trackers:
            tracker.close()
    return record.names


def evaluation_scalars(results: dict) -> dict[str, float]:
    """Every number results.json holds per model, as tracker scalars: held-out text as
    `eval/<model>/<lang>/<metric>` and tasks as `eval/<model>/<suite>/<task>/<metric>` (minimal-pair
    accuracy and its stderr, chrF and BLEU per direction, lm-eval's per sub-task), so runs compare
    on task metrics in the trackers' tables as they do on bits per byte."""
    scalars = flatten(results.get("models", {}), "eval")
    for key, per_model in results.get("tasks", {}).items():
        for model, metrics in per_model.items():
            if isinstance(metrics, dict):  # besides the models: the task's "kind" and "lang"
                scalars.update(flatten(metrics, f"eval/{model}/{key}"))
    return scalars


def final_folder(layout: RunLayout, folder: Path) -> Path | None:
    """Where `folder`, a stage's work folder in `layout`, is renamed to when the stage completes;
    None when it is written in place (a training stage, or a folder outside the pipeline)."""
    final = layout.final()
    for stage in STAGES:
        if layout.stage_dir(stage) == folder and final.stage_dir(stage) != folder:
            return final.stage_dir(stage)
    return None


def flatten(row: dict, prefix: str = "") -> dict[str, float]:
    """Finite numbers of a metrics row as `prefix/key` (nested dicts joined with "/"); step left out."""
    flat: dict[str, float] = {}
    for key, value in row.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            flat.update(flatten(value, name))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step" \
                and math.isfinite(value):
            flat[name] = float(value)
    return flat


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested recipe as dotted keys (`stage2.optimizer.lr`); lists and None kept as values."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten_config(value, name))
        else:
            flat[name] = value
    return flat
