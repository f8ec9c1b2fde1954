"""The stage table: each stage of a run with its slice of the recipe bound, and what its
fingerprint covers: the recipe keys its slice's fields declare (`recipe.slices`) and the files it
reads from outside the run.

`stage_table` is the only place that builds a stage's slice from the recipe; `pipeline.runner`
runs the table in order. Torch-free: `langadapt plan` and dry runs build it.
"""

from __future__ import annotations

import glob
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langadapt.pipeline.preflight import check_licence
from langadapt.recipe import LoadedRecipe, Recipe
from langadapt.recipe.data import SourceConfig
from langadapt.recipe.slices import recipe_keys
from langadapt.run.context import StageContext
from langadapt.run.fingerprint import OutsideFiles
from langadapt.run.layout import RunLayout

if TYPE_CHECKING:
    from langadapt.recipe.train import TrainingSlice


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
class EarlyCheck:
    """A check of a stage that needs only the output of an earlier stage, `after`: the pipeline runs
    it as soon as that output exists, before the first stage past `after` runs, so that what only
    real data shows stops the run before the stages in between spend hours (the epoch cap on the
    token shards: checked before the embeddings and stage 1, not when stage 2 starts)."""

    after: str
    check: Callable[[StageContext], None]


@dataclass(frozen=True)
class Stage:
    """One pipeline step: a name, the recipe parts it reads, and its entry point (slice bound)."""

    name: str
    sections: tuple[str, ...]
    """What the stage reads of the recipe (sections or dotted keys, see `run.fingerprint.section_hash`):
    its fingerprint's recipe part, the keys its slice's fields declare (`recipe.slices.recipe_keys`)."""
    run: Entry
    skip_reason: str | None = None
    ignores: tuple[str, ...] = ()
    """Fields of `sections` the stage does not read: changing one must not re-run it."""
    at_default: tuple[str, ...] = ()
    """Fields of `sections` the stage does not read that finished runs' prints hashed: hashed at
    their default value (`run.fingerprint.recipe_hash`), so those prints hold and a change re-runs nothing."""
    needs: Callable[[StageContext], Dependency | None] | None = None
    """The run this stage depends on, known only once the stages before it are done (the cold
    twin's recipe takes its dims from this run's embeddings): the pipeline runs it just before."""
    check_after: Callable[[Sequence[str]], None] | None = None
    """A preflight check that needs this stage's output, run once it completes, given the stages the
    run selected (the licence guard needs the notes of fetched sources, which exist only after the
    data stage fetched them)."""
    files: Callable[[str | None], OutsideFiles] | None = None
    """The files the stage reads from outside the run, given the resolved base model folder (None
    while it is still to be built or downloaded): their content is in its fingerprint."""
    early_check: EarlyCheck | None = None
    """A check the pipeline runs before the stage itself, once the output it needs exists."""
    announce: Callable[[LoadedRecipe], str] | None = None
    """A line the pipeline logs as the stage starts (stage 2: what it inherits from stage 1)."""


