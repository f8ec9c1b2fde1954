"""A DeepSpeed stage gives its memory back when `fit` returns, while the caller still holds the model
(as the training stage does until the evaluate/export stages of the same process run).

On an H100 a ZeRO-3 engine's fp32 master weights and Adam moments (16 bytes per parameter, 17 GiB
for 1.1B parameters) stayed allocated after its stage: the parameters reached the optimizer, and
two process-wide DeepSpeed structures kept the engine (see `DeepSpeedEngine.release`)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_fit_frees_the_engine_its_optimizer_and_the_fp32_masters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  zero: int) -> None:
    import deepspeed
    from helpers.synthetic import SyntheticStream, tiny_llama
    from test_train_resume import SEQ, VOCAB, stage_config

    from langadapt.recipe.train import EngineConfig
    from langadapt.train.job import TrainingJob
    from langadapt.train.loop import fit

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    built: dict[str, weakref.ref] = {}
    initialize = deepspeed.initialize

    def recording_initialize(*args, **kwargs):
        engine, optimizer, *rest = initialize(*args, **kwargs)
        built.update(engine=weakref.ref(engine), optimizer=weakref.ref(optimizer))
        masters = getattr(optimizer, "single_partition_of_fp32_groups", None) or getattr(
            optimizer, "fp32_partitioned_groups_flat", None)  # ZeRO-1/2, ZeRO-3; ZeRO-0 fp32: the model's own
        built.update({f"fp32 master {i}": weakref.ref(t) for i, t in enumerate(masters or [])})
        return engine, optimizer, *rest

    monkeypatch.setattr(deepspeed, "initialize", recording_initialize)
    model = tiny_llama(VOCAB)
    fit(model, SyntheticStream(VOCAB, SEQ),
        TrainingJob.resolve(stage_config(2), EngineConfig(kind="deepspeed", zero_stage=zero), tmp_path, seed=0))
    gc.collect()
    assert len(built) >= (2 if zero == 0 else 3)
    assert [name for name, ref in built.items() if ref() is not None] == []
    # Once the caller lets the model go, it goes too (ZeRO-3's process-wide module stack and memo held it).
    held = weakref.ref(model)
    del model
    gc.collect()
    assert held() is None


def test_after_release_a_second_engine_in_the_same_process_trains(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Release clears process-wide ZeRO-3 state (a module stack, a memo): the next engine must not miss it."""
    from helpers.synthetic import SyntheticStream, tiny_llama
    from test_train_resume import SEQ, VOCAB, stage_config

    from langadapt.recipe.train import EngineConfig
    from langadapt.train.job import TrainingJob
    from langadapt.train.loop import fit

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    losses = []
    for run in ("first", "second"):
        result = fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
                     TrainingJob.resolve(stage_config(2), EngineConfig(kind="deepspeed", zero_stage=3), tmp_path / run,
                                         seed=0))
        losses.append(result.final_loss)
    assert losses[0] == losses[1]  # same data, same init: the second engine is not disturbed by the first
