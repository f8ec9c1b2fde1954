"""The recipe -> plan glue behind `langadapt plan RECIPE`.

Sizes come from the model's config (a local folder, a Hub id in the built-in table, the
scratch architecture, or that of the recipe that builds the base) with the NEW vocabulary; unique tokens per source come from the run's own
shards when the tokenizer stage has run, else from the sources' declared `unique_tokens`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langadapt.data.corpus_size import uncompressed_bytes
from langadapt.data.epochs import stage_plan
from langadapt.data.shards import read_shards
from langadapt.data.source_paths import local_files
from langadapt.errors import LangadaptError
from langadapt.inputs.model_folder import is_model_folder
from langadapt.planning.languages import language_rows, weighted_tokens
from langadapt.planning.models import ModelDims, complete_architecture, dims_from_config, load_model_dims
from langadapt.planning.plan import StagePlanInput, build_plan
from langadapt.planning.preparation import preparation_estimate, source_text
from langadapt.planning.training import TrainingSettings, resolve_training
from langadapt.recipe import Recipe, load_recipe
from langadapt.recipe.data import SourceConfig
from langadapt.recipe.replay import REPLAY_ROLE, stage_mixture, stage_replay
from langadapt.run.layout import RunLayout
from langadapt.tokenizer.summary import vocabulary_shortfall

PLAN_FILE = "plan.json"
"""`langadapt plan` of the recipe a run was started with, in its folder beside recipe.resolved.yaml."""


def run_plan_file(layout: RunLayout) -> Path:
    """Where the pipeline writes the run's plan (`write_run_plan`) and the report reads it."""
    return layout.resolved_recipe.with_name(PLAN_FILE)


def write_run_plan(recipe: Recipe) -> None:
    """`langadapt plan` of `recipe` into its run folder, written by the pipeline once per `langadapt
    run`, beside the resolved recipe: the report's planned energy per step reads it
    (`evaluation.training_report.planned_energy`), outside every stage's print. Made as the run starts: a
    first run plans the vocabulary the recipe asks for, and one the tokenizer stage left short is in
    the plan of the next `langadapt run`. A recipe that cannot be planned writes {"error": why}: an
    estimate stops no run."""
    try:
        plan = plan_recipe(recipe)
    except Exception as error:  # a fault in an estimate must not stop days of training: the report names it
        plan = {"error": str(error) if isinstance(error, LangadaptError) else f"{type(error).__name__}: {error}"}
    run_plan_file(RunLayout(recipe.run_dir)).write_text(json.dumps(plan, indent=2, default=str), encoding="utf-8")


def model_dims(recipe: Recipe) -> ModelDims:
    """The model's shape with the vocabulary it will have after the tokenizer swap: the size the
    tokenizer stage reached once it has run (it can stop short of vocab_size), else the one asked for."""
    spec = recipe.base_model
    if recipe.init == "scratch" and spec.architecture:
        dims = _architecture_dims(recipe)
    elif spec.build_recipe and not is_model_folder(Path(spec.path or "")):
        dims = _architecture_dims(load_recipe(spec.build_recipe).recipe)  # a base built by its recipe, not yet
    else:
        dims = load_model_dims(spec.path or "")
    if recipe.tokenizer.kind == "keep_base":
        return dims
    reached = RunLayout(recipe.run_dir).stage_summary("tokenizer").get("vocab_size")
    return dims.with_vocab(reached if isinstance(reached, int) else recipe.tokenizer.vocab_size)


def _architecture_dims(recipe: Recipe) -> ModelDims:
    """The shape of a scratch recipe's model: its architecture, with the vocabulary its own
    tokenizer will have (a scratch architecture leaves vocab_size to the tokenizer)."""
    architecture = {"vocab_size": recipe.tokenizer.vocab_size,
                    **complete_architecture(recipe.base_model.architecture or {})}
    return dims_from_config(architecture, name=recipe.name)


def measured_tokens(recipe: Recipe) -> dict[str, float]:
    """Unique tokens per source from this run's shards, when they exist."""
    shards = read_shards(RunLayout(recipe.run_dir).tokenizer.tokens)
    return {name: float(shard.num_tokens) for name, shard in shards.items()}


def stage_settings(recipe: Recipe, name: str, world_size: int) -> TrainingSettings:
    """What training stage `name` will run with on `world_size` GPUs of the cluster: the training
    stage's own resolver, for GPUs with the `gpu` extra (liger-kernel) installed."""
    return resolve_training(name, getattr(recipe, name), recipe.engine, world_size, "cuda", have_liger=True)


def deepspeed_buckets(raw: dict[str, Any] | None) -> dict[str, Any]:
    """The settings of a raw `engine.deepspeed_config` that size DeepSpeed's reduction buffers."""
    zero = (raw or {}).get("zero_optimization") or {}
    return {key: zero[key] for key in ("reduce_bucket_size", "overlap_comm") if key in zero}


