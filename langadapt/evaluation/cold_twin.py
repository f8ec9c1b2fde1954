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
reads it): stage 1 by default, stage 2 when its recipe narrows `trainable`.

Tokens: a step's tokens are the whole global batch the warm stage trained with, as its manifest
records it (`trained_batches`), whatever the world size was. The twin trains wherever evaluate
runs, which the launch scripts run as one process (`runtime.sbatch`), so its stage 2 pins
`global_batch_size` to the warm stage 2's recorded batch: its accumulation is derived from it on
any world size (`planning.training.grad_accum`), it sees the tokens per step the warm stage 2 saw,
and its equal-FLOPs steps are counted at that batch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from langadapt.planning.flops import flops_per_token
from langadapt.planning.models import ModelDims, load_model_dims
from langadapt.planning.training import global_batch, trainable_kind
from langadapt.recipe import LoadedRecipe, Recipe, apply_overrides
from langadapt.recipe.paths import COLD_SUFFIX
from langadapt.recipe.train import TrainStageConfig
from langadapt.run.layout import RunLayout

log = logging.getLogger("langadapt")


def step_flops(dims: ModelDims, stage_name: str, stage: TrainStageConfig, world_size: int = 1,
               batch: int | None = None) -> float:
    """FLOPs of one optimizer step of training stage `stage_name` at what its `trainable` makes train:
    of `batch` sequences when given (what the stage trained with, `trained_batches`), else of its
    global batch over `world_size` ranks (`global_batch_size` when set, else micro x accum x world)."""
    sequences = global_batch(stage, world_size, stage_name) if batch is None else batch
    return flops_per_token(dims, stage.seq_len, trainable_kind(stage_name, stage)) * sequences * stage.seq_len


def run_flops(dims: ModelDims, recipe: Recipe, stage1_steps: int | None = None, stage2_steps: int | None = None,
              world_size: int = 1, batches: Mapping[str, int] | None = None) -> float:
    """Training FLOPs of a recipe's stage 1 (when it runs) and stage 2: each step of the stage's
    global batch in `batches` (sequences, as `trained_batches` reads them) where it has one, else
    of its global batch over `world_size` ranks."""
    batches = batches or {}
    s1 = recipe.stage1.steps if stage1_steps is None else stage1_steps
    s2 = recipe.stage2.steps if stage2_steps is None else stage2_steps
    first = s1 * step_flops(dims, "stage1", recipe.stage1, world_size, batches.get("stage1")) \
        if "stage1" in recipe.training_stages else 0.0
    return first + s2 * step_flops(dims, "stage2", recipe.stage2, world_size, batches.get("stage2"))


def equal_compute_stage2_steps(budget_flops: float, dims: ModelDims, recipe: Recipe, world_size: int = 1) -> int:
    """Stage-2 steps that make `recipe` (its own stage 1 included) spend `budget_flops` over `world_size` ranks."""
    left = budget_flops - run_flops(dims, recipe, stage2_steps=0, world_size=world_size)
    return max(1, round(left / step_flops(dims, "stage2", recipe.stage2, world_size)))


def cold_twin_overrides(recipe: Recipe, dims: ModelDims, world_size: int = 1,
                        batches: Mapping[str, int] | None = None) -> list[str]:
    """The `--set` items that turn a warm recipe into its cold twin at equal compute. `batches`: each
    training stage's global batch in sequences as the warm run trained it (`trained_batches`);
    None: the recipe's own over `world_size` ranks. The twin's stage 2 keeps the warm stage 2's
    batch on any world (`stage2.global_batch_size`, see `_pins_batch`), and its steps are counted
    at that batch (what the twin, counted in one process, trains)."""
    batches = resolved_batches(recipe, world_size) if batches is None else dict(batches)
    budget = run_flops(dims, recipe, world_size=world_size, batches=batches)
    stage2 = batches.get("stage2") or global_batch(recipe.stage2, world_size, "stage2")
    pinned = [f"stage2.global_batch_size={stage2}"] if _pins_batch(recipe, stage2) else []
    scratch, _, _ = _twin(recipe, ["init=scratch", *pinned])
    steps = equal_compute_stage2_steps(budget, dims, scratch)
    return [
        f"name={recipe.name}{COLD_SUFFIX}", "init=scratch", *pinned, f"stage2.steps={steps}",
        "evaluation.suites=[]", "evaluation.cold_baseline=false", "export.enabled=false",
    ]


