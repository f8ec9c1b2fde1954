"""engine.kind: fsdp in the recipe, the engine check and `langadapt plan` (no processes started)."""

from __future__ import annotations

import logging

import pytest

from langadapt.errors import LangadaptError
from langadapt.planning import training as train_settings
from langadapt.planning.memory import GB, fsdp_model_states, memory_per_gpu, zero_model_states
from langadapt.planning.models import load_model_dims
from langadapt.planning.plan import StagePlanInput, build_plan, render_plan
from langadapt.planning.recipe_plan import plan_recipe
from langadapt.planning.training import check_engine
from langadapt.recipe import load_recipe
from langadapt.recipe.train import EngineConfig, FSDPConfig, TrainStageConfig
from langadapt.recipe import train as train_config

REPO_RECIPES = train_config.__file__.rsplit("/langadapt/", 1)[0] + "/recipes"


def test_fsdp_settings_without_kind_fsdp_are_refused() -> None:
    engine = EngineConfig(kind="torch", fsdp=FSDPConfig(cpu_offload=True))
    with pytest.raises(LangadaptError, match=r"^engine\.fsdp\.cpu_offload: set, but engine\.kind is 'torch'"):
        check_engine("stage2", TrainStageConfig(), engine, "cpu")


def test_fsdp_refuses_fp16() -> None:
    with pytest.raises(LangadaptError, match=r"^engine\.precision: fp16 is not supported with engine\.kind: fsdp"):
        check_engine("stage2", TrainStageConfig(), EngineConfig(kind="fsdp", precision="fp16"), "cuda")


def test_zero_stage_is_ignored_with_a_warning_under_fsdp(caplog: pytest.LogCaptureFixture) -> None:
    """A DeepSpeed recipe switched with one --set engine.kind=fsdp stays valid (stage1.zero_stage: 1 too)."""
    stage1 = TrainStageConfig(zero_stage=1, trainable=["*embed_tokens.weight"])
    with caplog.at_level(logging.WARNING, logger="langadapt.train"):
        resolved = check_engine("stage1", stage1, EngineConfig(kind="fsdp", zero_stage=3), "cpu")
    assert resolved.zero_stage == 0 and resolved.kind == "fsdp"
    assert "stage1.zero_stage: ZeRO stage 1 is DeepSpeed's; ignored by engine.kind: fsdp" in caplog.text


def test_fsdp_fast_path_is_on_on_gpus_even_from_a_zero3_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train_settings, "liger_available", lambda: True)
    engine = EngineConfig(kind="fsdp", zero_stage=3)
    gpu = check_engine("stage2", TrainStageConfig(), engine, "cuda")  # ran on an H200 (planning.gpu_record)
    opted_out = check_engine("stage2", TrainStageConfig(), engine.model_copy(update={"compile": False, "fused_loss": False}), "cuda")
    cpu = check_engine("stage2", TrainStageConfig(), engine, "cpu")
    assert (gpu.compile, gpu.fused_loss, gpu.zero_stage) == (True, True, 0)  # the zero3 key ignored
    assert (opted_out.compile, opted_out.fused_loss) == (False, False)
    assert (cpu.compile, cpu.fused_loss) == (False, False)


def test_fsdp_memory_shards_like_zero3_plus_the_gathered_copies() -> None:
    m = load_model_dims("Mistral-7B-v0.1")
    p, block, layers = m.num_params(), m.layer_params(), m.layers
    root = p - layers * block
    eight, sixty_four = fsdp_model_states(m, num_gpus=8), fsdp_model_states(m, num_gpus=64)
    # Doubling the GPUs halves only the sharded 16 bytes per parameter (ZeRO-3's total) ...
    sharded_8 = zero_model_states(p, stage=3, num_gpus=8)["total"]
    assert eight["total"] - sixty_four["total"] == pytest.approx(sharded_8 * (1 - 8 / 64))
    # ... what stays is what FSDP all-gathers: two bf16 blocks and the root, and their gradients.
    offloaded = fsdp_model_states(m, num_gpus=8, cpu_offload=True)
    assert offloaded["optimizer"] == 0
    assert offloaded["weights"] == 2 * (root + 2 * block)
    assert eight["total"] - offloaded["total"] == pytest.approx(sharded_8)
    kept = fsdp_model_states(m, num_gpus=8, reshard_after_forward=False)
    assert kept["weights"] - eight["weights"] == 2 * (layers - 2) * block  # every block held to its backward
    assert 0.5 < offloaded["total"] / GB < 8  # 7B: ~2.6 GB of gathered bf16 copies


def test_fsdp_stage1_has_gradients_and_optimizer_state_for_the_embeddings_only() -> None:
    m = load_model_dims("Mistral-7B-v0.1")
    stage1 = fsdp_model_states(m, "embeddings", num_gpus=8)
    assert stage1["optimizer"] == 8 * m.embedding_params() / 8
    stage2 = fsdp_model_states(m, "all", num_gpus=8)
    assert stage1["weights"] == stage2["weights"] and stage1["gradients"] < stage2["gradients"] / 3
    with_activations = memory_per_gpu(m, "fsdp", 8, 4096, 1, "embeddings", "full")
    assert with_activations["total"] == pytest.approx(sum(v for k, v in with_activations.items() if k != "total"))


def test_plan_marks_the_fsdp_row_for_a_stage_that_runs_it() -> None:
    m = load_model_dims("Mistral-7B-v0.1")
    stage = StagePlanInput(name="stage2", steps=100, seq_len=4096, global_batch=64, zero_stage=3, fsdp=FSDPConfig())
    plan = build_plan(m, [stage], num_gpus=8)
    s = plan["stages"][0]
    assert s["memory_layout"] == "fsdp" and set(s["memory_gb"]) == {"zero0", "zero1", "zero2", "zero3", "fsdp"}
    fsdp, zero3 = s["memory_gb"]["fsdp"], s["memory_gb"]["zero3"]
    assert fsdp["weights"] > zero3["weights"]  # fp32 shards (bf16 under ZeRO-3) and the whole root gathered
    assert fsdp["buffers"] == 0 < zero3["buffers"]  # DeepSpeed's reduction bucket; FSDP2 reduces per block
    table = render_plan(plan)
    assert any(line.startswith("stage2*") and "FSDP2" in line for line in table.splitlines())


def test_plan_of_a_recipe_switched_to_fsdp() -> None:
    recipe = load_recipe(f"{REPO_RECIPES}/norwegian_warm.yaml", ["engine.kind=fsdp"]).recipe
    stages = {s["name"]: s for s in plan_recipe(recipe)["stages"]}
    assert {s["memory_layout"] for s in stages.values()} == {"fsdp"}
    assert stages["stage2"]["memory_gb"]["fsdp"]["fits"]
