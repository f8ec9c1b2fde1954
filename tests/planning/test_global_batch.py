"""`global_batch_size` fixes a stage's global batch on any world size (review C1): accumulation is
derived from the world where the stage resolves; a world that does not divide it, or an explicit
grad_accum_steps that disagrees, is one error line with the key and the numbers; unset keeps the
batch micro x accum x world and warns when the world is not the one the recipe's cluster plans."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.pipeline.preflight import find_problems
from langadapt.planning.recipe_plan import plan_recipe
from langadapt.planning.training import (
    global_batch,
    grad_accum,
    resolve_training,
    world_change_line,
    world_size_warning,
)
from langadapt.recipe import load_recipe
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.train.engines.deepspeed_json import deepspeed_config

ROOT = Path(__file__).resolve().parents[2]
TINY = "recipes/tiny_norwegian_warm.yaml"  # stage1.micro_batch_size 16, cluster 1 x 1


@pytest.mark.parametrize(("world", "accum"), [(1, 8), (2, 4), (4, 2)])
def test_accumulation_is_derived_so_the_global_batch_stays_the_same(world: int, accum: int) -> None:
    stage = TrainStageConfig(micro_batch_size=4, global_batch_size=32)
    assert grad_accum(stage, world, "stage1") == accum
    assert global_batch(stage, world) == 32
    settings = resolve_training("stage1", stage, EngineConfig(), world, "cpu")
    assert (settings.grad_accum, settings.global_batch, settings.global_batch_fixed) == (accum, 32, True)
    assert settings.as_dict()["grad_accum"] == accum and settings.as_dict()["global_batch_fixed"] is True


@pytest.mark.parametrize("world", [1, 2, 4])
def test_unset_keeps_micro_times_accum_times_world(world: int) -> None:
    stage = TrainStageConfig(micro_batch_size=4, grad_accum_steps=3)
    settings = resolve_training("stage2", stage, EngineConfig(), world, "cpu")
    assert (settings.grad_accum, settings.global_batch, settings.global_batch_fixed) == (3, 4 * 3 * world, False)


def test_a_world_that_does_not_divide_it_is_one_line_with_the_numbers() -> None:
    stage = TrainStageConfig(micro_batch_size=4, global_batch_size=24)  # 24 = 4 x 6: worlds 1, 2, 3, 6
    assert grad_accum(stage, 2, "stage1") == 3
    with pytest.raises(LangadaptError) as caught:
        resolve_training("stage1", stage, EngineConfig(), 4, "cpu")
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("stage1.global_batch_size: 24 sequences does not split over world size 4: "
                           "micro_batch_size 4 x 4 ranks = 16 sequences per micro-step does not divide it")
    assert "use a multiple of 16, or a world size that divides 6" in line


def test_an_explicit_grad_accum_steps_must_agree_on_this_world() -> None:
    agrees = TrainStageConfig(micro_batch_size=4, grad_accum_steps=2, global_batch_size=32)  # a world of 4
    assert grad_accum(agrees, 4, "stage2") == 2
    with pytest.raises(LangadaptError, match=r"^stage2\.grad_accum_steps: 2 contradicts global_batch_size 32 on "
                                             r"world size 2, which needs 4 \(= 32 / \(micro_batch_size 4 x 2 ranks\)\); "
                                             r"remove grad_accum_steps"):
        resolve_training("stage2", agrees, EngineConfig(), 2, "cpu")


def test_what_no_world_fixes_is_refused_at_load_on_the_recipe_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(LangadaptError, match=r"--set stage1.global_batch_size=20: stage1.global_batch_size: 20 "
                                             r"sequences is not a multiple of micro_batch_size \(16\)"):
        load_recipe(TINY, ["stage1.global_batch_size=20"])
    with pytest.raises(LangadaptError, match=r"stage1.grad_accum_steps: 2 contradicts global_batch_size 48: "
                                             r"micro_batch_size 16 x 2 = 32 sequences per rank"):
        load_recipe(TINY, ["stage1.global_batch_size=48", "stage1.grad_accum_steps=2"])
    with pytest.raises(LangadaptError, match="stage2.global_batch_size: Input should be greater than or equal to 1"):
        load_recipe(TINY, ["stage2.global_batch_size=0"])


def test_stage2_inherits_it_and_may_turn_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    recipe = load_recipe(TINY, ["stage1.global_batch_size=64"]).recipe
    assert recipe.stage1.global_batch_size == recipe.stage2.global_batch_size == 64
    assert load_recipe(TINY, ["stage1.global_batch_size=64", "stage2.global_batch_size=null"]
                       ).recipe.stage2.global_batch_size is None


def test_preflight_locates_a_world_that_does_not_divide_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dry run and a real run's preflight resolve on the world the job will have: the line names
    the key as the recipe's other errors do (here the --set flag that wrote it)."""
    monkeypatch.chdir(ROOT)
    loaded = load_recipe(TINY, ["stage1.global_batch_size=32"])
    lines = find_problems(loaded, ["stage1"], world_size=4).lines()
    assert any(line.startswith("--set stage1.global_batch_size=32: stage1.global_batch_size: 32 sequences does "
                               "not split over world size 4") for line in lines), lines
    assert not find_problems(loaded, ["stage1"], world_size=2).lines()