def stage_table(recipe: Recipe) -> list[Stage]:
    """Each stage with its slice of the recipe bound; its `sections` are the keys the slice's fields
    declare, so the stage's fingerprint covers what it reads. Torch-free: `langadapt plan` and dry
    runs build it."""
    from langadapt.evaluation.stage_inputs import EvaluateSlice, evaluate_inputs
    from langadapt.export.provenance import ExportSlice, RunFacts
    from langadapt.recipe.data import DataSlice
    from langadapt.recipe.embeddings import EmbeddingsSlice, ScratchSlice
    from langadapt.recipe.replay import stage_mixture
    from langadapt.recipe.tokenizer import TokenizerSlice
    from langadapt.recipe.train import TrainingSlice

    def training(name: str) -> Stage:
        config = getattr(recipe, name)
        # A stage that will not run has no mixture to derive (its overrides may name what is gone).
        mixture = None if recipe.training_skip_reason(name) else stage_mixture(recipe.data, name, config)
        slice_ = TrainingSlice(name, config, recipe.engine, mixture,
                               after_stage1=name == "stage2" and "stage1" in recipe.training_stages,
                               force_epochs=recipe.data.force_epochs, document_masking=recipe.data.document_masking)
        return _stage(name, Entry("langadapt.train.stage", slice_), skip_reason=recipe.training_skip_reason(name),
                      early_check=EarlyCheck("tokenizer", partial(_plan_epochs, slice_)),
                      announce=_inheritance if name == "stage2" else None)

    def cold_twin(ctx: StageContext) -> Dependency | None:
        from langadapt.evaluation.cold_twin import cold_twin_recipe

        twin = cold_twin_recipe(recipe, ctx.base_model)
        if twin is None:
            return None
        return Dependency("cold", "the cold twin", twin, RunLayout(twin.recipe.run_dir).stage2.model)

    def base_model_files(base: str | None) -> OutsideFiles:
        if not recipe.base_model.path:
            return OutsideFiles()
        # Keys relative to the folder: the same bytes under another path are the same base.
        return OutsideFiles((Path(base),), relative_to=Path(base)) if base else OutsideFiles(missing="base_model")

    embeddings = Entry("langadapt.embeddings.scratch", ScratchSlice(recipe.base_model.architecture)) \
        if recipe.init == "scratch" else Entry("langadapt.embeddings.stage", EmbeddingsSlice(recipe.embeddings_as_hashed()))
    return [
        _stage("data", Entry("langadapt.data.stage", DataSlice(recipe.data)),
               files=lambda _: OutsideFiles(_local_source_files(recipe.data.sources)),
               check_after=lambda will: check_licence(recipe, will)),
        # The base model folder, through ctx.base_model: its recipe section and its files (the
        # embeddings and the rest inherit the files through the chain).
        _stage("tokenizer", Entry("langadapt.tokenizer.stage", TokenizerSlice(recipe.tokenizer, recipe.data.num_workers)),
               context=("base_model",), files=base_model_files),
        # Which entry runs (`init`) and the base model folder; a scratch model keeps the warm one's
        # `embeddings` section in its print (it was there before the keys were declared per field).
        _stage("embeddings", embeddings, context=("embeddings", "init", "base_model")),
        training("stage1"),
        training("stage2"),
        # The suites, their data files and the compare models, found as the stage finds them.
        _stage("evaluate", Entry("langadapt.evaluation.stage", EvaluateSlice(recipe.evaluation)),
               files=lambda _: OutsideFiles(named=evaluate_inputs(recipe.evaluation)), needs=cold_twin),
        _stage("export", Entry("langadapt.export.stage", ExportSlice(recipe.export, RunFacts.from_recipe(recipe))),
               skip_reason=None if recipe.export.enabled else "export.enabled is false"),
    ]


def _stage(name: str, entry: Entry, *, context: tuple[str, ...] = (), **rest: Any) -> Stage:
    """A stage whose fingerprint covers the recipe keys its slice's fields declare, plus `context`:
    what it reads of the recipe besides its slice (through `ctx`)."""
    keys = recipe_keys(entry.slice, *context)
    return Stage(name, keys.sections, entry, ignores=keys.ignores, at_default=keys.at_default, **rest)


def _plan_epochs(slice_: TrainingSlice, ctx: StageContext) -> None:
    """A training stage's epochs planned on the real token shards (`train.stage.plan_epochs_on_shards`,
    the plan its stream is built with): imported when it runs, the table stays torch-free."""
    from langadapt.train.stage import plan_epochs_on_shards

    plan_epochs_on_shards(slice_, ctx)


def _inheritance(loaded: LoadedRecipe) -> str:
    """Stage 2's start line: what it inherits from stage 1 and what it overrides (STYLE item 8)."""
    inherited, overridden = (", ".join(loaded.inheritance[key]) or "nothing" for key in ("inherited", "overridden"))
    return f"stage2 inherits from stage1: {inherited}; overrides: {overridden}"


def _local_source_files(sources: Sequence[SourceConfig]) -> tuple[Path, ...]:
    """The files of the sources read from this machine, each pattern's matches sorted. A fetched
    source is defined by its `fetch` spec (in the data section); its file may not exist yet when the
    prints are made, so hashing the file would change the print after a fetch."""
    patterns = [p for s in sources if s.fetch is None for p in ([s.path] if isinstance(s.path, str) else s.path)]
    return tuple(Path(match) for pattern in patterns for match in sorted(glob.glob(pattern)))


