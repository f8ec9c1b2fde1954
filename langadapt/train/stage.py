"""The training stages' entry point: find the starting model, build the stream, call `fit`.

    stage1: embeddings/model  -> stage1/model    (body frozen: embeddings + LM head train)
    stage2: stage1/model, or embeddings/model when stage 1 did not run (init: scratch, or
            stage1.enabled false)  -> stage2/model    (everything trains; NEW engine and optimizer)

With `train_rows: new` a stage reads which embedding rows the embeddings stage copied from the
base (`RunLayout.embeddings.shared_rows`) and keeps them (langadapt.train.rows).

Both read the token shards in tokenizer/tokens through `langadapt.data.stream.build_stream` and
save the tokenizer beside the final model, so `<stage>/model` loads on its own in transformers.
`plan_epochs_on_shards` plans a stage's stream on those shards without training: the pipeline calls it for
every training stage as soon as the tokenizer stage has written them, before stage 1 trains.
Rerunning a stage that was interrupted resumes from its latest complete checkpoint.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from langadapt.data.schedule import EpochCapError
from langadapt.embeddings.row_plan import SharedRows
from langadapt.errors import LangadaptError
from langadapt.inputs.model_folder import is_model_folder
from langadapt.planning.training import global_batch as stage_global_batch
from langadapt.recipe.train import TrainingSlice
from langadapt.run import layout as run_layout
from langadapt.run.context import StageContext
from langadapt.train.distill import ReplayDistillation
from langadapt.train.fastpath import check_document_masking
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.monitoring.defaults import default_callbacks
from langadapt.train.monitoring.validation import Validation, load_held_out

log = logging.getLogger("langadapt.train")

STAGE_SEED_OFFSET = {"stage1": 1, "stage2": 2}
"""Each stage draws its own data order from the recipe seed (stage 2 does not replay stage 1's)."""


def init_model_dir(after_stage1: bool, stage_name: str, ctx: StageContext) -> Path:
    """The model a stage starts from (see the module docstring).

    The pipeline says whether stage 1 is part of this run (`after_stage1`) rather than this
    function guessing from the folder: a stage1/ left COMPLETE by an earlier run whose recipe has
    since set `stage1.enabled: false` must not be picked up.
    """
    upstream = ctx.layout.stage1 if after_stage1 else ctx.layout.embeddings
    folder, path = upstream.root, upstream.model
    if not (folder / run_layout.MARKER).is_file() or not is_model_folder(path):
        raise LangadaptError(f"{stage_name}: no complete starting model at {path}; run the {folder.name} stage first")
    return path


def load_model(path: Path, job: TrainingJob) -> torch.nn.Module:
    """The starting model in fp32 master weights (ZeRO-3: loaded straight into partitions, with the
    job's DeepSpeed JSON, the one its engine is built with)."""
    from transformers import AutoModelForCausalLM

    engine = job.engine
    kwargs = {"dtype": torch.float32, "attn_implementation": engine.attn_implementation}
    if engine.is_zero3:
        from langadapt.train.engines.deepspeed_engine import init_deepspeed_group, load_model_for_zero3

        init_deepspeed_group(job.dist)  # zero.Init partitions over the process group
        return load_model_for_zero3(path, job.deepspeed_config, **kwargs)
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def shared_rows(job: TrainingJob, ctx: StageContext) -> SharedRows | None:
    """The embeddings stage's record of the rows it copied from the base, when `train_rows: new` needs it."""
    if job.config.train_rows == "all":
        return None
    path = ctx.layout.embeddings.shared_rows
    if not path.is_file():
        raise LangadaptError.at(f"{job.stage}.train_rows", "new, but the embeddings stage recorded no shared rows "
                                f"({path} is missing: init: scratch, or an embeddings stage from before this option; "
                                "run it again)")
    return SharedRows.load(path)


def load_distillation(job: TrainingJob, ctx: StageContext) -> ReplayDistillation | None:
    """The teacher of `replay_distillation`: the embeddings stage's model, over the rows it copied
    from the base (langadapt.train.distill); None when the stage does not distil."""
    if not job.config.replay_distillation:
        return None
    key, layout = f"{job.stage}.replay_distillation", ctx.layout.embeddings
    if not (layout.root / run_layout.MARKER).is_file() or not is_model_folder(layout.model):
        raise LangadaptError.at(key, f"the teacher is the embeddings stage's model and {layout.model} is not complete; "
                                "run the embeddings stage first")
    if not layout.shared_rows.is_file():
        raise LangadaptError.at(key, f"the embeddings stage recorded no rows copied from the base ({layout.shared_rows} "
                                "is missing: init: scratch has none, or an embeddings stage from before this record; "
                                "run it again), so there is no base prediction to keep")
    # Loaded whole, before the model: under ZeRO-3 transformers partitions every model it loads
    # while the model's loading config lives (deepspeed_engine.release_zero3_loading).
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(job.engine.precision, torch.float32)
    return ReplayDistillation.load(layout.model, SharedRows.load(layout.shared_rows).ids, job.config.replay_distillation,
                                   dtype=dtype, attn_implementation=job.engine.attn_implementation)


def tokenizer_dir(ctx: StageContext, init: Path) -> Path:
    """The tokenizer of the shards: the tokenizer stage's, else the starting model's."""
    source = ctx.layout.tokenizer.tokenizer
    if not (source / "tokenizer_config.json").is_file() and not (source / "tokenizer.json").is_file():
        source = init
    return source


def build_validation(job: TrainingJob, ctx: StageContext, trained_sources: list[str],
                     position_ids: Callable = lambda inputs: None) -> Validation | None:
    """The held-out windows scored during training (`validation.langs`, else the trained sources'
    languages), decoded for their language check with `job.tokenizer`; None when the stage
    validates nothing."""
    stage_name, config, dist, tokenizer = job.stage, job.config, job.dist, job.tokenizer
    settings = config.validation
    if settings.every_steps is None:
        return None
    sets = load_held_out(ctx.layout.tokenizer.valid_tokens, None if settings.langs else trained_sources,
                         settings.langs, config.seq_len, settings.tokens_per_lang,
                         lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
    if not sets:
        raise LangadaptError.at(f"{stage_name}.validation.every_steps", "no held-out shards of the trained sources "
                                f"under {ctx.layout.tokenizer.valid_tokens}; set data.valid_fraction above 0 or turn it off")
    log.info("%s: validation every %d steps on %s", stage_name, settings.every_steps,
             ", ".join(f"{s.lang} ({s.windows.size - len(s.windows):,} tokens)" for s in sets))
    return Validation(sets, settings, config.micro_batch_size, job.engine.precision, dist.rank, dist.world_size,
                      position_ids)


def stream_budget(slice_: TrainingSlice, batch: int) -> tuple[dict[str, dict] | None, int]:
    """The mixture and the number of samples (steps x global batch `batch`) a stage's stream is planned with."""
    mixture = slice_.mixture
    # The pipeline passes the data mixture with this stage's overrides and replay share applied
    # (recipe.replay.stage_mixture); without it, only the stage's own overrides are known here.
    if mixture is None and slice_.config.mixture is not None:
        mixture = {name: entry.model_dump() for name, entry in slice_.config.mixture.items()}
    return mixture, slice_.config.steps * batch


def plan_epochs_on_shards(slice_: TrainingSlice, ctx: StageContext) -> None:
    """Plan training stage `slice_.name`'s stream on the real token shards, as `run` will
    (`data.stream.plan_stream`, which `build_stream` plans with), without loading a model or training.

    Preflight counts epochs from estimates when the shards do not exist yet; the pipeline calls this
    for every training stage about to run once the tokenizer stage has written them, so a cap that
    only the real counts cross stops the run before stage 1 trains, not when stage 2 starts.
    A disabled stage has no stream to plan."""
    from langadapt.data.stream import plan_stream

    if not slice_.config.enabled:
        return
    mixture, samples = stream_budget(slice_, stage_global_batch(slice_.config, ctx.dist.world_size, slice_.name))
    with _epochs_located(slice_, ctx.layout.tokenizer.tokens):
        plan_stream(ctx.layout.tokenizer.tokens, mixture, slice_.config.seq_len, samples, slice_.force_epochs)


@contextmanager
def _epochs_located(slice_: TrainingSlice, tokens: Path) -> Iterator[None]:
    """An epoch cap crossed is blamed on the stage's `steps`, with the fix the schedule does not name
    (fewer steps) and where the token counts came from."""
    try:
        yield
    except EpochCapError as exc:
        raise LangadaptError.at(f"{slice_.name}.steps", f"{exc}; or lower {slice_.name}.steps ({slice_.config.steps:,}) "
                                f"(unique tokens counted on the token shards in {tokens})") from None


def tracker_setup(after_stage1: bool, job: TrainingJob, ctx: StageContext) -> tuple[int, dict[str, Any]]:
    """The trackers' step offset (stage 1's steps when this stage follows it: one axis for the
    run) and configuration (the resolved recipe the pipeline wrote; this stage's slice without one)."""
    offset = int(ctx.layout.stage_summary("stage1").get("steps") or 0) if after_stage1 else 0
    return offset, ctx.layout.recipe() or {job.stage: job.config.model_dump(mode="json")}


def run(slice_: TrainingSlice, ctx: StageContext) -> dict[str, Any]:
    """Run training stage `slice_.name` (stage1 or stage2) into ctx.out on `ctx.dist`; returns its summary.

    The pipeline never enters a disabled stage: `Recipe.training_skip_reason` is its skip reason in
    the stage table, and the runner calls only the stages it runs or resumes."""
    stage_name, config, dist = slice_.name, slice_.config, ctx.dist
    after_stage1, force_epochs, document_masking = slice_.after_stage1, slice_.force_epochs, slice_.document_masking
    from langadapt.data.stream import build_stream
    from langadapt.tokenizer.loading import load_tokenizer

    # Resolved once, before any loading: an engine that cannot run here fails in seconds.
    training = TrainingJob.resolve(config, slice_.engine, ctx.out,
                                   seed=ctx.seed + STAGE_SEED_OFFSET.get(stage_name, 0), stage_name=stage_name, dist=dist)
    engine, global_batch = training.engine, training.settings.global_batch
    init = init_model_dir(after_stage1, stage_name, ctx)
    shared = shared_rows(training, ctx)  # before any loading
    distillation = load_distillation(training, ctx)
    log.info("%s: starting from %s (%s engine, ZeRO %d, %s)", stage_name, init, engine.kind,
             engine.zero_stage, engine.precision)
    model = load_model(init, training)
    if document_masking:
        check_document_masking(model)
    mixture, samples = stream_budget(slice_, global_batch)
    with _epochs_located(slice_, ctx.layout.tokenizer.tokens):
        stream = build_stream(ctx.layout.tokenizer.tokens, mixture, config.seq_len, samples, training.seed,
                              force=force_epochs, document_masking=document_masking)
    tokenizer = load_tokenizer(tokenizer_dir(ctx, init))
    training = replace(training, tokenizer=tokenizer, shared_rows=shared,  # fit saves the tokenizer with the model
                       distillation=distillation)
    validation = build_validation(training, ctx, stream.trained_sources(), stream.position_ids)
    step_offset, recipe = tracker_setup(after_stage1, training, ctx)
    callbacks = default_callbacks(config, ctx.out, training.run_label, stream=stream, step_offset=step_offset,
                                  recipe=recipe)
    try:
        result = fit(model, stream, training, callbacks, validation)
    finally:
        if engine.is_zero3:
            from langadapt.train.engines.deepspeed_engine import release_zero3_loading

            release_zero3_loading(model)
    summary = {
        "steps": result.steps, "tokens": result.tokens, "final_loss": result.final_loss,
        "last_step_loss": result.last_step_loss,
        "skipped_steps": result.skipped_steps, "trainable_params": result.trainable_params,
        "resumed_from_step": result.resumed_from, "init_model": str(init), "model": str(result.model_dir),
        "engine": engine.kind, "zero_stage": engine.zero_stage, "precision": engine.precision,
        "world_size": dist.world_size, "global_batch": global_batch, "settings": training.settings.as_dict(),
        "train_rows": config.train_rows, "shared_rows_kept": None if shared is None else len(shared.ids),
        **result.monitoring,
    }
    if dist.rank == 0:
        ctx.layout.trained(stage_name).summary.write_text(json.dumps(summary, indent=1))
    return summary
