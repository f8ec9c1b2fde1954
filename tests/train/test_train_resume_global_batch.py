"""A resume whose global batch changed (another world size, `global_batch_size` unset) stops with
one line naming the cause, both batches and world sizes, and the fix, before any weights load;
`fit` divides the loss by the accumulation the job derived, not the recipe's grad_accum_steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_train_stage import config, context, make_run

from langadapt.errors import LangadaptError
from langadapt.recipe.train import EngineConfig, TrainingSlice, TrainStageConfig
from langadapt.train.stage import run

MIXTURE = {"nb_wiki": {"weight": 1.0}}


def test_resuming_with_another_global_batch_names_it(tmp_path: Path, tiny_en_llama: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    make_run(tmp_path, tiny_en_llama)
    # As if written by 2 ranks: micro 2 x accum 2 on this one rank trains the 4 sequences a step
    # that 2 ranks x micro 2 x accum 1 do.
    first = config(steps=2, grad_accum_steps=2)
    run(TrainingSlice("stage1", first, EngineConfig(), MIXTURE), context(tmp_path, "stage1"))

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights were read before the data position was checked")

    monkeypatch.setattr("langadapt.train.engines.torch_engine.TorchEngine.load", no_weights)
    with pytest.raises(LangadaptError) as caught:  # the same stage on 1 rank: micro 2 x accum 1 x 1
        run(TrainingSlice("stage1", config(steps=2), EngineConfig(), MIXTURE),
            context(tmp_path, "stage1"))
    line = str(caught.value)
    assert "\n" not in line and "targets" not in line
    assert line.startswith("stage1: cannot resume ") and "step_00000002" in line
    assert "the global batch changed: 4 -> 2 sequences (world size 2 -> 1; " in line
    assert line.endswith("resume on the world size it was saved with, or set stage1.global_batch_size to fix "
                         "the batch on any world size (the stage then trains again from its start)")


def test_a_fixed_global_batch_resumes_with_the_derived_accumulation(tmp_path: Path, tiny_en_llama: Path) -> None:
    make_run(tmp_path, tiny_en_llama)
    # micro 2, grad_accum_steps unset: accum 2 derived on this one rank
    fixed = TrainStageConfig(**config(steps=2).model_dump(exclude_unset=True, exclude={"grad_accum_steps"}), global_batch_size=4)
    assert "grad_accum_steps" not in fixed.model_fields_set
    summary = run(TrainingSlice("stage1", fixed, EngineConfig(), MIXTURE), context(tmp_path, "stage1"))
    assert summary["global_batch"] == 4 and summary["settings"]["grad_accum"] == 2
    assert summary["tokens"] == 2 * 4 * 32
    again = run(TrainingSlice("stage1", fixed, EngineConfig(), MIXTURE), context(tmp_path, "stage1"))
    assert again["resumed_from_step"] == 2
