"""Runs the stages of a recipe in order inside its run directory, skipping finished ones.

The stage table (`pipeline.stages.stage_table`) is the only place that builds each stage's slice from
the recipe; each stage's entry point gets its own slice and a `StageContext`, and nothing else couples
them (they communicate through the run directory, whose paths `run.layout.RunLayout` names once).

Order of work in `run_pipeline`: take the run lock, run the base model's own recipe when its
folder is missing, resolve the base, then fingerprint each stage from content hashes of what it
reads, so a finished run is a fixed point: running it again skips every stage.

A run is a graph: besides its stages in order it may depend on other runs (`Dependency`), the
base model's build before everything and the cold twin before evaluate. The pipeline schedules
them itself, each in its own run directory with its own lock and fingerprints; no stage starts a
pipeline from inside.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.pipeline.preflight import check_recipe, find_problems
from langadapt.pipeline.stages import Dependency, Stage, stage_table
from langadapt.planning.recipe_plan import write_run_plan
from langadapt.recipe import LoadedRecipe, Recipe
from langadapt.recipe.errors import Report
from langadapt.recipe.paths import COLD_SUFFIX
from langadapt.run import completion
from langadapt.run.base_model import base_build, resolve_base_model
from langadapt.run.contenthash import HashCache
from langadapt.run.context import StageContext
from langadapt.run.fingerprint import fingerprints, recipe_hash
from langadapt.run.identity import claim_run
from langadapt.run.layout import MODEL_STAGES, STAGES, TRAINING_STAGES, RunLayout
from langadapt.run.lock import RunLock
from langadapt.runtime import signals
from langadapt.runtime.placement import DistInfo

log = logging.getLogger("langadapt")
_OUTER_RUN: ContextVar[str | None] = ContextVar("outer_run", default=None)
"""The run the user started; the base model's and the cold twin's runs happen inside it."""


@contextlib.contextmanager
def _labelled(recipe: Recipe) -> Iterator[None]:
    """Inside another run's pipeline (base model, cold twin), stage lines carry this run's name."""
    token = _OUTER_RUN.set(_OUTER_RUN.get() or recipe.name)
    try:
        yield
    finally:
        _OUTER_RUN.reset(token)


def _stage_label(stage_name: str, run_name: str) -> str:
    """`stage1    ` for the run the user started, `[demo_cold] stage1    ` for one it runs inside."""
    prefix = "" if _OUTER_RUN.get() in (None, run_name) else f"[{run_name}] "
    return f"{prefix}{stage_name:<10}"


RUN, RESUME = "run", "resume"
RUN_AFRESH = "run afresh (discarding partial work)"
WORKING = (RUN, RESUME, RUN_AFRESH)
"""The actions of a stage that will work now (the others: skip, complete, not selected)."""


def select_stages(names: list[str], only: str | None, start: str | None, until: str | None) -> list[str]:
    """Which stage names --only / --from / --until ask for; never an empty selection.

    An empty one (`--from evaluate --until stage1`) would run nothing and still answer as if it had
    done the work; `--only` with a range is two answers to one question. Both are refused here,
    the one place every caller (run, dry run, export) goes through."""
    for flag, value in (("--only", only), ("--from", start), ("--until", until)):
        if value is not None and value not in names:
            raise LangadaptError(f"{flag} {value}: unknown stage; stages are {', '.join(names)}")
    if only:
        if start or until:
            given = " ".join(f"{flag} {value}" for flag, value in (("--from", start), ("--until", until)) if value)
            raise LangadaptError(f"--only {only} with {given}: --only runs one stage, --from/--until a range; "
                                 "give one or the other")
        return [only]
    first = names.index(start) if start else 0
    last = names.index(until) if until else len(names) - 1
    if first > last:
        raise LangadaptError(f"--from {start} --until {until}: selects no stage ({start} comes after {until}; "
                             f"the order is {', '.join(names)})")
    return names[first : last + 1]


def run_models(stages: list[Stage], layout: RunLayout) -> dict[str, Path]:
    """The models this recipe's enabled stages produce, in pipeline order (evaluation's names).

    Evaluation and export are told these instead of probing folders: a stage1/ left complete by
    an earlier recipe that had stage 1 enabled is not a model of this run."""
    enabled = {s.name for s in stages if s.skip_reason is None}
    return {name: layout.trained(stage).model for name, stage in MODEL_STAGES.items() if stage in enabled}


def plan_actions(loaded: LoadedRecipe, selected: list[str], force: bool, base_model: str | None = None,
                 cache: HashCache | None = None) -> tuple[list[tuple[Stage, str]], dict[str, str]]:
    """What each stage would do now (run, resume, skip: complete / disabled / not selected), and
    each stage's fingerprint."""
    stages = stage_table(loaded.recipe)
    prints = fingerprints(loaded, stages, base_model, cache)
    layout = RunLayout(loaded.recipe.run_dir)
    actions = []
    for stage in stages:
        stage_dir = layout.stage_dir(stage.name)
        if stage.skip_reason:
            actions.append((stage, f"skip ({stage.skip_reason})"))
        elif stage.name not in selected:
            done = completion.is_complete(stage_dir, prints[stage.name])
            actions.append((stage, "complete" if done else "not selected"))
        elif not force and completion.is_complete(stage_dir, prints[stage.name]):
            actions.append((stage, "skip (complete, inputs unchanged)"))
        else:
            actions.append((stage, _start_action(stage.name, layout, prints[stage.name], force)))
    return actions, prints


