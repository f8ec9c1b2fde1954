"""The warm-vs-cold benchmark's pure parts and the cold twin's compute equalisation.

No training here: FLOPs arithmetic on the demo's model dims, the `--set` lists of every
experiment validated against the recipe schema, the best-init choice and the JSON line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.benchmarks import load_benchmark

from langadapt.evaluation.cold_twin import (
    cold_twin_overrides,
    equal_compute_stage2_steps,
    run_flops,
    step_flops,
)
from langadapt.planning.flops import flops_per_token
from langadapt.planning.models import ModelDims
from langadapt.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "recipes" / "tiny_norwegian_warm.yaml"
DEMO_DIMS = ModelDims(name="demo", hidden=128, layers=4, heads=4, kv_heads=2, ffn=352, vocab=4096, tied=False)
"""recipes/tiny_english_source.yaml's architecture with the demo's 4096-token vocabulary."""


bench = load_benchmark("warm_vs_cold")


def test_stage1_step_costs_the_frozen_body_discount():
    demo = load_recipe(DEMO).recipe
    tokens = demo.stage2.micro_batch_size * demo.stage2.seq_len
    assert step_flops(DEMO_DIMS, "stage2", demo.stage2) == pytest.approx(flops_per_token(DEMO_DIMS, 128, "all") * tokens)
    ratio = step_flops(DEMO_DIMS, "stage1", demo.stage1) / step_flops(DEMO_DIMS, "stage2", demo.stage2)
    # 4N + 2N_head over 6N (+ the same attention term on both): between 2/3 and 1 for this model.
    assert 2 / 3 < ratio < 1
    n, head = DEMO_DIMS.body_params() + 4096 * 128, 4096 * 128
    attention = 12 * 4 * 128 * 128  # layers x attention width x seq_len, forward + backward
    assert ratio == pytest.approx((4 * n + 2 * head + attention) / (6 * n + attention))


def test_cold_twin_spends_the_warm_runs_flops():
    demo = load_recipe(DEMO).recipe
    budget = run_flops(DEMO_DIMS, demo)
    twin = load_recipe(DEMO, cold_twin_overrides(demo, DEMO_DIMS)).recipe
    assert twin.init == "scratch" and twin.name == "tiny_norwegian_warm_cold"
    assert not twin.export.enabled and twin.evaluation.suites == [] and not twin.evaluation.cold_baseline
    # 60 stage-1 steps at 0.82 of a full step: 49 extra stage-2 steps.
    assert twin.stage2.steps == 249
    full_step = step_flops(DEMO_DIMS, "stage2", demo.stage2)
    assert abs(run_flops(DEMO_DIMS, twin) - budget) <= full_step / 2
    # Same tokenizer settings, data and seed: only the init and the steps differ.
    assert twin.tokenizer == demo.tokenizer and twin.data == demo.data and twin.seed == demo.seed


def test_equal_compute_counts_a_variants_own_stage1():
    demo = load_recipe(DEMO).recipe
    budget = run_flops(DEMO_DIMS, demo)
    assert equal_compute_stage2_steps(budget, DEMO_DIMS, demo) == demo.stage2.steps
    longer = load_recipe(DEMO, ["stage1.steps=120"]).recipe
    assert equal_compute_stage2_steps(budget, DEMO_DIMS, longer) == 151  # 200 - 60 x 0.82
    no_stage1 = load_recipe(DEMO, ["stage1.enabled=false"]).recipe
    assert equal_compute_stage2_steps(budget, DEMO_DIMS, no_stage1) == 249


@pytest.mark.parametrize("variant", list(bench.load_plan()["variants"]))
def test_every_experiment_validates_against_the_recipe_schema(variant):
    plan = bench.load_plan()
    items = bench.variant_overrides(plan, variant, 7, 1234, best_init="focus")
    items = bench.with_equal_compute(plan, variant, items, dims_of=lambda recipe: DEMO_DIMS)
    recipe = load_recipe(REPO / plan["recipe"], items).recipe
    assert recipe.name == f"{variant}_s7" and recipe.seed == 7
    assert recipe.run_root == "runs/experiments" and not recipe.export.enabled
    gap = abs(run_flops(DEMO_DIMS, recipe) - run_flops(DEMO_DIMS, load_recipe(DEMO).recipe))
    if plan["variants"][variant]["equal_compute"]:
        assert gap <= step_flops(DEMO_DIMS, "stage2", recipe.stage2) / 2
    else:  # keeps the steps it sets: they must differ from the demo's, or the flag is a mistake
        assert gap > step_flops(DEMO_DIMS, "stage2", recipe.stage2)


def test_best_init_variant_needs_a_finished_warm_run():
    plan = bench.load_plan()
    with pytest.raises(ValueError, match="best warm init"):
        bench.variant_overrides(plan, "warm_best_nostage1", 1234, 1234, best_init=None)
    items = bench.variant_overrides(plan, "warm_best_nostage1", 1234, 1234, best_init="mean")
    assert "embeddings.method=mean" in items and "name=warm_best_nostage1" in items


def _run(variant: str, init: str, method: str, nb: float, seed: int = 1234, stage1: int = 60) -> dict:
    return {"variant": variant, "init": init, "method": method, "seed": seed, "stage1_steps": stage1,
            "final": {"nb": nb, "en": 3.0}}


def test_best_warm_init_and_json_line():
    plan = bench.load_plan()
    results = {"meta": {"default_seed": 1234}, "runs": {
        "cold": _run("cold", "scratch", "scratch", 2.0, stage1=0),
        "cold_lr2e-3": _run("cold_lr2e-3", "scratch", "scratch", 1.9, stage1=0),
        "warm_mean": _run("warm_mean", "warm", "mean", 1.7),
        "warm_focus": _run("warm_focus", "warm", "focus", 1.6),
        "warm_focus_s7": _run("warm_focus", "warm", "focus", 1.0, seed=7),  # another seed: not compared
        "replay0": _run("replay0", "warm", "mean", 1.5),  # a sweep: not a candidate init
    }}
    assert bench.best_warm_init(results, plan) == "focus"
    line = bench.summary_line(results, plan)
    # Core variants of the default seed only: replay0 (a sweep, 1.5) and the other seed (1.0) do not count.
    assert line == {"benchmark": "warm_vs_cold", "metric": "nb_bpb_warm_over_cold", "value": 1.6,
                    "baseline": 1.9, "ratio": round(1.6 / 1.9, 4), "unit": "bits/byte"}
    assert json.loads(json.dumps(line)) == line
    assert bench.summary_line({"meta": {"default_seed": 1}, "runs": {}}, plan)["ratio"] is None


def test_curve_interpolation_and_flops_to_reach():
    curve = [{"flops": 0.0, "bpb": {"nb": 3.0}}, {"flops": 10.0, "bpb": {"nb": 2.0}},
             {"flops": 20.0, "bpb": {"nb": 1.5}}]
    assert bench.nb_at_flops(curve, 5.0) == pytest.approx(2.5)
    assert bench.nb_at_flops(curve, 15.0) == pytest.approx(1.75)
    assert bench.nb_at_flops(curve, 99.0) == 1.5 and bench.nb_at_flops(curve, -1.0) == 3.0
    assert bench.flops_to_reach(curve, 2.5) == pytest.approx(5.0)
    assert bench.flops_to_reach(curve, 1.75) == pytest.approx(15.0)
    assert bench.flops_to_reach(curve, 1.0) is None  # never reached
    assert bench.flops_to_reach(curve, 3.5) == 0.0  # already there at step 0


def test_seed_spread_only_for_variants_with_several_seeds():
    results = {"runs": {"a": _run("warm_mean", "warm", "mean", 2.0), "a_s1": _run("warm_mean", "warm", "mean", 2.2, seed=1),
                        "a_s2": _run("warm_mean", "warm", "mean", 2.1, seed=2), "c": _run("cold", "scratch", "scratch", 3.0)}}
    assert bench.seed_spread(results) == {"warm_mean": {"seeds": 3, "mean": 2.1, "min": 2.0, "max": 2.2}}


def test_the_twin_counts_each_stages_whole_global_batch_on_the_warm_runs_world(tmp_path: Path):
    """A stage 2 that fixes `global_batch_size` at the batch 4 ranks give trains the tokens per step of
    one that leaves it to the world, so both get the same twin once the steps are counted over the 4
    ranks the warm run's manifest records (counted at world size 1, stage 1 weighed a quarter of its
    tokens against a whole stage-2 batch, and the twin got 4x too few extra steps)."""
    from langadapt.evaluation.cold_twin import cold_twin_recipe
    from langadapt.planning.training import global_batch
    from langadapt.run.layout import RunLayout

    overrides = [f"run_root={tmp_path}", "evaluation.cold_baseline=true"]
    grows = load_recipe(DEMO, overrides).recipe
    fixed = load_recipe(DEMO, [*overrides, f"stage2.global_batch_size={grows.stage2.micro_batch_size * 4}"]).recipe
    assert global_batch(fixed.stage2, 4) == global_batch(grows.stage2, 4)
    assert cold_twin_overrides(fixed, DEMO_DIMS, world_size=4) == cold_twin_overrides(grows, DEMO_DIMS, world_size=4)

    layout = RunLayout(fixed.run_dir)  # the warm run as it finished: its step-0 model and stage 2's manifest
    layout.embeddings.model.mkdir(parents=True)
    (layout.embeddings.model / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 352, "vocab_size": 4096, "tie_word_embeddings": False}))
    layout.stage_dir("stage2").mkdir(parents=True)
    (layout.stage_dir("stage2") / "manifest.json").write_text(json.dumps({"summary": {"world_size": 4}}))
    twin = cold_twin_recipe(fixed, base_model="base")
    assert twin is not None
    steps = twin.recipe.stage2.steps
    assert f"stage2.steps={steps}" in cold_twin_overrides(grows, DEMO_DIMS, world_size=4)
    assert global_batch(twin.recipe.stage2, 4) == global_batch(fixed.stage2, 4)  # the warm stage 2's tokens per step
    assert steps != int(next(o for o in cold_twin_overrides(fixed, DEMO_DIMS) if o.startswith("stage2.steps=")).split("=")[1])


def _finished_warm_run(recipe, summaries: dict[str, dict]) -> None:
    """The warm run as evaluate finds it: its step-0 model (the demo's dims) and the given stages' manifests."""
    from langadapt.run.layout import RunLayout

    layout = RunLayout(recipe.run_dir)
    layout.embeddings.model.mkdir(parents=True)
    (layout.embeddings.model / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 352, "vocab_size": 4096, "tie_word_embeddings": False}))
    for stage, summary in summaries.items():
        layout.stage_dir(stage).mkdir(parents=True)
        (layout.stage_dir(stage) / "manifest.json").write_text(json.dumps({"stage": stage, "summary": summary}))


@pytest.mark.parametrize("accum_written", [False, True])
def test_the_twin_keeps_a_multi_gpu_warm_stage2s_batch_in_one_process(tmp_path: Path, accum_written: bool):
    """A warm stage 2 that trained micro 2 x accum 1 x world 4 = 8 sequences per step, its batch left to
    the world: the twin (trained inside evaluate, one process) pins global_batch_size 8, so at world 1
    it accumulates 4 micro batches and trains the warm stage 2's tokens (it got 2 sequences a step, a
    quarter of them, when the steps were counted at world 4 and the batch left to the world). Without
    stage 1 and with the same dims, equal FLOPs is step for step. An accumulation the warm recipe wrote
    (1, right for its 4 ranks) is left out: derived from the batch on any world."""
    from langadapt.evaluation.cold_twin import cold_twin_recipe, trained_batches
    from langadapt.planning.training import global_batch, grad_accum

    overrides = [f"run_root={tmp_path}", "evaluation.cold_baseline=true", "stage1.enabled=false",
                 "stage2.micro_batch_size=2", *(["stage2.grad_accum_steps=1"] if accum_written else [])]
    warm = load_recipe(DEMO, overrides).recipe
    assert warm.stage2.global_batch_size is None and global_batch(warm.stage2, 4) == 8
    _finished_warm_run(warm, {"stage2": {"steps": 200, "world_size": 4, "global_batch": 8}})

    assert trained_batches(warm) == {"stage2": 8}
    items = cold_twin_overrides(warm, DEMO_DIMS, batches=trained_batches(warm))
    assert "stage2.global_batch_size=8" in items and "stage2.steps=200" in items
    twin = cold_twin_recipe(warm, base_model="base")
    assert twin is not None
    stage2 = twin.recipe.stage2
    assert stage2.global_batch_size == 8 and stage2.steps == warm.stage2.steps == 200
    assert twin.tree["stage2"]["global_batch_size"] == 8 and "grad_accum_steps" not in twin.tree["stage2"]
    for world, accum in ((1, 4), (2, 2), (4, 1)):  # the twin's batch is the warm one's wherever it trains
        assert grad_accum(stage2, world, "stage2") == accum and global_batch(stage2, world, "stage2") == 8
    # Tokens and FLOPs: the twin in one process spends what the warm run spent on its 4 ranks.
    assert stage2.steps * global_batch(stage2, 1) * stage2.seq_len == 200 * 8 * warm.stage2.seq_len
    assert run_flops(DEMO_DIMS, twin.recipe) == run_flops(DEMO_DIMS, warm, world_size=4)
    assert run_flops(DEMO_DIMS, twin.recipe) == 4 * run_flops(DEMO_DIMS, warm, world_size=1)


def test_the_twin_weighs_each_stage_at_the_batch_its_manifest_records(tmp_path: Path):
    """Stage 1 on 2 ranks (32 sequences a step), stage 2 on 4 (64): each stage's FLOPs at its own
    recorded batch, the twin's extra steps at stage 2's, in one process."""
    from langadapt.evaluation.cold_twin import cold_twin_recipe, trained_batches
    from langadapt.planning.training import global_batch

    warm = load_recipe(DEMO, [f"run_root={tmp_path}", "evaluation.cold_baseline=true"]).recipe
    _finished_warm_run(warm, {"stage1": {"world_size": 2, "global_batch": 32},
                              "stage2": {"world_size": 4, "global_batch": 64}})
    batches = trained_batches(warm)
    assert batches == {"stage1": 32, "stage2": 64}
    twin = cold_twin_recipe(warm, base_model="base")
    assert twin is not None and twin.recipe.stage2.global_batch_size == 64
    budget = (60 * step_flops(DEMO_DIMS, "stage1", warm.stage1, 2) + 200 * step_flops(DEMO_DIMS, "stage2", warm.stage2, 4))
    assert run_flops(DEMO_DIMS, warm, batches=batches) == pytest.approx(budget)
    full_step = step_flops(DEMO_DIMS, "stage2", twin.recipe.stage2)
    assert full_step == step_flops(DEMO_DIMS, "stage2", warm.stage2, 4) and global_batch(twin.recipe.stage2, 1) == 64
    assert abs(run_flops(DEMO_DIMS, twin.recipe) - budget) <= full_step / 2
    # 60 stage-1 steps at half stage 2's batch and 0.82 of its cost per token: 25 extra steps.
    assert twin.recipe.stage2.steps == 225


def test_a_single_process_twin_is_the_recipe_it_was(tmp_path: Path):
    """World 1 recorded (the demo): no global_batch_size in the twin's overrides, the list it always
    was (a finished demo twin's stage-2 print, which hashes global_batch_size only when set, stays)."""
    from langadapt.evaluation.cold_twin import cold_twin_recipe

    warm = load_recipe(DEMO, [f"run_root={tmp_path}", "evaluation.cold_baseline=true"]).recipe
    _finished_warm_run(warm, {"stage1": {"world_size": 1, "global_batch": 16},
                              "stage2": {"world_size": 1, "global_batch": 16}})
    twin = cold_twin_recipe(warm, base_model="base")
    assert twin is not None
    assert twin.recipe == load_recipe(DEMO, [f"run_root={tmp_path}", "evaluation.cold_baseline=true",
                                             *cold_twin_overrides(warm, DEMO_DIMS)]).recipe
    assert twin.recipe.stage2.global_batch_size is None and twin.recipe.stage2.steps == 249
    assert not any(item.startswith("stage2.global_batch_size") for item in cold_twin_overrides(warm, DEMO_DIMS))


def test_without_manifests_the_twin_counts_at_the_recipes_cluster(tmp_path: Path):
    """No manifest to read: each stage's batch as the recipe resolves it on `cluster` (2 nodes x 4)."""
    from langadapt.evaluation.cold_twin import cold_twin_recipe, trained_batches

    warm = load_recipe(DEMO, [f"run_root={tmp_path}", "evaluation.cold_baseline=true", "cluster.nodes=2",
                              "cluster.gpus_per_node=4"]).recipe
    _finished_warm_run(warm, {})
    assert trained_batches(warm) == {"stage1": 128, "stage2": 128}
    twin = cold_twin_recipe(warm, base_model="base")
    assert twin is not None and twin.recipe.stage2.global_batch_size == 128 and twin.recipe.stage2.steps == 249


def test_a_warm_batch_fixed_for_four_ranks_with_its_accumulation_written(tmp_path: Path):
    """global_batch_size 32 with micro 2 x grad_accum_steps 4 written: right on 4 ranks, a contradiction
    in one process. The twin keeps the 32 and leaves the accumulation to be derived (16 in one process)."""
    from langadapt.evaluation.cold_twin import cold_twin_recipe
    from langadapt.planning.training import grad_accum

    warm = load_recipe(DEMO, [f"run_root={tmp_path}", "evaluation.cold_baseline=true", "stage1.enabled=false",
                              "stage2.micro_batch_size=2", "stage2.grad_accum_steps=4",
                              "stage2.global_batch_size=32"]).recipe
    _finished_warm_run(warm, {"stage2": {"world_size": 4, "global_batch": 32}})
    twin = cold_twin_recipe(warm, base_model="base")
    assert twin is not None and twin.recipe.stage2.global_batch_size == 32 and twin.recipe.stage2.steps == 200
    assert grad_accum(twin.recipe.stage2, 1, "stage2") == 16 and grad_accum(twin.recipe.stage2, 4, "stage2") == 4
