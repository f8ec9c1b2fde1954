"""One stage protocol: every stage's entry point is `run(slice, ctx) -> dict`, its slice a frozen
object bound by the stage table; and the evaluate stage reports `langadapt plan`'s energy estimate
from the plan the run wrote, outside its print, so a `--set cluster.*` re-runs no evaluation and
still leaves no report stale."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.recipes import scratch_recipe

from langadapt.evaluation.training_report import planned_energy
from langadapt.pipeline import runner as pipeline
from langadapt.pipeline.stages import Entry
from langadapt.planning import recipe_plan
from langadapt.planning.recipe_plan import write_run_plan
from langadapt.recipe import load_recipe
from langadapt.recipe.tokenizer import TokenizerSlice
from langadapt.run.context import StageContext
from langadapt.run.fingerprint import fingerprints
from langadapt.run.layout import STAGES, RunLayout

REPO = Path(__file__).resolve().parents[2]
RECIPES = ("recipes/tiny_norwegian_warm.yaml", "recipes/tiny_english_source.yaml")
"""A warm recipe and a scratch one: between them every stage module the table can bind."""


def protocol_problems(function: Callable[..., Any], bound: Any) -> list[str]:
    """What keeps `function` with slice `bound` from the protocol (empty: it keeps it)."""
    problems = []
    parameters = list(inspect.signature(function).parameters.values())
    if [p.kind for p in parameters] != [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 2:
        problems.append(f"takes ({', '.join(map(str, parameters))}), not exactly (slice, ctx)")
    elif any(p.default is not inspect.Parameter.empty for p in parameters):
        problems.append("gives a parameter a default: a stage gets everything from its slice and ctx")
    hints = typing.get_type_hints(function)
    names = [p.name for p in parameters]
    if len(names) == 2 and names != ["slice_", "ctx"]:
        # `job` is train.job.TrainingJob, what `fit` runs: a stage's slice is not called that.
        problems.append(f"names its parameters ({', '.join(names)}), not (slice_, ctx)")
    if len(names) == 2:
        if hints.get(names[0]) is not type(bound):
            problems.append(f"annotates its slice as {hints.get(names[0])}, but is bound {type(bound).__name__}")
        if hints.get(names[1]) is not StageContext:
            problems.append(f"annotates ctx as {hints.get(names[1])}, not StageContext")
    if typing.get_origin(hints.get("return")) is not dict:
        problems.append(f"returns {hints.get('return')}, not a dict summary")
    if not (dataclasses.is_dataclass(bound) and type(bound).__dataclass_params__.frozen):
        problems.append(f"is bound a {type(bound).__name__}, not a frozen dataclass")
    return problems


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_stage_of_the_table_keeps_the_protocol(recipe: str) -> None:
    table = pipeline.stage_table(load_recipe(REPO / recipe).recipe)
    assert [stage.name for stage in table] == list(STAGES)
    found = {}
    for stage in table:
        assert isinstance(stage.run, Entry), f"{stage.name}: its entry point is not bound by the table"
        found[stage.name] = protocol_problems(stage.run.function(), stage.run.slice)
    assert found == {name: [] for name in STAGES}


def test_the_protocol_check_sees_each_way_to_break_it() -> None:
    ok = TokenizerSlice(config=None)  # type: ignore[arg-type]

    def extra(slice_: TokenizerSlice, ctx: StageContext, num_workers: int | None = None) -> dict[str, Any]:
        return {}

    def defaulted(slice_: TokenizerSlice, ctx: StageContext = None) -> dict[str, Any]:  # type: ignore[assignment]
        return {}

    def wrong_slice(slice_: dict, ctx: StageContext) -> dict[str, Any]:
        return {}

    def no_summary(slice_: TokenizerSlice, ctx: StageContext) -> None:
        return None

    def good(slice_: TokenizerSlice, ctx: StageContext) -> dict[str, Any]:
        return {}

    def misnamed(job: TokenizerSlice, ctx: StageContext) -> dict[str, Any]:
        return {}

    assert protocol_problems(good, ok) == []
    assert "not exactly (slice, ctx)" in protocol_problems(extra, ok)[0]
    assert "default" in protocol_problems(defaulted, ok)[0]
    assert "bound TokenizerSlice" in protocol_problems(wrong_slice, ok)[0]
    assert "not a dict summary" in protocol_problems(no_summary, ok)[0]
    assert protocol_problems(misnamed, ok) == ["names its parameters (job, ctx), not (slice_, ctx)"]
    assert "not a frozen dataclass" in protocol_problems(good, {"config": None})[-1]


def test_a_stage_that_returns_no_summary_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "stage_table", lambda recipe: [
        pipeline.Stage(name, (), lambda ctx: None) for name in STAGES])  # type: ignore[arg-type,return-value]
    monkeypatch.setattr(pipeline, "check_recipe", lambda loaded, selected: None)  # the stub reads nothing
    loaded = load_recipe(_write(tmp_path))
    with pytest.raises(TypeError, match="stage data returned NoneType, not its summary dict"):
        pipeline.run_pipeline(loaded, until="data")
    assert not RunLayout(loaded.recipe.run_dir).stage_dir("data").joinpath("COMPLETE").exists()


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
def test_a_disabled_training_stage_is_skipped_never_entered(tmp_path: Path, stage: str) -> None:
    """The training entry has no `enabled: false` branch: the table gives a disabled stage its skip
    reason, and the runner enters only the stages it runs or resumes."""
    loaded = load_recipe(REPO / RECIPES[0], [f"run_root={tmp_path}", f"{stage}.enabled=false"])
    actions, _ = pipeline.plan_actions(loaded, list(STAGES), force=False)
    action = dict((s.name, a) for s, a in actions)[stage]
    assert action == f"skip ({stage}.enabled is false)" and action not in pipeline.WORKING


def _write(tmp_path: Path, name: str = "r") -> Path:
    (tmp_path / "nb.txt").write_text("hei")
    path = tmp_path / f"{name}.yaml"
    path.write_text(scratch_recipe(tmp_path, name))
    return path


def test_evaluate_reports_the_plan_the_run_wrote_and_its_print_leaves_the_estimate_out(tmp_path: Path) -> None:
    """The report's planned energy is the plan the pipeline wrote into the run folder when it started
    (plan.json beside the resolved recipe), read outside evaluate's print: a change that moves only
    the estimate (hardware, MFU, GPUs per node) re-runs no evaluation, yet the next run's report
    shows it; a change to training moves both."""
    def evaluate(overrides: list[str]) -> tuple[str, dict]:
        loaded = load_recipe(REPO / "recipes/tiny_english_source.yaml", [f"run_root={tmp_path}", *overrides])
        prints = fingerprints(loaded, pipeline.stage_table(loaded.recipe))
        RunLayout(loaded.recipe.run_dir).root.mkdir(parents=True, exist_ok=True)
        write_run_plan(loaded.recipe)  # what run_pipeline writes beside recipe.resolved.yaml
        return prints["evaluate"], planned_energy(RunLayout(loaded.recipe.run_dir))

    before, planned = evaluate([])
    assert "h100" in planned["note"].lower() and planned["joules_per_step"]
    for change in ("cluster.hardware=a100", "cluster.mfu=0.2", "cluster.gpus_per_node=4"):
        after, moved = evaluate([change])
        assert after == before, change  # an estimate is no score
        assert moved["joules_per_step"] != planned["joules_per_step"], change  # the report shows it
    assert "a100" in evaluate(["cluster.hardware=a100"])[1]["note"].lower()
    for change in ("stage2.grad_accum_steps=2", "stage2.seq_len=96"):
        after, moved = evaluate([change])
        assert after != before and moved["joules_per_step"] != planned["joules_per_step"], change
    for unread in ("stage2.log_every=7", "stage2.checkpoint.every_steps=3", "export.dtype=float32"):
        assert evaluate([unread])[0] == before, unread


def test_a_plan_that_cannot_be_made_stops_no_run_and_the_report_says_why(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_recipe(REPO / "recipes/tiny_english_source.yaml", [f"run_root={tmp_path}"])
    layout = RunLayout(loaded.recipe.run_dir)
    layout.root.mkdir(parents=True)
    assert planned_energy(layout) is None  # no plan and no recipe: no column

    def broken(recipe: object) -> dict:
        raise KeyError("num_layers")

    monkeypatch.setattr(recipe_plan, "plan_recipe", broken)
    recipe_plan.write_run_plan(loaded.recipe)  # a fault in an estimate is recorded, not raised
    assert planned_energy(layout) == {"joules_per_step": {}, "note": "no plan estimate: KeyError: 'num_layers'"}


def test_stage_specific_work_is_declared_by_the_stages_not_the_runner() -> None:
    """The runner is generic: stage 2's inheritance line and the training stages' epochs check
    before training are hooks of those stages in the table (`announce`, `early_check`)."""
    loaded = load_recipe(REPO / RECIPES[0])
    table = {stage.name: stage for stage in pipeline.stage_table(loaded.recipe)}
    assert [name for name, stage in table.items() if stage.announce] == ["stage2"]
    line = table["stage2"].announce(loaded)
    assert line.startswith("stage2 inherits from stage1: ") and "; overrides: " in line
    assert {name: stage.early_check.after for name, stage in table.items() if stage.early_check} == \
        {"stage1": "tokenizer", "stage2": "tokenizer"}
