"""`langadapt plan`, the preflight check and the training stream plan a stage's mixture with one
call (`data.epochs.stage_plan`): for the same recipe and token shards they get the same MixPlan.

Each path is run as the product runs it (plan_recipe, preflight's report_estimated_epochs, the training
stage's plan_epochs_on_shards on the stage table's slice); a spy on the name each module calls records the
plan it got. The recipe makes the inputs that used to be assembled three times matter: a stage-1
source above the 16-epoch cap (only `data.force_epochs` lets it plan), a stage-2 replay share, and
a global batch with gradient accumulation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import langadapt.data.stream
import langadapt.pipeline.preflight_data
import langadapt.planning.recipe_plan
from langadapt.data.epochs import stage_plan
from langadapt.data.schedule import MixPlan
from langadapt.errors import LangadaptError
from langadapt.pipeline.preflight_data import report_estimated_epochs as preflight_epochs
from langadapt.pipeline.stages import stage_table
from langadapt.planning.recipe_plan import plan_recipe
from langadapt.recipe import load_recipe
from langadapt.recipe.errors import Report
from langadapt.run.context import StageContext
from langadapt.run.layout import RunLayout
from langadapt.runtime.placement import DistInfo
from langadapt.train.stage import plan_epochs_on_shards as training_epochs
from tests.helpers.shards import make_shards

RECIPE = """\
name: mix
run_root: {root}/runs
init: warm
base_model: {{path: {root}/base}}
data:
  force_epochs: {force}
  sources:
    - {{name: nb, path: {root}/nb.txt, lang: nb}}
    - {{name: en, path: {root}/en.txt, lang: en, role: replay}}
tokenizer: {{vocab_size: 300}}
stage1: {{steps: 50, micro_batch_size: 8, seq_len: 16, mixture: {{en: {{epochs: 20}}}}}}
stage2: {{steps: 40, micro_batch_size: 4, grad_accum_steps: 2, replay: 0.3}}
"""
BASE = {"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 300, "max_position_embeddings": 64}
CALLERS = {"plan": langadapt.planning.recipe_plan, "preflight": langadapt.pipeline.preflight_data,
           "training": langadapt.data.stream}


def _recipe(tmp_path: Path, force: bool):
    (tmp_path / "base").mkdir(exist_ok=True)
    (tmp_path / "base" / "config.json").write_text(json.dumps(BASE))
    for name in ("nb", "en"):
        (tmp_path / f"{name}.txt").write_text("text\n")
    path = tmp_path / "mix.yaml"
    path.write_text(RECIPE.format(root=tmp_path, force=str(force).lower()))
    loaded = load_recipe(path)
    tokens = RunLayout(loaded.recipe.run_dir).tokenizer.tokens
    if not tokens.is_dir():
        make_shards(tokens, {"nb": 3_000, "en": 200})  # en: 12 chunks of 16, 20 epochs in stage 1
    return path, loaded


def _plans(tmp_path: Path, monkeypatch, force: bool) -> dict[str, list[MixPlan]]:
    """Each caller's plans, stage 1 then stage 2, as the product computes them."""
    got: dict[str, list[MixPlan]] = {caller: [] for caller in CALLERS}
    for caller, module in CALLERS.items():
        def spy(*args, _caller=caller, **kwargs) -> MixPlan:
            plan = stage_plan(*args, **kwargs)
            got[_caller].append(plan)
            return plan
        monkeypatch.setattr(module, "stage_plan", spy)
    path, loaded = _recipe(tmp_path, force)
    recipe = loaded.recipe
    planned = plan_recipe(recipe, num_gpus=1)
    report = Report(path, {}, {})
    preflight_epochs(recipe, ["stage1", "stage2"], 1, report)
    assert report.problems == []
    table = {stage.name: stage for stage in stage_table(recipe)}
    for name in ("stage1", "stage2"):
        ctx = StageContext(recipe.run_dir, name, recipe.seed, dist=DistInfo(world_size=1))
        training_epochs(table[name].run.slice, ctx)
    reported = [{s["name"]: (s["tokens"], s["epochs"]) for s in stage["mixture"]["sources"]} for stage in planned["stages"]]
    assert reported == [{s.name: (s.tokens, s.epochs) for s in plan.sources} for plan in got["plan"]]
    return got


def test_plan_preflight_and_training_get_the_same_mixture_plan(tmp_path: Path, monkeypatch) -> None:
    got = _plans(tmp_path, monkeypatch, force=True)
    assert all(len(plans) == 2 for plans in got.values()), {caller: len(p) for caller, p in got.items()}
    assert got["plan"] == got["preflight"] == got["training"]
    first, second = got["plan"]
    assert first.total_tokens == 50 * 8 * 16  # steps x global batch x seq_len
    assert second.total_tokens == 40 * 4 * 2 * 16  # gradient accumulation is in the global batch
    assert first.source("en").epochs == pytest.approx(20)  # above the cap: planned only because forced
    assert second.source("en").tokens == pytest.approx(0.3 * second.total_tokens)  # stage 2's replay share


def test_without_force_all_three_refuse_the_same_source(tmp_path: Path) -> None:
    path, loaded = _recipe(tmp_path, force=False)
    recipe = loaded.recipe
    with pytest.raises(LangadaptError) as planned:
        plan_recipe(recipe, num_gpus=1)
    report = Report(path, {}, {})
    preflight_epochs(recipe, ["stage1"], 1, report)
    slice_ = {stage.name: stage for stage in stage_table(recipe)}["stage1"].run.slice
    with pytest.raises(LangadaptError) as trained:
        training_epochs(slice_, StageContext(recipe.run_dir, "stage1", recipe.seed, dist=DistInfo(world_size=1)))
    assert "source en: 20.0 epochs is above 16" in str(planned.value)
    assert [problem for _, problem in report.problems] == [f"stage1.steps: {planned.value}"]
    assert str(planned.value) in str(trained.value)