def _stage_input(recipe: Recipe, settings: TrainingSettings, entries: dict[str, dict],
                 measured: dict[str, float]) -> StagePlanInput:
    stage, engine = getattr(recipe, settings.stage), settings.engine
    declared = {s.name: s.unique_tokens for s in recipe.data.sources}
    sizes = {name: measured.get(name, declared[name]) for name in entries}
    mixture = None
    if all(sizes.values()):
        mixture = stage_plan(entries, sizes, stage.seq_len, stage.steps * settings.global_batch,  # type: ignore[arg-type]
                             force=recipe.data.force_epochs).to_dict()
    return StagePlanInput(
        name=settings.stage, steps=stage.steps, seq_len=settings.seq_len, global_batch=settings.global_batch,
        micro_batch=settings.micro_batch, trainable=settings.trainable, zero_stage=engine.zero_stage,
        fsdp=engine.fsdp if engine.kind == "fsdp" else None, activation_checkpointing=engine.activation_checkpointing,
        **deepspeed_buckets(engine.deepspeed_config),
        flash_attention=engine.attn_implementation != "eager", mixture=mixture, fused_loss=bool(engine.fused_loss))


def plan_recipe(recipe: Recipe, hardware: str | None = None, num_gpus: int | None = None,
                mfu: float | None = None) -> dict[str, Any]:
    """The JSON plan of the recipe's enabled training stages (the arguments override `cluster`)."""
    cluster = recipe.cluster
    world = num_gpus or cluster.world_size
    measured = measured_tokens(recipe)
    names = recipe.training_stages
    if not names:
        raise LangadaptError(f"{recipe.name}: no training stage is enabled; nothing to plan")
    hardware_name = hardware or cluster.hardware  # `custom:<TFLOP/s>` is read by recipe.hardware.get_hardware
    settings = [stage_settings(recipe, name, world) for name in names]
    mixtures = {name: stage_mixture(recipe.data, name, getattr(recipe, name)) for name in names}
    plan = build_plan(model_dims(recipe), [_stage_input(recipe, one, mixtures[one.stage], measured) for one in settings],
                      hardware=hardware_name, mfu=mfu or cluster.mfu, num_gpus=world,
                      grid=cluster.grid)
    plan["recipe"] = recipe.name
    plan["preparation"] = preparation_plan(recipe, measured)
    for stage, one in zip(plan["stages"], settings):
        stage["settings"] = one.as_dict()  # what training will run with (planning.training.resolve_training)
    notes = []
    shortfall = vocabulary_shortfall(RunLayout(recipe.run_dir).stage_summary("tokenizer"))
    if shortfall:
        notes.append(f"tokenizer stage: {shortfall}; sizes above use the tokens it made")
    plan["languages"] = _languages(recipe, plan["stages"], mixtures, notes)
    if notes:
        plan["notes"] = notes
    return plan


def preparation_plan(recipe: Recipe, measured: dict[str, float]) -> dict[str, Any]:
    """Core-hours and wall time of the preparation job (`planning.preparation`) on one node of
    `cluster.preparation.cpus` cores, from each source's text: its local files' size, else its
    tokens (this run's shards, else `unique_tokens`)."""
    prep = recipe.cluster.preparation
    texts = [source_text(s.name, _file_bytes(s), measured.get(s.name), s.unique_tokens, s.format == "hf_hub")
             for s in recipe.data.sources]
    return preparation_estimate(texts, prep.cpus, time_limit_s=prep.time_seconds)


def _file_bytes(source: SourceConfig) -> float | None:
    """Uncompressed bytes of a source's local files; None when any is unknown or not there yet."""
    files = local_files(source)
    sizes = [uncompressed_bytes(path) for path in files or []]
    return None if not files or None in sizes else float(sum(sizes))  # type: ignore[arg-type]


def _languages(recipe: Recipe, stages: list[dict[str, Any]], mixtures: dict[str, dict[str, dict]],
               notes: list[str]) -> list[dict[str, Any]]:
    """Tokens per language and role of each stage (`planning.languages`): from the size-aware
    mixture plan when the sizes are known, else from the weights where they alone decide. A replay
    share that `max_epochs` caps moved away from what the recipe states gets a note."""
    sources = [(s.name, s.lang, s.role) for s in recipe.data.sources]
    rows: list[dict[str, Any]] = []
    for stage in stages:
        name = stage["name"]
        if stage["mixture"]:
            tokens = {src["name"]: float(src["tokens"]) for src in stage["mixture"]["sources"]}
        else:
            tokens = weighted_tokens(mixtures[name], float(stage["tokens"]))  # type: ignore[assignment]
        if tokens is None:
            notes.append(f"{name}: tokens per language need the sources' sizes (epochs or max_epochs); "
                         "give them unique_tokens or run the tokenizer stage")
            continue
        stage_rows = language_rows(name, tokens, sources)
        rows += stage_rows
        share, key = stage_replay(recipe.data, name, getattr(recipe, name))
        got = sum(row["share"] for row in stage_rows if row["role"] == REPLAY_ROLE)
        if share is not None and abs(got - share) > 0.005:
            notes.append(f"{name}: {key} is {share:g} but replay sources get {got:.3f} of the tokens "
                         "(a max_epochs cap moves the excess to the other sources)")
    return rows
