"""The training loop in one process: frozen weights stay put, loss falls, NaN steps are skipped,
checkpoints are atomic and pruned, metrics are written."""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path

import pytest
import torch
from helpers.monitoring import drive
from helpers.synthetic import SyntheticStream, tiny_llama
from safetensors.torch import load_file

from langadapt.errors import LangadaptError
from langadapt.recipe.train import (
    CheckpointConfig,
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.train.checkpoint import Checkpointer, TrainState
from langadapt.train.engines.base import Engine
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit

VOCAB, SEQ = 128, 16


def stage(steps: int, **overrides) -> TrainStageConfig:
    fields = dict(
        steps=steps, micro_batch_size=4, grad_accum_steps=2, seq_len=SEQ, log_every=1,
        optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.1),
        schedule=ScheduleConfig(kind="cosine", warmup_steps=2, min_lr_ratio=0.1),
        checkpoint=CheckpointConfig(every_steps=2, keep_last=2),
    )
    fields.update(overrides)
    return TrainStageConfig(**fields)


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_stage1_leaves_every_frozen_tensor_bit_identical_and_trains_the_embeddings(tmp_path: Path) -> None:
    model = tiny_llama(VOCAB)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = fit(model, SyntheticStream(VOCAB, SEQ),
                 TrainingJob.resolve(stage(8), EngineConfig(), tmp_path, seed=0, stage_name="stage1"))
    after = load_file(tmp_path / "model" / "model.safetensors")
    trained = {"model.embed_tokens.weight", "lm_head.weight"}
    assert set(after) == set(before)
    for name, tensor in before.items():
        if name in trained:
            assert not torch.equal(after[name], tensor), f"{name} did not train"
        else:  # weight decay 0.1 and lr 1e-2 would have moved any tensor the optimizer held
            assert torch.equal(after[name], tensor), f"frozen {name} changed"
    assert result.trainable_params == 2 * VOCAB * 32 and result.skipped_steps == 0
    losses = [r["loss"] for r in rows(tmp_path)]
    assert losses[-1] < losses[0]


def test_stage2_loss_decreases_and_metrics_have_the_documented_fields(tmp_path: Path) -> None:
    result = fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
                 TrainingJob.resolve(stage(16, log_every=4), EngineConfig(), tmp_path, seed=0))
    logged = rows(tmp_path)
    assert [r["step"] for r in logged] == [4, 8, 12, 16]
    for key in ("loss", "lr", "grad_norm", "tokens", "tokens_per_second", "tokens_per_second_per_device",
                "mfu", "peak_memory_mb"):
        assert key in logged[0]
    assert logged[0]["mfu"] is None  # CPU: no peak FLOP/s to compare with
    assert logged[-1]["tokens"] == 16 * 8 * SEQ == result.tokens
    assert logged[-1]["loss"] < logged[0]["loss"] - 0.3
    assert (tmp_path / "tensorboard").is_dir() and any((tmp_path / "tensorboard").iterdir())
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert checkpoints == ["latest", "step_00000014", "step_00000016"]  # keep_last 2
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step_00000016"


def nan_on_steps(model: torch.nn.Module, bad_steps: set[int], accum: int) -> None:
    """Make the LM head return NaN during the given (1-based) optimizer steps."""
    calls = {"n": 0}

    def hook(module, args, output):
        calls["n"] += 1
        step = (calls["n"] - 1) // accum + 1
        return output * float("nan") if step in bad_steps else output

    model.lm_head.register_forward_hook(hook)


def test_a_nan_step_is_skipped_without_touching_weights(tmp_path: Path) -> None:
    model = tiny_llama(VOCAB)
    nan_on_steps(model, {3}, accum=2)
    config = stage(4, checkpoint=CheckpointConfig(every_steps=1, keep_last=10))
    result = fit(model, SyntheticStream(VOCAB, SEQ), TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0))
    assert result.skipped_steps == 1
    weights = {s: load_file(tmp_path / "checkpoints" / f"step_{s:08d}" / "model.safetensors") for s in (2, 3, 4)}
    assert all(torch.equal(weights[2][k], weights[3][k]) for k in weights[2])
    assert not all(torch.equal(weights[3][k], weights[4][k]) for k in weights[3])
    assert rows(tmp_path)[2]["skipped_steps"] == 1 and rows(tmp_path)[2]["grad_norm"] is None


def test_k_nonfinite_steps_in_a_row_stop_with_the_last_good_checkpoint_intact(tmp_path: Path) -> None:
    model = tiny_llama(VOCAB)
    nan_on_steps(model, set(range(5, 100)), accum=2)
    config = stage(20, max_nonfinite_steps=3)
    with pytest.raises(LangadaptError, match=r"stage2: loss or gradient not finite for 3 steps in a row \(up to step 7"):
        fit(model, SyntheticStream(VOCAB, SEQ),
            TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0, stage_name="stage2"))
    root = tmp_path / "checkpoints"
    latest = root / (root / "latest").read_text()
    assert latest.name == "step_00000006" and not list(root.glob("*.tmp"))
    good = load_file(root / "step_00000004" / "model.safetensors")
    kept = load_file(latest / "model.safetensors")
    assert all(torch.equal(good[k], kept[k]) for k in good)  # skipped steps changed nothing
    assert not (tmp_path / "model").exists()


