"""The trackers show the whole run: stage 1 and stage 2 on one step axis, the resolved recipe as
each tracker run's configuration, the evaluation's numbers at the end; read back from the files
TensorBoard, W&B (offline) and MLflow (a local file store) wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.trackers import (
    tensorboard_events,
    tensorboard_scalars,
    wandb_config,
    wandb_scalars,
    wandb_summary,
)

from langadapt.recipe.train import CheckpointConfig, EngineConfig, TrainingSlice, TrainStageConfig
from langadapt.run.completion import write_manifest
from langadapt.run.context import StageContext
from langadapt.run.layout import MARKER, RunLayout
from langadapt.run.trackers import log_evaluation
from langadapt.train.stage import run

RECIPE = {"name": "demo", "seed": 7, "stage1": {"steps": 3, "optimizer": {"lr": 0.003}},
          "stage2": {"steps": 2, "optimizer": {"lr": 0.001}}, "data": {"sources": [{"name": "nb_wiki"}]}}
RESULTS = {"models": {"adapted": {"nb": {"bits_per_byte": 1.25, "tokens": 900}},
                      "base": {"nb": {"bits_per_byte": 2.5, "tokens": 900}}}}


def make_run(run_dir: Path, model: Path) -> RunLayout:
    """A run directory as the pipeline leaves it before stage 1: resolved recipe, embeddings
    model, tokenizer, token shards."""
    layout = RunLayout(run_dir)
    shutil.copytree(model, layout.embeddings.model)
    (layout.embeddings.root / MARKER).write_text("")
    layout.tokenizer.tokenizer.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model / name, layout.tokenizer.tokenizer / name)
    folder = layout.tokenizer.tokens / "nb_wiki"
    folder.mkdir(parents=True)
    np.random.default_rng(0).integers(3, 8192, size=6000, dtype=np.uint16).tofile(folder / "tokens.bin")
    (folder / "meta.json").write_text(json.dumps({"source": "nb_wiki", "dtype": "uint16", "num_tokens": 6000,
                                                  "num_docs": 1, "eos_id": 1, "vocab_size": 8192, "lang": "nb",
                                                  "role": "target"}))
    layout.resolved_recipe.write_text(yaml.safe_dump(RECIPE))
    return layout


def train(layout: RunLayout, name: str, steps: int, loggers: list[str]) -> dict:
    """One training stage as the pipeline runs it: the stage, then its manifest and marker."""
    config = TrainStageConfig(steps=steps, micro_batch_size=2, seq_len=32, log_every=1, loggers=loggers,
                              checkpoint=CheckpointConfig(every_steps=None, at_end=False))
    layout.stage_dir(name).mkdir(parents=True, exist_ok=True)
    ctx = StageContext(run_dir=layout.root, stage=name, seed=7)
    summary = run(TrainingSlice(name, config, EngineConfig(), {"nb_wiki": {"weight": 1.0}},
                                after_stage1=name == "stage2"), ctx)
    write_manifest(layout.stage_dir(name), {"summary": summary})
    return summary


def jsonl_losses(layout: RunLayout, stage: str) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in layout.trained(stage).metrics.read_text().splitlines()]
    return [(row["step"], row["loss"]) for row in rows if "loss" in row]


def test_tensorboard_draws_stage1_and_stage2_as_one_curve_with_the_recipe(tmp_path: Path, tiny_en_llama: Path) -> None:
    layout = make_run(tmp_path / "demo", tiny_en_llama)
    train(layout, "stage1", 3, ["tensorboard"])
    summary = train(layout, "stage2", 2, ["tensorboard"])
    curve: dict[int, float] = {}
    for stage in ("stage1", "stage2"):
        scalars = tensorboard_scalars(layout.stage_dir(stage) / "tensorboard")
        steps = {step for tag, step in scalars if tag == "train/loss"}
        assert not steps & set(curve)  # no step drawn twice
        curve.update({step: scalars[("train/loss", step)] for step in steps})
    assert sorted(curve) == [1, 2, 3, 4, 5]  # stage 2 goes on where stage 1 ended
    # the same numbers as metrics.jsonl, whose steps stay per stage
    expected = jsonl_losses(layout, "stage1") + [(3 + s, loss) for s, loss in jsonl_losses(layout, "stage2")]
    assert [curve[step] for step, _ in expected] == pytest.approx([loss for _, loss in expected], rel=1e-6)

    events = tensorboard_events(layout.stage2.root / "tensorboard")
    hparams = events.PluginTagToContent("hparams")
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    start = HParamsPluginData.FromString(hparams["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["stage2.optimizer.lr"].number_value == pytest.approx(0.001)
    assert start.hparams["stage1.steps"].number_value == 3
    assert json.loads(start.hparams["data.sources"].string_value) == [{"name": "nb_wiki"}]
    (text,) = events.Tensors("recipe/text_summary")
    assert yaml.safe_load(text.tensor_proto.string_val[0].decode().strip("`").removeprefix("yaml")) == RECIPE

    assert summary["elapsed_seconds"] > 0 and summary["tokens_per_second"] > 0  # new summary fields
    assert log_evaluation(layout, RESULTS, layout.evaluate) == ["tensorboard"]
    evaluated = tensorboard_scalars(layout.evaluate / "tensorboard")
    assert evaluated == {("eval/adapted/nb/bits_per_byte", 5): 1.25, ("eval/adapted/nb/tokens", 5): 900.0,
                         ("eval/base/nb/bits_per_byte", 5): 2.5, ("eval/base/nb/tokens", 5): 900.0}


def test_wandb_and_mlflow_get_the_recipe_the_run_axis_and_the_evaluation(tmp_path: Path, tiny_en_llama: Path,
                                                                          monkeypatch) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the default: a file store in the run directory
    layout = make_run(tmp_path / "demo", tiny_en_llama)
    train(layout, "stage1", 3, ["wandb", "mlflow"])
    train(layout, "stage2", 2, ["wandb", "mlflow"])
    assert log_evaluation(layout, RESULTS, layout.evaluate) == ["wandb", "mlflow"]

    config = wandb_config(layout.stage2.root)
    assert config == RECIPE  # wandb.init(config=...): the resolved recipe, nested
    assert sorted(step for tag, step in wandb_scalars(layout.stage2.root) if tag == "train/loss") == [4, 5]
    assert sorted(step for tag, step in wandb_scalars(layout.stage1.root) if tag == "train/loss") == [1, 2, 3]
    assert wandb_summary(layout.evaluate)["eval/adapted/nb/bits_per_byte"] == 1.25  # the stage-2 run's summary
    ids = {stage: json.loads((layout.stage_dir(stage) / "tracker_runs.json").read_text())["ids"]
           for stage in ("stage1", "stage2")}
    assert {p.name.split("-")[-1] for p in (layout.evaluate / "wandb").glob("offline-run-*")} == {ids["stage2"]["wandb"]}

    client = MlflowClient(tracking_uri=(layout.root / "mlruns").as_uri())
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("demo").experiment_id])}
    assert sorted(runs) == ["demo/stage1", "demo/stage2"]
    stage2 = runs["demo/stage2"]
    assert stage2.info.run_id == ids["stage2"]["mlflow"]
    assert stage2.data.params["stage2.optimizer.lr"] == "0.001" and stage2.data.params["seed"] == "7"
    assert [m.step for m in client.get_metric_history(stage2.info.run_id, "train/loss")] == [4, 5]
    (evaluated,) = client.get_metric_history(stage2.info.run_id, "eval/adapted/nb/bits_per_byte")
    assert (evaluated.step, evaluated.value) == (5, 1.25)
