"""The DeepSpeed engine (single process, CPU, gloo): a worker process SIGKILLed at a random step,
resumed by another process (this one: DeepSpeed imports cost ~10 s a process, the torch-engine
test already chains three fresh workers), ends bit-identical to an uninterrupted run, for ZeRO-0
and ZeRO-1; and stage 1 under DeepSpeed leaves the frozen body bit-identical."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
import torch
from test_train_resume import (
    ACCUM,
    MICRO,
    SEQ,
    VOCAB,
    assert_bit_identical,
    final_weights,
    latest_step,
    run_worker,
    train,
)


@pytest.mark.parametrize("zero", [0, 1])
def test_deepspeed_sigkill_then_resume_is_bit_identical(tmp_path: Path, zero: int) -> None:
    steps = 9
    reference = tmp_path / "reference"
    train(reference, steps, "deepspeed", zero)

    out = tmp_path / "interrupted"
    code, _ = run_worker(out, steps, "deepspeed", zero, stop_at=random.Random(zero).randint(4, 6))
    assert code == -signal.SIGKILL
    resumed_from = latest_step(out)
    assert resumed_from in (3, 6)
    assert (out / "checkpoints" / f"step_{resumed_from:08d}" / "deepspeed").is_dir()

    record = train(out, steps, "deepspeed", zero)
    assert record == {"first_position": resumed_from * MICRO * ACCUM, "served": (steps - resumed_from) * MICRO * ACCUM}
    assert_bit_identical(final_weights(reference), final_weights(out))


def test_deepspeed_stage1_keeps_the_frozen_body_bit_identical(tmp_path: Path) -> None:
    from helpers.synthetic import SyntheticStream, tiny_llama
    from test_train_resume import stage_config

    from langadapt.recipe.train import EngineConfig
    from langadapt.train.job import TrainingJob
    from langadapt.train.loop import fit

    model = tiny_llama(VOCAB)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, SyntheticStream(VOCAB, SEQ),
        TrainingJob.resolve(stage_config(4), EngineConfig(kind="deepspeed", zero_stage=1), tmp_path, seed=0,
                            stage_name="stage1"))
    after = final_weights(tmp_path)
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved == {"model.embed_tokens.weight", "lm_head.weight"}


@pytest.mark.parametrize("zero", [0, 1])
def test_deepspeed_skips_a_nan_step_without_touching_weights_or_moments(tmp_path: Path, zero: int) -> None:
    from helpers.synthetic import SyntheticStream, tiny_llama
    from test_train_fit import nan_on_steps
    from test_train_resume import stage_config

    from langadapt.recipe.train import CheckpointConfig, EngineConfig
    from langadapt.train.job import TrainingJob
    from langadapt.train.loop import fit

    model = tiny_llama(VOCAB)
    nan_on_steps(model, {2}, accum=ACCUM)
    config = stage_config(3).model_copy(update={"checkpoint": CheckpointConfig(every_steps=1, keep_last=5)})
    result = fit(model, SyntheticStream(VOCAB, SEQ),
                 TrainingJob.resolve(config, EngineConfig(kind="deepspeed", zero_stage=zero), tmp_path, seed=0))
    assert result.skipped_steps == 1

    def saved(step: int) -> dict:
        folder = tmp_path / "checkpoints" / f"step_{step:08d}" / "deepspeed"
        return {f.name: torch.load(f, weights_only=False) for f in folder.glob("*.pt")}

    def tensors(state: object) -> list[torch.Tensor]:
        if isinstance(state, torch.Tensor):
            return [state]
        if isinstance(state, dict):
            return [t for key in sorted(state, key=str) for t in tensors(state[key])]
        if isinstance(state, (list, tuple)):
            return [t for item in state for t in tensors(item)]
        return []

    one, two, three = saved(1), saved(2), saved(3)
    assert len(tensors(one)) == len(tensors(two)) > 20
    assert all(torch.equal(a, b) for a, b in zip(tensors(one), tensors(two)))  # weights and Adam moments
    assert not all(torch.equal(a, b) for a, b in zip(tensors(two), tensors(three)))


def test_a_failed_universal_conversion_is_one_clear_error(tmp_path: Path) -> None:
    """A checkpoint DeepSpeed's converter cannot read: one LangadaptError line, no half-written copy."""
    from langadapt.errors import LangadaptError
    from langadapt.train.engines.deepspeed_engine import TAG, UNIVERSAL_TAG, convert_to_universal

    (tmp_path / TAG).mkdir()  # no shards in it
    with pytest.raises(LangadaptError, match="converting to a universal checkpoint failed") as failed:
        convert_to_universal(tmp_path, rank=0)
    assert "\n" not in str(failed.value)
    assert not (tmp_path / UNIVERSAL_TAG).exists()


def test_deepspeed_steps_the_body_at_body_lr_scale(tmp_path: Path) -> None:
    """ZeRO-1 wraps the optimizer and its groups: the body's group still steps at its fraction of the LR.
    One step (warm-up 1: the full LR) of Adam moves each weight by about its group's LR."""
    from helpers.synthetic import SyntheticStream, tiny_llama
    from test_train_resume import stage_config

    from langadapt.recipe.train import EngineConfig, OptimizerConfig, ScheduleConfig
    from langadapt.train.job import TrainingJob
    from langadapt.train.loop import fit

    model = tiny_llama(VOCAB)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = stage_config(1).model_copy(update={
        "optimizer": OptimizerConfig(lr=1e-2, weight_decay=0.0, body_lr_scale=0.25),
        "schedule": ScheduleConfig(kind="constant", warmup_steps=0)})
    fit(model, SyntheticStream(VOCAB, SEQ), TrainingJob.resolve(config, EngineConfig(kind="deepspeed", zero_stage=1),
                                                                tmp_path, seed=0))
    after = final_weights(tmp_path)
    moved = {k: float((after[k] - before[k]).abs().max()) for k in before}
    assert moved["model.embed_tokens.weight"] == pytest.approx(1e-2, rel=0.02)
    assert moved["model.layers.0.self_attn.q_proj.weight"] == pytest.approx(2.5e-3, rel=0.02)
