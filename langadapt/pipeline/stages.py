"""The stage table: each stage of a run with its slice of the recipe bound, and the recipe parts
its fingerprint covers.

`stage_table` is the only place that builds a stage's slice from the recipe; `pipeline.runner`
runs the table in order. Torch-free: `langadapt plan` and dry runs build it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langadapt.pipeline.preflight import check_licence
from langadapt.recipe import LoadedRecipe, Recipe
from langadapt.recipe.data import TRAINING_FIELDS, TRAINING_SOURCE_FIELDS, UNFINGERPRINTED_FIELDS
from langadapt.run.context import StageContext
from langadapt.run.layout import RunLayout


@dataclass(frozen=True)
class Dependency:
    """A run of its own that this run needs first: the base model's build, the cold twin.

    The pipeline runs it (`run_pipeline` on its recipe, in its own run directory: its own lock,
    fingerprints and console label), so a finished one costs nothing the next time, then hands the
    stage that needs it `output` in `StageContext.needed`, under `role`."""

    role: str
    """The key of `output` in `StageContext.needed` ("cold": the name evaluation reports it under)."""
    about: str
    """What the run is, for the console ("the cold twin")."""
    loaded: LoadedRecipe
    output: Path
    """What the dependent stage reads of it (the base model folder, the twin's stage-2 model)."""


@dataclass(frozen=True)
class Entry:
    """A stage's entry point with its recipe slice bound: `<module>.run(slice, ctx) -> summary`.

    Every stage module has one `run(slice, ctx)`; the module is imported only when the stage runs,
    so `langadapt plan` and dry runs need no torch."""

    module: str
    slice: Any
    """The stage's slice (`recipe.<section>.<Name>Slice`, e.g. `recipe.train.TrainingSlice`: its own
    section and whatever it reads of the others, a frozen dataclass), built once from the recipe by
    `stage_table`."""

    def function(self) -> Callable[[Any, StageContext], dict[str, Any]]:
        return importlib.import_module(self.module).run

    def __call__(self, ctx: StageContext) -> dict[str, Any]:
        return self.function()(self.slice, ctx)


@dataclass(frozen=True)
class Stage:
    """One pipeline step: a name, the recipe parts it reads, and its entry point (slice bound)."""

    name: str
    sections: tuple[str, ...]
    """What the stage reads of the recipe (sections or dotted keys, see `LoadedRecipe.section_hash`):
    its fingerprint's recipe part, so it names everything its slice carries."""
    run: Callable[[StageContext], dict[str, Any]]
    skip_reason: str | None = None
    ignores: tuple[str, ...] = ()
    """Fields of `sections` the stage does not read: changing one must not re-run it."""
    needs: Callable[[StageContext], Dependency | None] | None = None
    """The run this stage depends on, known only once the stages before it are done (the cold
    twin's recipe takes its dims from this run's embeddings): the pipeline runs it just before."""
    check_after: Callable[[Sequence[str]], None] | None = None
    """A preflight check that needs this stage's output, run once it completes, given the stages the
    run selected (the licence guard needs the notes of fetched sources, which exist only after the
    data stage fetched them)."""


def stage_table(recipe: Recipe) -> list[Stage]:
    """Each stage with its slice of the recipe bound; `sections` name the same parts, so the stage's
    fingerprint covers exactly what it reads. Torch-free: `langadapt plan` and dry runs build it."""
    from langadapt.evaluation.training import EvaluateSlice
    from langadapt.export.provenance import ExportSlice, RunFacts
    from langadapt.recipe.data import DataSlice
    from langadapt.recipe.embeddings import EmbeddingsSlice, ScratchSlice
    from langadapt.recipe.replay import stage_mixture
    from langadapt.recipe.tokenizer import TokenizerSlice
    from langadapt.recipe.train import TrainingSlice

    def training(name: str) -> Entry:
        stage = getattr(recipe, name)
        # A stage that will not run has no mixture to derive (its overrides may name what is gone).
        mixture = None if recipe.training_skip_reason(name) else stage_mixture(recipe.data, name, stage)
        return Entry("langadapt.train.stage", TrainingSlice(
            name, stage, recipe.engine, mixture,
            after_stage1=name == "stage2" and "stage1" in recipe.training_stages,
            force_epochs=recipe.data.force_epochs, document_masking=recipe.data.document_masking))

    def cold_twin(ctx: StageContext) -> Dependency | None:
        from langadapt.evaluation.cold_twin import cold_twin_recipe

        twin = cold_twin_recipe(recipe, ctx.base_model)
        if twin is None:
            return None
        return Dependency("cold", "the cold twin", twin, RunLayout(twin.recipe.run_dir).stage2.model)

    embeddings = Entry("langadapt.embeddings.scratch", ScratchSlice(recipe.base_model.architecture)) \
        if recipe.init == "scratch" else Entry("langadapt.embeddings.stage", EmbeddingsSlice(recipe.embeddings))
    return [
        Stage("data", ("data",), Entry("langadapt.data.stage", DataSlice(recipe.data)), ignores=DATA_STAGE_IGNORES,
              check_after=lambda will: check_licence(recipe, will)),
        # min_vocab_fraction only decides whether a trained tokenizer is accepted, never what it is
        Stage("tokenizer", ("tokenizer", "base_model"),
              Entry("langadapt.tokenizer.stage", TokenizerSlice(recipe.tokenizer, recipe.data.num_workers)),
              ignores=("tokenizer.min_vocab_fraction",)),
        Stage("embeddings", ("embeddings", "init", "base_model"), embeddings),
        Stage("stage1", ("stage1", "engine", *TRAINING_DATA_KEYS), training("stage1"), recipe.training_skip_reason("stage1"),
              ignores=monitoring_keys("stage1")),
        Stage("stage2", ("stage2", "engine", *TRAINING_DATA_KEYS), training("stage2"),
              recipe.training_skip_reason("stage2"), ignores=monitoring_keys("stage2")),
        Stage("evaluate", ("evaluation", *PLANNING_KEYS),
              Entry("langadapt.evaluation.stage", EvaluateSlice(recipe.evaluation, recipe)),
              # the preparation job's settings change no estimate evaluate reports (GPU energy)
              ignores=(*monitoring_keys("stage1"), *monitoring_keys("stage2"), "cluster.preparation"), needs=cold_twin),
        Stage("export", ("export", *RUN_FACT_KEYS),
              Entry("langadapt.export.stage", ExportSlice(recipe.export, RunFacts.from_recipe(recipe))),
              None if recipe.export.enabled else "export.enabled is false"),
    ]


TRAINING_DATA_KEYS = ("data.sources[].name", *(f"data.sources[].{key}" for key in TRAINING_SOURCE_FIELDS),
                      *(f"data.{key}" for key in TRAINING_FIELDS))
"""What the training stages read of the data section: the mixture (each source's weight, epochs,
max_epochs, by name) and the repetition and masking switches. The YAML keeps them under `data:`
(every recipe stays valid); the fingerprints put them where they are read."""
DATA_STAGE_IGNORES = (*(f"data.sources[].{key}" for key in TRAINING_SOURCE_FIELDS),
                      *(f"data.{key}" for key in (*TRAINING_FIELDS, *UNFINGERPRINTED_FIELDS)))
"""Keys of the data section the data stage does not read: changing one must not re-run data,
tokenizer and embeddings (hours at scale)."""


PLANNING_KEYS = ("cluster", "engine", "stage1", "stage2", "init", "base_model", "tokenizer.kind", "tokenizer.vocab_size",
                 *TRAINING_DATA_KEYS)
"""What `langadapt plan` reads to estimate a training stage's energy, which the evaluate stage
reports (`EvaluateSlice.planning`): the hardware, engine and stage settings, the model's shape (base
model, vocabulary) and the mixture. `data.sources[].unique_tokens` is left out: planning reads it
only for a source without shards, and evaluate runs after the tokenizer stage wrote them."""
RUN_FACT_KEYS = ("init", "base_model.path", "data.valid_fraction", "data.max_valid_docs",
                 *(f"data.sources[].{key}" for key in ("name", "lang", "role", "format", "path", "valid_path")))
"""What `export.provenance.RunFacts` reads of the recipe for the model card."""


MONITORING_KEYS = ("checkpoint", "log_every", "loggers", "validation", "profile_steps")
"""Training-stage keys that change how a run is watched and saved, not the model it trains: out of
the fingerprint, so that editing them (checkpoint more often, another logger) resumes a stage from
its checkpoints instead of discarding its partial work, and a new key of this kind with a default
does not re-run finished stages."""


def monitoring_keys(stage_name: str) -> tuple[str, ...]:
    return tuple(f"{stage_name}.{key}" for key in MONITORING_KEYS)