def _start_action(name: str, layout: RunLayout, fingerprint: str, force: bool) -> str:
    """run, resume, or run afresh: what a stage that will work does with partial work of the same inputs.

    A plain re-run keeps it (a crashed or requeued training stage resumes its checkpoints); a stage
    the user re-selected (--force, --from, --only) starts over, since asking to re-run a stage and
    getting the tail of the last attempt is not what was asked."""
    folder = layout.stage_dir(name) if name in TRAINING_STAGES else layout.work_dir(name)
    if not completion.has_partial(folder, fingerprint):
        return RUN
    if force:
        return RUN_AFRESH
    return RESUME if name in TRAINING_STAGES else RUN


def _force(force: bool | None, only: str | None, start: str | None) -> bool:
    """Whether complete stages among the selected re-run: `force` when given, else only under
    --only and --from (asking for a stage by name means running it)."""
    return bool(only) or bool(start) if force is None else force


def run_pipeline(loaded: LoadedRecipe, only: str | None = None, start: str | None = None,
                 until: str | None = None, force: bool | None = None, dry_run: bool = False,
                 overwrite: bool = False, wait_for_lock: bool = False) -> list[tuple[str, str]]:
    """Run (or with dry_run, only plan) the selected stages; returns (stage, action) pairs.

    `force` None: --only and --from re-run their stages even when complete, as the CLI says;
    False keeps a complete stage (`langadapt export` re-uses a finished export). `overwrite`
    lets a stage replace output a person may have edited (the exported model card).
    `wait_for_lock`: another process of this host running this recipe is waited for, not refused
    (a dependency run: `run.lock.RunLock`)."""
    recipe = loaded.recipe
    layout = RunLayout(recipe.run_dir)
    selected = select_stages(list(STAGES), only, start, until)
    take_over = force is True  # --force, not the re-run that --only/--from imply
    claim_run(loaded, layout, take_over, record=False)  # another recipe's folder: refused before anything
    force = _force(force, only, start)
    check_recipe(loaded, selected)  # everything knowable without training, before any stage runs
    if dry_run:
        actions, _ = plan_actions(loaded, selected, force, cache=HashCache(layout.hash_cache))
        return [(stage.name, action) for stage, action in actions]
    # Read once: an sbatch batch shell (SLURM_PROCID=0 of N, no srun step) is one process.
    place = DistInfo.from_env()
    main, world = place.is_main, place.world_size
    # One writer per run directory; the ranks of one multi-rank job are that one writer.
    with _labelled(recipe), RunLock(layout.lock, wait=wait_for_lock) if main else contextlib.nullcontext():
        if main:
            claim_run(loaded, layout, take_over, record=True)  # again under the lock: two writers at once
            completion.recover(layout)
        base_model = prepare_base_model(recipe, world)
        cache = HashCache(layout.hash_cache)
        actions, prints = plan_actions(loaded, selected, force, base_model, cache)
        if world > 1:
            _check_multirank(actions)
        if main:
            cache.save()
            layout.resolved_recipe.write_text(loaded.resolved_yaml(), encoding="utf-8")
            write_run_plan(recipe)  # the report's planned energy: read outside evaluate's print
        models = run_models([s for s, _ in actions], layout)
        checked: set[str] = set()
        for stage, action in actions:
            if action not in WORKING:
                log.info("%s %s", _stage_label(stage.name, recipe.name), action)
                _require_upstream(stage, action, selected)
                continue
            if world > 1 and stage.name not in TRAINING_STAGES and not main:
                continue
            _honour_stop(f"before stage {stage.name}")
            ctx = StageContext(run_dir=layout.root, stage=stage.name, seed=recipe.seed, base_model=base_model,
                               log=log, layout=layout, models=models, overwrite=overwrite, dist=place)
            _early_checks(actions, stage.name, ctx, checked)
            if stage.needs is not None and (dependency := stage.needs(ctx)) is not None:
                ctx = replace(ctx, needed={dependency.role: _run_dependency(dependency, stage.name)})
            _run_stage(stage, ctx, prints[stage.name], loaded, action, main)
            if stage.check_after is not None:
                stage.check_after(selected)
        _honour_stop(f"after stage {selected[-1]}")
    return [(stage.name, action) for stage, action in actions]


