"""Training is built once (issue 31 item 2): the training stage resolves its settings exactly once
(`TrainingJob.resolve`), and `fit` takes the resolved job and callbacks, not a dozen loose pieces."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import pytest
import torch
from test_train_stage import config, context, make_run

from langadapt.planning import training as train_settings
from langadapt.recipe.train import EngineConfig, TrainingSlice
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.stage import run


def test_the_training_stage_resolves_its_settings_once(tmp_path: Path, tiny_en_llama: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted wherever `resolve_training` is bound (a module that imports it by name holds its own
    reference), so a second call from the stage, `fit` or anything between them fails the test."""
    original, calls = train_settings.resolve_training, []

    def counted(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith("langadapt") \
                and getattr(module, "resolve_training", None) is original:
            monkeypatch.setattr(module, "resolve_training", counted)
    make_run(tmp_path, tiny_en_llama)
    summary = run(TrainingSlice("stage1", config(steps=1), EngineConfig(), {"nb_wiki": {"weight": 1.0}}),
                  context(tmp_path, "stage1"))
    assert calls == ["stage1"]
    assert summary["steps"] == 1 and summary["settings"]["trainable"] == "embeddings"


def test_fit_takes_the_job_callbacks_and_validation_only() -> None:
    """Everything else comes from the job; held-out validation is its own argument because `fit`
    calls it itself, on every rank (a collective), not through the callbacks (review s19 L3)."""
    assert list(inspect.signature(fit).parameters) == ["model", "stream", "job", "callbacks", "validation"]


def test_a_resolved_job_is_frozen_and_carries_the_resolvers_settings(tmp_path: Path) -> None:
    stage = config(grad_accum_steps=2)
    job = TrainingJob.resolve(stage, EngineConfig(), tmp_path, seed=3, stage_name="stage2")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert job.settings == train_settings.resolve_training("stage2", stage, EngineConfig(), 1, device)
    assert (job.stage, job.settings.global_batch, job.settings.trainable, job.seed) == ("stage2", 4, "all", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.seed = 4  # type: ignore[misc]


def test_a_zero3_stage_builds_its_deepspeed_config_once_and_loads_and_trains_with_that_dict(
        tmp_path: Path, tiny_en_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39 item 6: ZeRO-3 loading and the DeepSpeed engine each built the JSON from the same four
    pieces. Now the job builds it once; the dict `HfDeepSpeedConfig` partitions the model with and the
    one `deepspeed.initialize` gets are that dict, carried over by the stage's `replace`."""
    import deepspeed

    from langadapt.train.engines import deepspeed_engine, deepspeed_json

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    built, loaded_with, initialised_with = [], [], []
    build, load, initialize = (deepspeed_json.deepspeed_config, deepspeed_engine.load_model_for_zero3,
                               deepspeed.initialize)

    def counted_build(*args, **kwargs):
        built.append(build(*args, **kwargs))
        return built[-1]

    def recorded_load(path, ds_config, **kwargs):
        loaded_with.append(ds_config)
        return load(path, ds_config, **kwargs)

    def recorded_initialize(*args, config=None, **kwargs):
        initialised_with.append(config)
        return initialize(*args, config=config, **kwargs)

    monkeypatch.setattr(deepspeed_json, "deepspeed_config", counted_build)
    monkeypatch.setattr(deepspeed_engine, "load_model_for_zero3", recorded_load)
    monkeypatch.setattr(deepspeed, "initialize", recorded_initialize)
    make_run(tmp_path, tiny_en_llama)
    summary = run(TrainingSlice("stage2", config(steps=1), EngineConfig(kind="deepspeed", zero_stage=3),
                                {"nb_wiki": {"weight": 1.0}}), context(tmp_path, "stage2"))
    assert summary["steps"] == 1 and summary["zero_stage"] == 3
    assert len(built) == 1
    assert len(loaded_with) == 1 and loaded_with[0] is built[0]
    assert len(initialised_with) == 1 and initialised_with[0] is built[0]


def test_the_deepspeed_config_is_built_with_the_job_and_survives_replace(tmp_path: Path) -> None:
    """A raw DeepSpeed value that contradicts the recipe fails at `resolve`, before a model loads; a
    job of another engine has none; `dataclasses.replace` (the stage adds the tokenizer) keeps the dict."""
    from langadapt.errors import LangadaptError

    engine = EngineConfig(kind="deepspeed", zero_stage=2)
    job = TrainingJob.resolve(config(), engine, tmp_path, seed=0, stage_name="stage2")
    assert job.deepspeed_config["zero_optimization"]["stage"] == 2
    assert job.deepspeed_config["train_batch_size"] == job.settings.global_batch
    assert dataclasses.replace(job, tokenizer="tok").deepspeed_config is job.deepspeed_config
    assert TrainingJob.resolve(config(), EngineConfig(), tmp_path, seed=0).deepspeed_config is None
    clash = engine.model_copy(update={"deepspeed_config": {"gradient_clipping": 5.0}})
    with pytest.raises(LangadaptError, match="engine.deepspeed_config.gradient_clipping = 5.0 contradicts "
                                             "stage2.grad_clip"):
        TrainingJob.resolve(config(), clash, tmp_path, seed=0, stage_name="stage2")


def test_the_run_label_is_the_run_folder_and_the_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One derivation for the console and the trackers, from the stage folder a job writes to."""
    def label(out_dir: Path, stage_name: str | None) -> str:
        return TrainingJob.resolve(config(steps=1), EngineConfig(), out_dir, seed=0, stage_name=stage_name).run_label

    assert label(tmp_path / "runs" / "demo" / "stage2", "stage2") == "demo/stage2"
    assert label(tmp_path / "runs" / ".." / "runs" / "demo" / "stage1", "stage1") == "demo/stage1"
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path / "runs")
    assert label(Path("out"), None) == "runs/train"  # a library caller's relative folder
