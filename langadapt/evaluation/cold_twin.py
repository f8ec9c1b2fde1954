"""The cold twin: the same run trained from scratch at equal compute, the baseline a warm start must beat.

A warm run is only worth its machinery if it beats a model pretrained from scratch on the same
data with the same compute (the NorMistral claim). The twin is this recipe with `init: scratch`
(same tokenizer settings, data, seed, batch and optimizer) and its stage-2 steps raised so that it
spends the FLOPs the warm run spends in stage 1 + stage 2. It is built and cached the way the
demo's base model is: the pipeline runs it as a run this one depends on, in its own run
directory, `<run_root>/<name>_cold/`, so a finished twin is a fixed point and costs nothing the
next time; change the recipe and only the stages whose inputs changed run again.

Compute: a frozen-body step costs 4N + 2N_head FLOPs per token against 6N for a full step
(+ attention, `langadapt.planning.flops`), so such steps count at that discount. Which steps are
frozen-body is each stage's own `trainable` (`planning.training.trainable_kind`, as `langadapt plan`
reads it): stage 1 by default, stage 2 when its recipe narrows `trainable`. A step's tokens are its
whole global batch on the world the warm run trained on (`trained_world_size`): a stage that fixes
`global_batch_size` and one whose batch grows with the world are weighed alike, and the twin's
stage 2 (the warm stage 2's settings) sees the tokens per step the warm one saw.
"""

from __future__ import annotations

import logging

from langadapt.planning.flops import flops_per_token
from langadapt.planning.models import ModelDims, load_model_dims
from langadapt.planning.training import global_batch, trainable_kind
from langadapt.recipe import LoadedRecipe, Recipe, with_overrides
from langadapt.recipe.paths import COLD_SUFFIX
from langadapt.recipe.train import TrainStageConfig
from langadapt.run.layout import RunLayout, read_manifest

log = logging.getLogger("langadapt")


def step_flops(dims: ModelDims, stage_name: str, stage: TrainStageConfig, world_size: int = 1) -> float:
    """FLOPs of one optimizer step of training stage `stage_name` over `world_size` ranks (its global
    batch: `global_batch_size` when set, else micro x accum x world), at what its `trainable` makes train."""
    tokens = global_batch(stage, world_size, stage_name) * stage.seq_len
    return flops_per_token(dims, stage.seq_len, trainable_kind(stage_name, stage)) * tokens


def run_flops(dims: ModelDims, recipe: Recipe, stage1_steps: int | None = None, stage2_steps: int | None = None,
              world_size: int = 1) -> float:
    """Training FLOPs of a recipe's stage 1 (when it runs) and stage 2 over `world_size` ranks."""
    s1 = recipe.stage1.steps if stage1_steps is None else stage1_steps
    s2 = recipe.stage2.steps if stage2_steps is None else stage2_steps
    first = s1 * step_flops(dims, "stage1", recipe.stage1, world_size) if "stage1" in recipe.training_stages else 0.0
    return first + s2 * step_flops(dims, "stage2", recipe.stage2, world_size)


def equal_compute_stage2_steps(budget_flops: float, dims: ModelDims, recipe: Recipe, world_size: int = 1) -> int:
    """Stage-2 steps that make `recipe` (its own stage 1 included) spend `budget_flops` over `world_size` ranks."""
    left = budget_flops - run_flops(dims, recipe, stage2_steps=0, world_size=world_size)
    return max(1, round(left / step_flops(dims, "stage2", recipe.stage2, world_size)))


def cold_twin_overrides(recipe: Recipe, dims: ModelDims, world_size: int = 1) -> list[str]:
    """The `--set` items that turn a warm recipe into its cold twin at equal compute, both counted
    over the `world_size` ranks the warm run trained on."""
    budget = run_flops(dims, recipe, world_size=world_size)
    scratch, _ = with_overrides(recipe, ["init=scratch"])
    steps = equal_compute_stage2_steps(budget, dims, scratch, world_size)
    return [
        f"name={recipe.name}{COLD_SUFFIX}", "init=scratch", f"stage2.steps={steps}",
        "evaluation.suites=[]", "evaluation.cold_baseline=false", "export.enabled=false",
    ]


def trained_world_size(recipe: Recipe) -> int:
    """The world size the warm run's training ran on, as its stage 2's manifest records it (else
    stage 1's; the recipe's cluster when neither has run): the world its global batches had."""
    layout = RunLayout(recipe.run_dir)
    for stage in ("stage2", "stage1"):
        summary = read_manifest(layout.stage_dir(stage)).get("summary")
        world = summary.get("world_size") if isinstance(summary, dict) else None
        if isinstance(world, int) and world >= 1:
            return world
    return recipe.cluster.world_size


def cold_twin_recipe(recipe: Recipe, base_model: str | None) -> LoadedRecipe | None:
    """The twin's recipe when `evaluation.cold_baseline` asks for one, else None; the pipeline
    runs it before this run's evaluate stage (`pipeline.stages.Dependency`)."""
    if not (recipe.wants_cold_twin and base_model):
        return None
    # The warm run's own step-0 model has the dims both runs train: the base body, the new vocabulary.
    dims = load_model_dims(RunLayout(recipe.run_dir).embeddings.model)
    overrides = cold_twin_overrides(recipe, dims, trained_world_size(recipe))
    twin_recipe, tree = with_overrides(recipe, overrides)
    # The twin's manifests name the warm run's resolved recipe as theirs, with the overrides logged.
    twin = LoadedRecipe(twin_recipe, RunLayout(recipe.run_dir).resolved_recipe, tree,
                        {"inherited": [], "overridden": []})
    log.info("cold twin: %s (%s)", twin.recipe.run_dir, " ".join(f"--set {o}" for o in overrides))
    return twin