def _early_checks(actions: list[tuple[Stage, str]], reached: str, ctx: StageContext, done: set[str]) -> None:
    """Each working stage's `early_check`, once, as soon as the pipeline reaches a stage past the one
    whose output it needs (`pipeline.stages.EarlyCheck`): the training stages' epochs on the token
    shards, before the embeddings stage and stage 1 spend their time."""
    for stage, action in actions:
        early = stage.early_check
        if early and action in WORKING and stage.name not in done and STAGES.index(reached) > STAGES.index(early.after):
            early.check(ctx)
            done.add(stage.name)


def prepare_base_model(recipe: Recipe, world_size: int = 1) -> str | None:
    """The base model's local folder, its own run first when it is to be built, fetched if a Hub id."""
    if (build := base_build(recipe)) is not None:
        if world_size > 1:
            raise LangadaptError(f"base_model.path {recipe.base_model.path} is missing: build it in one "
                                 f"process first (langadapt run {recipe.base_model.build_recipe})")
        base = Dependency("base", "the base model", build, Path(str(recipe.base_model.path)))
        _run_dependency(base, "every stage")
    return resolve_base_model(recipe, fetch=True)


def _run_dependency(dependency: Dependency, needed_by: str) -> Path:
    """Run (or find finished) a run this one depends on; its output, checked to exist."""
    other = dependency.loaded.recipe
    log.info("%s needs %s: run %s in %s", needed_by, dependency.about, other.name, other.run_dir)
    run_pipeline(dependency.loaded, force=False, wait_for_lock=True)
    if not dependency.output.exists():
        raise LangadaptError(f"run {other.name} ({dependency.about}) finished without producing {dependency.output}")
    return dependency.output


def planned_dependencies(recipe: Recipe) -> list[str]:
    """The runs `run_pipeline` would start besides this recipe's stages, one line each (dry run)."""
    lines = []
    if (build := base_build(recipe)) is not None:
        lines.append(f"base model: {recipe.base_model.path} is missing; built first by run {build.recipe.name} "
                     f"({recipe.base_model.build_recipe})")
    if recipe.wants_cold_twin:
        lines.append(f"cold twin: run {recipe.name}{COLD_SUFFIX} (init: scratch at equal compute), before evaluate")
    return lines


def _honour_stop(where: str) -> None:
    """Exit with the requeue code once a stop signal has arrived (Slurm's warning, a `kill`).

    Checked between stages and once more after the last one: a signal during the final selected
    stage (`--until data`) must not end in exit 0 as if nobody had asked the run to stop. The stage
    it came during ran to its end (non-training stages do not stop midway), so it is complete."""
    if signals.stop_pending():
        raise signals.Preempted(f"{where} (completed stages are kept)")


def dry_run(loaded: LoadedRecipe, only: str | None = None, start: str | None = None,
            until: str | None = None, force: bool | None = None) -> tuple[list[tuple[str, str]], Report]:
    """What `run` would do, and every problem that would stop it: (stage, action) pairs (empty
    when the problems keep them from being known) and the report of all the problems at once."""
    selected = select_stages(list(STAGES), only, start, until)
    layout = RunLayout(loaded.recipe.run_dir)
    report = Report(loaded.path, loaded.inheritance, loaded.overrides)
    with report.guard():  # first: the preflight's last check (transformers) waits for a valid recipe
        claim_run(loaded, layout, take_over=force is True, record=False)
    find_problems(loaded, selected, report=report)
    force = _force(force, only, start)
    actions: list[tuple[str, str]] = []
    try:
        cache = HashCache(layout.hash_cache)
        actions = [(stage.name, action) for stage, action in plan_actions(loaded, selected, force, cache=cache)[0]]
    except LangadaptError as exc:  # a consequence of a problem found already (a mixture naming no source), or one more
        if not report.problems:
            report.add_line(str(exc))
    return actions, report


