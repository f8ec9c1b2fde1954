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


def test_fit_takes_the_job_and_callbacks_only() -> None:
    assert list(inspect.signature(fit).parameters) == ["model", "stream", "job", "callbacks"]


def test_a_resolved_job_is_frozen_and_carries_the_resolvers_settings(tmp_path: Path) -> None:
    stage = config(grad_accum_steps=2)
    job = TrainingJob.resolve(stage, EngineConfig(), tmp_path, seed=3, stage_name="stage2")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert job.settings == train_settings.resolve_training("stage2", stage, EngineConfig(), 1, device)
    assert (job.stage, job.settings.global_batch, job.settings.trainable, job.seed) == ("stage2", 4, "all", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.seed = 4  # type: ignore[misc]