class ExplodingEngine(Engine):
    """Writes half a checkpoint, then dies (as a SIGKILL or a full disk would)."""

    def save(self, directory: Path) -> None:
        (directory / "model.safetensors").write_bytes(b"partial")
        raise OSError("disk full")


def test_a_crash_mid_write_leaves_latest_on_the_previous_complete_checkpoint(tmp_path: Path) -> None:
    fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
        TrainingJob.resolve(stage(4), EngineConfig(), tmp_path, seed=0))
    root = tmp_path / "checkpoints"
    ckpt = Checkpointer(root, CheckpointConfig(every_steps=2, keep_last=2))
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(TrainState(step=6), ExplodingEngine(), SyntheticStream(VOCAB, SEQ))
    assert (root / "step_00000006.tmp").is_dir()
    assert ckpt.latest() == root / "step_00000004"
    assert Checkpointer(root, CheckpointConfig()).latest() == root / "step_00000004"
    assert not (root / "step_00000006.tmp").exists()  # a new start sweeps the incomplete one


def test_metrics_mfu_per_device_and_resume_drops_rows_after_the_checkpoint(tmp_path: Path) -> None:
    from langadapt.recipe.train import TrainStageConfig
    from langadapt.train.monitoring.callbacks import StepCost
    from langadapt.train.monitoring.defaults import default_callbacks

    config, cost = TrainStageConfig(steps=4, log_every=1, loggers=[]), StepCost(1000, 6e6, 1e12, 2, torch.device("cpu"))
    drive(default_callbacks(config, tmp_path, "run/stage2"), range(1, 4), 4, cost=cost, loss=lambda step: 2.0)
    row = rows(tmp_path)[-1]
    assert row["tokens_per_second_per_device"] == pytest.approx(row["tokens_per_second"] / 2)
    assert row["mfu"] == pytest.approx(6e6 * row["tokens_per_second_per_device"] / 1e12)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "lo')  # a row cut short by SIGKILL
    # resumed from the step-2 checkpoint: step 3 again, not finite this time
    drive(default_callbacks(config, tmp_path, "run/stage2"), range(3, 4), 4, cost=cost, loss=lambda step: math.nan)
    logged = rows(tmp_path)
    assert [r["step"] for r in logged] == [1, 2, 3]
    assert logged[-1]["loss"] is None  # strict JSON, no NaN


def test_a_signal_latched_before_the_loop_stops_it_after_one_step(tmp_path: Path, monkeypatch) -> None:
    """Slurm's warning during model loading (latched by `langadapt run`): one step, a checkpoint,
    exit 75; the stop is then consumed, so a caller that catches it can train on."""
    from langadapt.runtime import signals

    monkeypatch.setattr(signals, "_latched", [])
    signals._remember(signal.SIGUSR1)  # what the latch's handler does
    with pytest.raises(signals.Preempted) as stopped:
        fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
            TrainingJob.resolve(stage(8), EngineConfig(), tmp_path, seed=0))
    assert stopped.value.code == signals.REQUEUE_EXIT_CODE and "at step 1" in str(stopped.value)
    latest = tmp_path / "checkpoints" / (tmp_path / "checkpoints" / "latest").read_text().strip()
    assert json.loads((latest / "trainer_state.json").read_text())["step"] == 1
    assert not signals.stop_pending()
    result = fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
                 TrainingJob.resolve(stage(8), EngineConfig(), tmp_path, seed=0))
    assert result.resumed_from == 1


@pytest.mark.parametrize("at_end", [True, False])
def test_checkpoint_at_end_switch_keeps_the_final_model(tmp_path: Path, at_end: bool) -> None:
    """`checkpoint.at_end: false` (throughput runs, `launch --sweep`): no optimizer state after the
    last step, but the final model is written as always."""
    config = stage(3, checkpoint=CheckpointConfig(every_steps=None, at_end=at_end))
    fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ), TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0))
    saved = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) if (tmp_path / "checkpoints").is_dir() else []
    assert saved == (["step_00000003"] if at_end else [])
    assert (tmp_path / "model" / "model.safetensors").is_file()


def test_final_loss_is_the_curves_last_point_and_the_last_step_is_named_apart(tmp_path: Path) -> None:
    """Issue 38: `final_loss` is the mean of the last logged window, the number metrics.jsonl's last
    row (the report's curve) holds, with the stage ending mid-window (8 steps, log every 3: the last
    row covers steps 7 and 8); the single last step is `last_step_loss`."""
    losses: list[float] = []
    from langadapt.train.monitoring.callbacks import Callback
    from langadapt.train.monitoring.defaults import default_callbacks

    config = stage(8, log_every=3)
    recorder = type("Recorder", (Callback,), {"on_step": lambda self, record: losses.append(record.loss)})()
    result = fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
                 TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0),
                 [*default_callbacks(config, tmp_path, "run/stage2"), recorder])
    last_row = rows(tmp_path)[-1]
    assert last_row["step"] == 8
    assert result.final_loss == pytest.approx(last_row["loss"], rel=1e-12)
    assert result.final_loss == pytest.approx(sum(losses[6:8]) / 2)  # steps 7 and 8: the window after step 6
    assert result.last_step_loss == losses[-1] != result.final_loss