def _require_upstream(stage: Stage, action: str, selected: list[str]) -> None:
    if action == "not selected" and selected and STAGES.index(stage.name) < STAGES.index(selected[0]):
        raise LangadaptError(f"stage {stage.name} is not complete (or its inputs changed): "
                             f"run it first, e.g. langadapt run RECIPE --until {stage.name}")


def _check_multirank(actions: list[tuple[Stage, str]]) -> None:
    """Under torchrun/srun only training is multi-rank; data preparation must already be done.

    Nor can ranks discard a partial training stage together: the other ranks would find its old
    fingerprint and read checkpoints rank 0 is deleting."""
    for stage, action in actions:
        if action == RUN_AFRESH:
            raise LangadaptError(
                f"stage {stage.name}: --force/--from/--only would discard its partial checkpoints, which a "
                f"multi-rank launch cannot do safely: delete {stage.name}/ in the run folder first, "
                "or launch without those flags to resume")
    for stage, action in actions:
        if stage.name in TRAINING_STAGES:
            return
        if action in (*WORKING, "not selected"):
            raise LangadaptError(
                f"stage {stage.name} must be complete before a multi-rank launch: "
                "run `langadapt run RECIPE --until embeddings` in one process first")


def _run_stage(stage: Stage, ctx: StageContext, fingerprint: str, loaded: LoadedRecipe, action: str,
               main: bool) -> None:
    """Run one stage and mark it complete (the manifest and marker by rank 0, `main`, alone).

    Training stages run in their own folder and resume its checkpoints after a crash. Every
    other stage is built in a work folder beside its previous output and swapped in only once
    complete, so a failed re-run (a bad suite, a full disk) leaves the last good output in place."""
    final = ctx.layout.stage_dir(stage.name)
    in_place = stage.name in TRAINING_STAGES
    folder = final if in_place else ctx.layout.work_dir(stage.name)
    if main:
        resumed = completion.prepare_stage_dir(folder, fingerprint, keep_partial=action != RUN_AFRESH)
    else:  # other ranks must not race rank 0's clean-up of the folder; only rank 0 knows what it kept
        completion.wait_for_fingerprint(folder, fingerprint)
        resumed = False
    if not in_place:
        ctx = replace(ctx, layout=ctx.layout.building(stage.name, folder))
    label = _stage_label(stage.name, loaded.recipe.name)
    log.info("%s %s%s", label, action, " (keeping partial work)" if resumed else "")
    if stage.announce is not None:
        log.info("%s", stage.announce(loaded))
    started = time.time()
    summary = stage.run(ctx)
    if not isinstance(summary, dict):  # the manifest records it; every stage's protocol says a dict
        raise TypeError(f"stage {stage.name} returned {type(summary).__name__}, not its summary dict")
    summary = _relocate(summary, folder, final)
    if not main:
        return
    completion.write_manifest(folder, {
        "stage": stage.name,
        "fingerprint": fingerprint,
        "config_hash": recipe_hash(loaded, stage),  # the recipe part of `fingerprint`, as pinned
        "recipe": str(loaded.path),
        "base_model": ctx.base_model,
        "versions": completion.library_versions(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "wall_seconds": round(time.time() - started, 3),
        "summary": summary,
    })
    if not in_place:
        completion.promote(folder, final, ctx.layout.retired_dir(stage.name))
    log.info("%s done in %.1f s", label, time.time() - started)


def _relocate(value: Any, work: Path, final: Path) -> Any:
    """Paths in a stage's summary name where the output ends up, not the work folder."""
    if isinstance(value, str) and value.startswith(str(work)):
        return str(final) + value[len(str(work)):]
    if isinstance(value, dict):
        return {k: _relocate(v, work, final) for k, v in value.items()}
    if isinstance(value, list):
        return [_relocate(v, work, final) for v in value]
    return value
