"""DeepSpeed under bf16 accumulates and reduces gradients in fp32, as the other engines do.

2 ranks, ZeRO-1/2/3, 16 micro-steps of a tiny Llama accumulated into one optimizer step
(tests/helpers/grad_accum_worker.py): the gradient the optimizer receives must equal the
float64 mean of the same micro-gradients, each reduced on its own, to fp32 rounding. DeepSpeed's
own bf16 default, put back through `engine.deepspeed_config`, is measured in the same run: it
must be far off (4e-3 when measured), or this test could not tell the two apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import fast_paths
from helpers import multiproc as mp

from langadapt.errors import LangadaptError
from langadapt.planning.training import check_engine
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.train.engines.deepspeed_json import deepspeed_config


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.slow
def test_accumulated_bf16_gradients_equal_their_exact_sum(zero: int, tmp_path: Path) -> None:
    fast_paths.check_deepspeed_bf16_gradients_are_exact(zero, tmp_path)  # shared with tests/gpu


def test_fp32_gradients_are_a_default_the_recipe_can_override() -> None:
    stage = TrainStageConfig(micro_batch_size=2, grad_accum_steps=4)
    for zero in (1, 2, 3):
        config = deepspeed_config(stage, "stage2", EngineConfig(kind="deepspeed", zero_stage=zero, precision="bf16"), 8)
        assert config["data_types"] == {"grad_accum_dtype": "fp32"} and config["communication_data_type"] == "fp32"
    raw = {"communication_data_type": "bf16", "data_types": {"grad_accum_dtype": "bf16"}}
    config = deepspeed_config(stage, "stage2", EngineConfig(kind="deepspeed", zero_stage=2, precision="bf16",
                                                            deepspeed_config=raw), 8)
    assert config["data_types"] == {"grad_accum_dtype": "bf16"} and config["communication_data_type"] == "bf16"
    for engine in (EngineConfig(kind="deepspeed", zero_stage=2, precision="fp32"),
                   EngineConfig(kind="deepspeed", zero_stage=0, precision="bf16")):  # fp32 already; no ZeRO optimizer
        config = deepspeed_config(stage, "stage2", engine, 8)
        assert "data_types" not in config and "communication_data_type" not in config


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.slow
def test_a_bf16_run_resumes_bit_identical_and_at_another_world_size(zero: int, tmp_path: Path) -> None:
    """With fp32 accumulation ZeRO-1 runs DeepSpeed's BF16_Optimizer, whose checkpoint differs
    (`bf16_zero_*` files, an fp32 gradient buffer): stopped at step 6 and run again to 10, a bf16
    run equals the uninterrupted one bit for bit; started in one process, it resumes on 2 ranks
    (through the universal checkpoint) and stays within bf16 rounding of it (measured: 1.7e-4 on
    losses, one bf16 step, 0.0078, on weights near 1)."""
    args = ["--zero", str(zero), "--precision", "bf16", "--save-every", "2"]
    whole, stopped, moved = tmp_path / "whole", tmp_path / "stopped", tmp_path / "moved"
    mp.two_ranks(whole, *args, "--steps", "10")
    mp.two_ranks(stopped, *args, "--steps", "6")
    mp.two_ranks(stopped, *args, "--steps", "10")
    mp.single(moved, *args, "--steps", "6")
    mp.two_ranks(moved, *args, "--steps", "10")
    for run in (stopped, moved):
        assert json.loads((run / "result.json").read_text())["resumed_from"] == 6
        assert mp.step_sequence(run) == list(range(1, 11))
    assert mp.losses(stopped) == mp.losses(whole)
    assert mp.max_weight_diff(mp.weights(stopped), mp.weights(whole)) == 0.0
    assert max(abs(a - b) for a, b in zip(mp.losses(moved).values(), mp.losses(whole).values())) < 2e-3
    assert mp.max_weight_diff(mp.weights(moved), mp.weights(whole)) <= 0.0625


def test_a_gradient_dtype_other_than_the_models_needs_a_zero_stage() -> None:
    """DeepSpeed's initialize raises NotImplementedError for it under ZeRO-0; its own names for
    the model's dtype ("float32", "torch.bfloat16") are the model's dtype, not another."""
    stage = TrainStageConfig()

    def engine(zero: int, precision: str, accum: str) -> EngineConfig:
        return EngineConfig(kind="deepspeed", zero_stage=zero, precision=precision,
                            deepspeed_config={"data_types": {"grad_accum_dtype": accum}})

    with pytest.raises(LangadaptError, match="grad_accum_dtype: fp32 under engine.zero_stage 0"):
        check_engine("stage2", stage, engine(0, "bf16", "fp32"), "cuda")
    for zero, precision, accum in [(0, "fp32", "float32"), (0, "bf16", "torch.bfloat16"), (1, "bf16", "fp32"),
                                   (2, "bf16", "bf16")]:
        check_engine("stage2", stage, engine(zero, precision, accum), "cuda")