def test_plan_shows_the_derived_accumulation(monkeypatch: pytest.MonkeyPatch) -> None:
    from langadapt.planning.render import render_plan

    monkeypatch.chdir(ROOT)
    fixed = plan_recipe(load_recipe(TINY, ["stage1.global_batch_size=64"]).recipe, num_gpus=2)
    stage1 = next(s for s in fixed["stages"] if s["name"] == "stage1")
    assert stage1["settings"]["global_batch"] == 64 and stage1["settings"]["global_batch_fixed"] is True
    assert stage1["settings"]["grad_accum"] == 2 == stage1["grad_accum_steps"]
    assert "stage1  global batch 64 sequences = micro 16 x accum 2 x 2 GPUs (fixed by stage1.global_batch_size)" \
        in render_plan(fixed)
    grows = render_plan(plan_recipe(load_recipe(TINY, []).recipe, num_gpus=2))
    assert "stage1  global batch 32 sequences = micro 16 x accum 1 x 2 GPUs (grows with the world size; " \
           "stage1.global_batch_size fixes it)" in grows


def test_the_deepspeed_json_takes_the_derived_accumulation() -> None:
    stage = TrainStageConfig(micro_batch_size=4, global_batch_size=64)
    config = deepspeed_config(stage, "stage2", EngineConfig(kind="deepspeed", zero_stage=1), 8)
    assert (config["gradient_accumulation_steps"], config["train_batch_size"]) == (2, 64)
    clash = EngineConfig(kind="deepspeed", zero_stage=1, deepspeed_config={"gradient_accumulation_steps": 4})
    with pytest.raises(LangadaptError, match=r"gradient_accumulation_steps = 4 contradicts stage2.global_batch_size "
                                             r"/ \(micro_batch_size x world size\) = 2"):
        deepspeed_config(stage, "stage2", clash, 8)


def test_unset_warns_once_when_the_world_is_not_the_planned_one(caplog: pytest.LogCaptureFixture) -> None:
    stage = TrainStageConfig(micro_batch_size=4, grad_accum_steps=4)
    assert world_size_warning("stage1", stage, 8, 8) is None
    assert world_size_warning("stage1", TrainStageConfig(micro_batch_size=4, global_batch_size=128), 8, 16) is None
    with caplog.at_level(logging.WARNING, logger="langadapt.train"):
        resolve_training("stage1", stage, EngineConfig(), 16, "cpu", planned_world_size=8)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [("stage1: the global batch is 256 sequences on this world of 16 ranks, not the 128 the "
                        "recipe's cluster plans (8 ranks; micro_batch_size 4 x grad_accum_steps 4 x world size), "
                        "so the stage trains 2x the planned tokens; set stage1.global_batch_size: 128 to train the "
                        "planned batch on any world size")]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="langadapt.train"):
        resolve_training("stage1", stage, EngineConfig(), 8, "cpu", planned_world_size=8)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_preflight_warns_on_another_world_than_the_cluster(monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.chdir(ROOT)
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    loaded = load_recipe(TINY, [])  # cluster: one GPU
    with caplog.at_level(logging.WARNING, logger="langadapt.train"):
        assert not find_problems(loaded, ["stage1"], world_size=2).lines()
    messages = [r.getMessage() for r in caplog.records if "global batch" in r.getMessage()]
    assert len(messages) == 1 and "set stage1.global_batch_size: " in messages[0]


def test_the_resume_line_names_the_cause_both_batches_and_the_fix() -> None:
    stage = TrainStageConfig(steps=100, micro_batch_size=4, grad_accum_steps=2)
    line = world_change_line("stage2", stage, "run/stage2/checkpoints/step_00000050", 100 * 64, 100 * 128, 16)
    assert "\n" not in line and "targets" not in line
    assert line.startswith("stage2: cannot resume run/stage2/checkpoints/step_00000050: the global batch changed: "
                           "64 -> 128 sequences (world size 8 -> 16; ")
    assert "resume on the world size it was saved with, or set stage2.global_batch_size" in line