def _pins_batch(recipe: Recipe, batch: int) -> bool:
    """Whether the twin's overrides set `stage2.global_batch_size` to the warm stage 2's `batch`:
    when the warm recipe set it (the twin inherits that value: the override changes nothing), or
    when the warm batch is not the one the recipe gives in one process (micro x accum x 1: a warm
    stage 2 whose batch followed a world of several ranks). Not otherwise: a stage's print hashes
    `global_batch_size` only when it is set (`TrainStageConfig.global_batch_size`), so pinning the
    batch a single-process warm run trained with would re-train every finished single-process twin
    (the demo's) for the very same batch."""
    stage = recipe.stage2
    return stage.global_batch_size is not None or batch != stage.micro_batch_size * stage.grad_accum_steps


def _twin(recipe: Recipe, overrides: list[str]) -> tuple[Recipe, dict[str, Any], bool]:
    """`recipe` with `overrides` (as `recipe.with_overrides`), its tree, and whether an explicit
    `stage2.grad_accum_steps` was left out: one that contradicts a pinned `stage2.global_batch_size`
    in one process (the accumulation a warm run set for its world of several ranks), which is then
    derived from the batch on any world. One that agrees in one process stays, so a single-process
    run's twin is the recipe it always was."""
    tree = apply_overrides(recipe.model_dump(mode="json", exclude_unset=True), overrides)
    stage2 = tree.setdefault("stage2", {})
    total, accum = stage2.get("global_batch_size"), stage2.get("grad_accum_steps")
    micro = stage2.get("micro_batch_size", recipe.stage2.micro_batch_size)
    dropped = total is not None and accum is not None and total != micro * accum
    if dropped:
        del stage2["grad_accum_steps"]
    return Recipe.model_validate(tree), tree, dropped


def resolved_batches(recipe: Recipe, world_size: int) -> dict[str, int]:
    """Each training stage's global batch (sequences) as the recipe resolves it over `world_size` ranks."""
    return {name: global_batch(getattr(recipe, name), world_size, name) for name in recipe.training_stages}


def trained_batches(recipe: Recipe) -> dict[str, int]:
    """Each training stage's global batch (sequences per step) as the warm run trained it: its
    manifest's `summary.global_batch` (`train.stage`); a summary without it (written before it was
    recorded) gives its batch at the world size it records; without either, the recipe's own batch
    at `trained_world_size` (no manifest: `cluster.world_size`)."""
    layout, batches = RunLayout(recipe.run_dir), {}
    for name in recipe.training_stages:
        summary = layout.stage_summary(name)
        batch, world = summary.get("global_batch"), summary.get("world_size")
        if _count(batch):
            batches[name] = batch
        else:
            batches[name] = global_batch(getattr(recipe, name), world if _count(world) else trained_world_size(recipe), name)
    return batches


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def trained_world_size(recipe: Recipe) -> int:
    """The world size the warm run's training ran on, as its stage 2's manifest records it (else
    stage 1's; the recipe's cluster when neither has run)."""
    layout = RunLayout(recipe.run_dir)
    for stage in ("stage2", "stage1"):
        world = layout.stage_summary(stage).get("world_size")
        if _count(world):
            return world
    return recipe.cluster.world_size


def cold_twin_recipe(recipe: Recipe, base_model: str | None) -> LoadedRecipe | None:
    """The twin's recipe when `evaluation.cold_baseline` asks for one, else None; the pipeline
    runs it before this run's evaluate stage (`pipeline.stages.Dependency`)."""
    if not (recipe.wants_cold_twin and base_model):
        return None
    # The warm run's own step-0 model has the dims both runs train: the base body, the new vocabulary.
    dims = load_model_dims(RunLayout(recipe.run_dir).embeddings.model)
    overrides = cold_twin_overrides(recipe, dims, batches=trained_batches(recipe))
    twin_recipe, tree, dropped = _twin(recipe, overrides)
    # The twin's manifests name the warm run's resolved recipe as theirs, with the overrides logged.
    twin = LoadedRecipe(twin_recipe, RunLayout(recipe.run_dir).resolved_recipe, tree,
                        {"inherited": [], "overridden": []})
    log.info("cold twin: %s (%s%s)", twin.recipe.run_dir, " ".join(f"--set {o}" for o in overrides),
             "; stage2.grad_accum_steps left out: derived from global_batch_size" if dropped else "")
    return twin
