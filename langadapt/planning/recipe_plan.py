"""The recipe -> plan glue behind `langadapt plan RECIPE`.

Sizes come from the model's config (a local folder, a Hub id in the built-in table, or the
scratch architecture) with the NEW vocabulary; unique tokens per source come from the run's own
shards when the tokenizer stage has run, else from the sources' declared `unique_tokens`.
"""

from __future__ import annotations

import json
from typing import Any

from langadapt.data.config import stream_mixture
from langadapt.data.epochs import plan_stage_mixture
from langadapt.errors import LangadaptError
from langadapt.planning.models import ModelDims, dims_from_config, load_model_dims
from langadapt.planning.plan import StagePlanInput, build_plan
from langadapt.recipe import Recipe
from langadapt.run.layout import TRAINING_STAGES, RunLayout
from langadapt.tokenizer.summary import vocabulary_shortfall


def model_dims(recipe: Recipe) -> ModelDims:
    """The model's shape with the vocabulary it will have after the tokenizer swap: the size the
    tokenizer stage reached once it has run (it can stop short of vocab_size), else the one asked for."""
    if recipe.init == "scratch" and recipe.base_model.architecture:
        dims = dims_from_config(recipe.base_model.architecture, name=recipe.name)
    else:
        dims = load_model_dims(recipe.base_model.path or "")
    if recipe.tokenizer.kind == "keep_base":
        return dims
    reached = RunLayout(recipe.run_dir).stage_summary("tokenizer").get("vocab_size")
    return dims.with_vocab(reached if isinstance(reached, int) else recipe.tokenizer.vocab_size)


def measured_tokens(recipe: Recipe) -> dict[str, float]:
    """Unique tokens per source from this run's shards, when they exist."""
    measured = {}
    for meta in RunLayout(recipe.run_dir).tokenizer.tokens.glob("*/meta.json"):
        measured[meta.parent.name] = float(json.loads(meta.read_text())["num_tokens"])
    return measured


def _stage_input(recipe: Recipe, name: str, world_size: int, measured: dict[str, float]) -> StagePlanInput:
    stage = getattr(recipe, name)
    global_batch = stage.micro_batch_size * stage.grad_accum_steps * world_size
    declared = {s.name: s.unique_tokens for s in recipe.data.sources}
    entries = stream_mixture(recipe.data, stage.mixture)
    sizes = {name: measured.get(name, declared[name]) for name in entries}
    mixture = None
    if all(sizes.values()):
        mixture = plan_stage_mixture(entries, sizes, stage.seq_len, stage.steps * global_batch,  # type: ignore[arg-type]
                                     force=recipe.data.force_epochs).to_dict()
    zero = stage.zero_stage if stage.zero_stage is not None else recipe.engine.zero_stage
    return StagePlanInput(
        name=name, steps=stage.steps, seq_len=stage.seq_len, global_batch=global_batch,
        micro_batch=stage.micro_batch_size,
        trainable="all" if stage.trainable_patterns(name) == ["all"] else "embeddings",
        zero_stage=zero, fsdp=recipe.engine.fsdp if recipe.engine.kind == "fsdp" else None,
        activation_checkpointing=recipe.engine.activation_checkpointing,
        flash_attention=recipe.engine.attn_implementation != "eager", mixture=mixture,
        fused_loss=recipe.engine.fused_loss is not False)  # auto: on for the GPUs a plan is for


def plan_recipe(recipe: Recipe, hardware: str | None = None, num_gpus: int | None = None,
                mfu: float | None = None) -> dict[str, Any]:
    """The JSON plan of the recipe's enabled training stages (the arguments override `cluster`)."""
    cluster = recipe.cluster
    world = num_gpus or cluster.world_size
    measured = measured_tokens(recipe)
    names = [n for n in TRAINING_STAGES if getattr(recipe, n).enabled and not (n == "stage1" and recipe.init == "scratch")]
    if not names:
        raise LangadaptError(f"{recipe.name}: no training stage is enabled; nothing to plan")
    hardware_name = hardware or cluster.hardware
    peak = None
    if hardware_name.startswith("custom:"):
        hardware_name, peak = "custom", float(hardware_name.split(":", 1)[1])
    plan = build_plan(model_dims(recipe), [_stage_input(recipe, n, world, measured) for n in names],
                      hardware=hardware_name, mfu=mfu or cluster.mfu, num_gpus=world,
                      peak_tflops=peak, grid=cluster.grid)
    plan["recipe"] = recipe.name
    shortfall = vocabulary_shortfall(RunLayout(recipe.run_dir).stage_summary("tokenizer"))
    if shortfall:
        plan["notes"] = [f"tokenizer stage: {shortfall}; sizes above use the tokens it made"]
    return plan
