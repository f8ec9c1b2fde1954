"""`langadapt plan` reports the settings training will run with: both come from
`planning.training.resolve_training` (the training side is tested in test_train_stage.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.planning.recipe_plan import plan_recipe
from langadapt.planning.training import resolve_training
from langadapt.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
ENGINES = {
    "deepspeed": [],
    "fsdp": ["engine.kind=fsdp"],
    "torch": ["engine.kind=torch", "engine.zero_stage=0", "stage1.zero_stage=0", "stage2.zero_stage=0"],
}


@pytest.mark.parametrize("recipe_file", ["norwegian_warm.yaml", "norwegian_extend.yaml", "normistral_11b_warm.yaml"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_plan_reports_what_training_resolves(recipe_file: str, engine: str) -> None:
    recipe = load_recipe(REPO / "recipes" / recipe_file, ENGINES[engine]).recipe
    plan = plan_recipe(recipe)
    world = recipe.cluster.world_size
    assert [s["name"] for s in plan["stages"]] == recipe.training_stages == ["stage1", "stage2"]
    for stage in plan["stages"]:
        config = getattr(recipe, stage["name"])
        resolved = resolve_training(stage["name"], config, recipe.engine, world, "cuda", have_liger=True)
        assert stage["settings"] == resolved.as_dict()
        assert stage["settings"]["global_batch"] == config.micro_batch_size * config.grad_accum_steps * world
        assert stage["memory_layout"] == ("fsdp" if engine == "fsdp" else f"zero{resolved.engine.zero_stage}")
    if engine == "torch":
        assert all(s["settings"]["zero_stage"] == 0 for s in plan["stages"])


def test_the_plan_counts_the_logits_exactly_when_training_materialises_them() -> None:
    """Without the fused loss the fp32 logits of a micro batch exist whole: 4 bytes x 4 x 4096 x
    32,768 = 2.15 GB per GPU (the plan once left them out). auto turns the fused loss on where it has
    run on a GPU (planning.gpu_record: every layout since 2026-11-28), so auto plans no logits, as
    training runs it, and `false` plans them."""
    def stage2(*sets: str) -> dict:
        return plan_recipe(load_recipe(REPO / "recipes/norwegian_warm.yaml", list(sets)).recipe)["stages"][1]

    auto, fsdp = stage2("engine.zero_stage=3"), stage2("engine.kind=fsdp")
    plain = stage2("engine.zero_stage=3", "engine.fused_loss=false")
    assert auto["settings"]["fused_loss"] is fsdp["settings"]["fused_loss"] is True
    assert plain["settings"]["fused_loss"] is False
    assert auto["memory_gb"]["zero3"]["activations"] == pytest.approx(fsdp["memory_gb"]["fsdp"]["activations"])
    extra = plain["memory_gb"]["zero3"]["activations"] - auto["memory_gb"]["zero3"]["activations"]
    assert extra == pytest.approx(4 * 4 * 4096 * 32768 / 1e9, rel=0.01)


def test_stage1_zero3_is_planned_as_training_runs_it() -> None:
    recipe = load_recipe(REPO / "recipes/norwegian_warm.yaml", ["engine.zero_stage=3", "stage1.zero_stage=null"]).recipe
    stage1 = plan_recipe(recipe)["stages"][0]
    assert stage1["settings"]["zero_stage"] == 3 and stage1["memory_layout"] == "zero3"


def test_a_setting_training_refuses_is_refused_by_plan() -> None:
    recipe = load_recipe(REPO / "recipes/norwegian_warm.yaml", ["engine.kind=torch"]).recipe
    with pytest.raises(LangadaptError, match="needs engine.kind: deepspeed"):
        plan_recipe(recipe)


def _stage(name: str, hours: float, totals: dict[str, float], layout: str = "zero1") -> dict:
    return {"name": name, "gpu_hours": hours, "memory_layout": layout,
            "memory_gb": {k: {"total": v} for k, v in totals.items()}}


def test_recommend_picks_the_fastest_layout_that_fits_with_margin() -> None:
    from langadapt.planning.plan import LAYOUT_SPEED, recommend

    roomy = {"zero0": 30.0, "zero1": 20.0, "zero2": 18.0, "zero3": 5.0, "fsdp": 8.0}
    rec = recommend([_stage("stage1", 10, roomy), _stage("stage2", 100, roomy, "zero3")], memory_gb=64)
    assert rec["engine"] == "torch" and rec["set"] == ["engine.kind=torch"]  # DDP: fastest, least traffic
    assert rec["speedup_vs_recipe"] == pytest.approx(
        (10 / LAYOUT_SPEED["zero1"] + 100 / LAYOUT_SPEED["zero3"]) / 110)
    # ZeRO-0 over 85% of the GPU: DeepSpeed ZeRO-2 and FSDP2 are within 5%; ZeRO-2 moves less data.
    tight = {**roomy, "zero0": 60.0}
    rec = recommend([_stage("stage1", 10, roomy), _stage("stage2", 100, tight, "zero3")], memory_gb=64)
    assert rec["engine"] == "deepspeed" and rec["layouts"] == {"stage1": "zero1", "stage2": "zero2"}  # ties: own, then less memory
    assert "fsdp" in rec["reason"] and "more traffic" in rec["reason"]
    rec = recommend([_stage("stage2", 100, {k: 70.0 for k in roomy})], memory_gb=64)
    assert rec["engine"] is None and "no engine fits" in rec["reason"]


@pytest.mark.parametrize("recipe_file", ["norwegian_warm.yaml", "norwegian_extend.yaml", "normistral_11b_warm.yaml"])
def test_the_real_recipes_use_the_recommendation(recipe_file: str) -> None:
    recipe = load_recipe(REPO / "recipes" / recipe_file).recipe
    rec = plan_recipe(recipe)["recommendation"]
    assert rec["speedup_vs_recipe"] == pytest.approx(1.0)
    assert recipe.engine.kind == rec["engine"]
    assert {s: getattr(recipe, s).zero_stage or recipe.engine.zero_stage for s in rec["layouts"]} == {
        s: int(layout[-1]) for s, layout in rec["layouts"].items()}


def test_the_extension_recipe_plans_the_final_vocabulary() -> None:
    """tokenizer.kind extend: vocab_size is the final size (Mistral's 32,000 + 8,192 Norwegian tokens),
    a multiple of 64, and the embeddings and head are planned at that size."""
    recipe = load_recipe(REPO / "recipes/norwegian_extend.yaml").recipe
    model = plan_recipe(recipe)["model"]
    assert recipe.tokenizer.kind == "extend" and model["vocab"] == 40192 == 32000 + 8192 and model["vocab"] % 64 == 0
    assert model["embedding_params"] == 2 * 40192 * 4096  # untied: input matrix and head


def test_the_plan_says_why_its_two_gpu_hour_totals_differ() -> None:
    """The table's total runs every layout at the recipe's MFU; the recommendation at each layout's
    measured speed (LAYOUT_SPEED): the plan printed both without saying so (issue 38)."""
    from langadapt.planning.plan import LAYOUT_SPEED
    from langadapt.planning.render import render_plan

    plan = plan_recipe(load_recipe(REPO / "recipes" / "norwegian_warm.yaml").recipe)
    text = render_plan(plan)
    measured = sum(s["gpu_hours"] / LAYOUT_SPEED[s["memory_layout"]] for s in plan["stages"])
    assert plan["recommendation"]["gpu_hours"] == pytest.approx(measured)
    assert f"  {measured:,.0f} GPU-h with each layout at its measured speed (the table above runs every layout at " \
           f"{plan['hardware']['mfu']:.0%} MFU)" in text
    assert f"{plan['total']['gpu_hours']:,.0f}" in text
