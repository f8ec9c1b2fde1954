"""W&B and MLflow beside TensorBoard, in their offline modes: the same scalars at the same steps
in all three, read back from what each wrote; a resumed stage continues the same tracker run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers.monitoring import drive
from helpers.trackers import tensorboard_scalars, wandb_scalars

from langadapt.errors import LangadaptError
from langadapt.recipe.train import TrainStageConfig
from langadapt.run.trackers import RUN_IDS, open_trackers
from langadapt.train.monitoring.defaults import default_callbacks
from langadapt.train.monitoring.validation import Validation


class EveryThirdStep(Validation):
    """Due every third step; its loss falls with the step."""

    def __init__(self) -> None:  # no held-out sets: `due` and `run` below stand in for them
        pass

    def due(self, step: int, total: int) -> bool:
        self.step = step
        return step % 3 == 0

    def run(self, engine) -> dict:
        return {"valid": {"nb": {"loss": 3.0 - self.step / 10, "bits_per_byte": 1.5, "tokens": 64}},
                "valid_seconds": 0.01}


def log_steps(out: Path, loggers: list[str], steps: range, total: int) -> None:
    callbacks = default_callbacks(TrainStageConfig(steps=total, log_every=2, loggers=loggers), out, "demo/stage2")
    drive(callbacks, steps, total, loss=lambda step: 4.0 / step, lr=lambda step: 1e-3 * step, log_every=2,
          validation=EveryThirdStep())


def mlflow_scalars(tracking: Path) -> tuple[dict[tuple[str, int], float], list[str]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.as_uri())
    runs = client.search_runs([client.get_experiment_by_name("demo").experiment_id])
    assert [r.info.run_name for r in runs] == ["demo/stage2"]
    run = runs[0]
    scalars = {(m.key, m.step): m.value for key in run.data.metrics
               for m in client.get_metric_history(run.info.run_id, key)}
    return scalars, [r.info.run_id for r in runs]


def test_wandb_and_mlflow_get_the_same_scalars_as_tensorboard(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out = tmp_path / "demo" / "stage2"
    log_steps(out, ["tensorboard", "wandb", "mlflow"], range(1, 7), total=10)
    log_steps(out, ["tensorboard", "wandb", "mlflow"], range(7, 11), total=10)  # resumed after step 6
    board = tensorboard_scalars(out / "tensorboard")
    assert board[("train/loss", 10)] == pytest.approx((4 / 9 + 4 / 10) / 2)
    assert board[("valid/nb/loss", 9)] == pytest.approx(2.1)
    assert {("train/tokens", s) for s in (2, 4, 6, 8, 10)} <= set(board)
    tracked, run_ids = mlflow_scalars(tmp_path / "mlruns")
    assert len(run_ids) == 1  # the resumed half went into the same run
    for name, scalars in (("wandb", wandb_scalars(out)), ("mlflow", tracked)):
        assert set(scalars) == set(board), name
        for key, value in board.items():
            assert math.isclose(scalars[key], value, rel_tol=1e-6), (name, key)
    assert set((out / RUN_IDS).read_text().split('"')) >= {"wandb", "mlflow"}


def test_a_logger_that_is_not_installed_is_a_one_line_error(tmp_path: Path, monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(LangadaptError, match=r"loggers: wandb is not installed \(pip install 'langadapt\[wandb\]'\)"):
        open_trackers(["wandb"], tmp_path, "demo/stage2")
